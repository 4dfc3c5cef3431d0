"""Token estimation, in pure Python: the reference for ``contextfold-core``'s tokens.rs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._contract import (
    I64_MAX,
    MESSAGE_OVERHEAD,
    Counting,
    PerMessage,
    content_and_calls,
    encoding_name,
    role_of,
)
from .._js import Visit, entry, is_list, json_length, listed, str_value, utf16_len
from ..errors import ArgumentError, MessageTypeError
from .count_cache import exact_count, resolved
from .items import MESSAGE, check_item, marks_responses, peek_item, rules_role
from .provider import provider_sizer

if TYPE_CHECKING:  # numpy is imported on first use: most callers never need it
    import numpy as np


def checked_role(message: Any, index: int | None = None) -> str:
    """The role, after checking the message's shape (nested values are checked when sized)."""
    role = role_of(message, index)
    content_and_calls(message, index)
    return role


def message_units(message: dict[str, Any], index: int | None = None, visit: Visit | None = None) -> int:
    """UTF-16 length of a message's text: content (or its JSON), then tool_calls JSON
    (objects measured as ``visit`` says, see :func:`~contextfold._js.json_length`)."""
    content, calls = content_and_calls(message, index)
    if isinstance(content, str):
        units = utf16_len(content)
    elif content is None:
        units = 2
    else:
        units = json_length(content, "content", index, visit)
    if calls is not None:
        units += json_length(calls, "tool_calls", index, visit)
    return units


