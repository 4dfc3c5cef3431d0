"""Token estimation, in pure Python: the reference for ``contextfold-core``'s tokens.rs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._contract import (
    I64_MAX,
    MESSAGE_OVERHEAD,
    PerMessage,
    Sizing,
    content_and_calls,
    encoding_name,
    resolved,
    role_of,
    tiktoken_count,
)
from .._js import json_length, utf16_len
from ..errors import ArgumentError, MessageTypeError

if TYPE_CHECKING:  # numpy is imported on first use: most callers never need it
    import numpy as np


def checked_role(message: Any, index: int | None = None) -> str:
    """The role, after checking the message's shape (nested values are checked when sized)."""
    role = role_of(message, index)
    content_and_calls(message, index)
    return role


def message_units(message: dict[str, Any], index: int | None = None) -> int:
    """UTF-16 length of a message's text: content (or its JSON), then tool_calls JSON."""
    content, calls = content_and_calls(message, index)
    if isinstance(content, str):
        units = utf16_len(content)
    elif content is None:
        units = 2
    else:
        units = json_length(content, "content", index)
    if calls is not None:
        units += json_length(calls, "tool_calls", index)
    return units


def _default_tokens(index: int | None, message: dict[str, Any]) -> int:
    return -(-message_units(message, index) // 4) + MESSAGE_OVERHEAD


class Transcript:
    """Roles read (and checked) up front; each message sized once, on first use.

    The list is read once, here: what an estimator later does to the caller's list does
    not reach the result (the native backend reads it the same way)."""

    __slots__ = ("_size", "messages", "roles", "sizes")

    def __init__(self, messages: Any, sizing: Sizing = None) -> None:
        if not isinstance(messages, list):
            raise MessageTypeError(f"messages: expected a list, got {type(messages).__name__}", None, "")
        self.messages: list[Any] = list(messages)
        self.roles = [checked_role(m, i) for i, m in enumerate(self.messages)]
        self.sizes: list[int | None] = [None] * len(self.messages)
        sizers = resolved(sizing)
        self._size: PerMessage = _default_tokens if sizers is None else sizers[0]

    def __len__(self) -> int:
        return len(self.messages)

    def tokens(self, i: int) -> int:
        size = self.sizes[i]
        if size is None:
            size = self.sizes[i] = self._size(i, self.messages[i])
        return size

    def sum(self, start: int, stop: int) -> int:
        tokens = self.tokens
        return sum(tokens(i) for i in range(start, stop))


def estimate_tokens(text: str) -> int:
    return -(-utf16_len(text) // 4)


def count_tokens(text: str, name: str) -> int:
    return tiktoken_count(encoding_name(name))(text)


def message_tokens(message: Any, estimate: Sizing = None) -> int:
    role_of(message)
    sizers = resolved(estimate)
    return (_default_tokens if sizers is None else sizers[0])(None, message)


def tokens_of(messages: Any, estimate: Sizing = None) -> int:
    t = Transcript(messages, estimate)
    return t.sum(0, len(t))


def message_tokens_array(messages: Any, estimate: Sizing = None) -> np.ndarray:
    t = Transcript(messages, estimate)
    import numpy as np

    return np.fromiter((_int64(i, t.tokens(i)) for i in range(len(t))), dtype=np.int64, count=len(t))


def _int64(i: int, size: int) -> int:
    if size > I64_MAX:
        raise ArgumentError(f"message {i} costs {size} tokens, more than an int64 array holds")
    return size


def check_limits(window: int, token_budget: int) -> None:
    if window < 4 or token_budget < 4:
        raise ArgumentError(
            f"window and token_budget must be at least 4 (got window={window}, token_budget={token_budget})"
        )