def _default_tokens(index: int | None, message: dict[str, Any], whole: bool) -> int:
    units = json_length(message, "", index) if whole else message_units(message, index)
    return -(-units // 4) + MESSAGE_OVERHEAD


class TranscriptOnDemand:
    """A transcript read as packing reaches it (``contextfold-core``'s ``Transcript::read``).

    Nothing is checked up front: :meth:`role` and :meth:`peek` read an entry leniently
    (a role that is not a str reads as ``""``, no special role; an item whose ``type`` is
    not a str as an other item), and an entry is checked when it is sized
    (:meth:`tokens`) or listed in a note (:meth:`check`). ``responses`` is None until
    packing decides it (``shape="auto"``). The list is copied once, here.
    """

    __slots__ = ("_size", "messages", "responses", "sizes")

    def __init__(self, messages: Any, sizing: Counting, shape: str, image_tokens: int | None) -> None:
        if not is_list(messages):
            raise MessageTypeError(f"messages: expected a list, got {type(messages).__name__}", None, "")
        self.messages: list[Any] = listed(messages)
        self.responses: bool | None = {"auto": None, "responses": True}.get(shape, False)
        self.sizes: list[int | None] = [None] * len(self.messages)
        self._size: PerMessage = _sizer(sizing, image_tokens)

    def __len__(self) -> int:
        return len(self.messages)

    def role(self, i: int) -> str:
        if self.responses:
            return peek_item(self.messages[i])[0]
        m = self.messages[i]
        return rules_role(str_value(entry(m, "role")) or "") if issubclass(type(m), dict) else ""

    def peek(self, i: int) -> tuple[str, str]:
        """``(role, kind)``, read leniently."""
        return peek_item(self.messages[i]) if self.responses else (self.role(i), MESSAGE)

    def check(self, i: int) -> tuple[str, str]:
        """``(role, kind)``, checked."""
        m = self.messages[i]
        return check_item(m, i) if self.responses else (rules_role(checked_role(m, i)), MESSAGE)

    def tokens(self, i: int) -> int:
        size = self.sizes[i]
        if size is None:
            size = self.sizes[i] = self.size_of(i, self.messages[i])
        return size

    def size_of(self, i: int, m: Any) -> int:
        """What ``m`` costs as entry ``i`` (checked as it is sized)."""
        if self.responses:
            whole = check_item(m, i)[1] != MESSAGE
        else:  # content and tool_calls are checked as they are sized: the role first
            role_of(m, i)
            whole = False
        return self._size(i, m, whole)

    def cost_within(self, start: int, stop: int, budget: int) -> int | None:
        """What entries ``start:stop`` cost when it is at most ``budget`` (None when not),
        sized from the newest and no further once over."""
        total = 0
        tokens = self.tokens
        for i in range(stop - 1, start - 1, -1):
            total += tokens(i)
            if total > budget:
                return None
        return total if total <= budget else None

    def sum(self, start: int, stop: int) -> int:
        # A loop, not sum() over map() or a generator: an estimator's StopIteration ends
        # map() early (a short sum) and leaves a generator as a RuntimeError (PEP 479).
        tokens, total = self.tokens, 0
        for i in range(start, stop):
            total += tokens(i)
        return total


class Transcript(TranscriptOnDemand):
    """Roles read (and checked) up front; each message sized once, on first use.

    The list is read once, here: what an estimator later does to the caller's list does
    not reach the result (the native backend reads it the same way).

    ``shape`` ``"auto"`` reads Responses items when any entry marks them so
    (:func:`~.items.marks_responses`), else chat messages; ``"responses"`` reads items;
    any other shape reads chat messages. ``kinds`` is None for chat messages.
    """

    __slots__ = ("kinds", "roles")

    def __init__(
        self, messages: Any, sizing: Counting = None, shape: str = "auto", image_tokens: int | None = None
    ) -> None:
        super().__init__(messages, sizing, shape, image_tokens)
        self.kinds: list[str] | None = None
        if shape == "responses" or (shape == "auto" and any(marks_responses(m) for m in self.messages)):
            checked = [check_item(m, i) for i, m in enumerate(self.messages)]
            self.roles = [role for role, _ in checked]
            self.kinds = [kind for _, kind in checked]
        else:
            self.roles = [checked_role(m, i) for i, m in enumerate(self.messages)]
        self.responses = self.kinds is not None

    def tokens(self, i: int) -> int:
        size = self.sizes[i]
        if size is None:
            kinds = self.kinds
            size = self.sizes[i] = self._size(i, self.messages[i], kinds is not None and kinds[i] != MESSAGE)
        return size


def _sizer(sizing: Counting, image_tokens: int | None) -> PerMessage:
    """How each message is sized: a custom estimator or an embedded encoding, provider
    sizing (``image_tokens`` given), or the default estimate."""
    estimate = resolved(sizing, image_tokens)
    if estimate is not None:
        return estimate[0]
    if image_tokens is not None:
        return provider_sizer(image_tokens, message_units)
    return _default_tokens


# A str subclass is read by the text it holds (str.__str__), as natively: its own len,
# isascii and encode (which tiktoken calls on a text with a lone surrogate) never run.


def estimate_tokens(text: str) -> int:
    return -(-utf16_len(str.__str__(text)) // 4)


def count_tokens(text: str, name: str) -> int:
    return exact_count(encoding_name(name))(str.__str__(text))


def message_tokens(message: Any, estimate: Counting = None, image_tokens: int | None = None) -> int:
    if marks_responses(message):
        whole = check_item(message)[1] != MESSAGE
    else:
        role_of(message)
        whole = False
    return _sizer(estimate, image_tokens)(None, message, whole)


def tokens_of(messages: Any, estimate: Counting = None, image_tokens: int | None = None) -> int:
    return tokens_in(messages, estimate, image_tokens, "auto")


def tokens_in(messages: Any, estimate: Counting, image_tokens: int | None, shape: str) -> int:
    """Tokens of all the messages, read in ``shape``."""
    t = Transcript(messages, estimate, shape, image_tokens)
    return t.sum(0, len(t))


def message_tokens_array(messages: Any, estimate: Counting = None, image_tokens: int | None = None) -> np.ndarray:
    t = Transcript(messages, estimate, image_tokens=image_tokens)
    import numpy as np

    # A list, not np.fromiter over a generator: see TranscriptOnDemand.sum.
    return np.array([_int64(i, t.tokens(i)) for i in range(len(t))], dtype=np.int64)


def _int64(i: int, size: int) -> int:
    if size > I64_MAX:
        raise ArgumentError(f"message {i} costs {size} tokens, more than an int64 array holds")
    return size


def check_limits(window: int, token_budget: int) -> None:
    if window < 4 or token_budget < 4:
        raise ArgumentError(
            f"window and token_budget must be at least 4 (got window={window}, token_budget={token_budget})"
        )
