"""Chunked windowing, in pure Python: the reference for ``contextfold-core``'s window.rs.

Same algorithm, same early stop: the answer is decided walking back from the newest
message and the oldest messages are sized only when it cannot be decided otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .._contract import Counting
from ..errors import ArgumentError
from .tokens import Transcript, check_limits

if TYPE_CHECKING:  # numpy is imported on first use: most callers never need it
    import numpy as np

COMPACT_TAIL_TURNS = 8
COMPACT_TAIL_MAX_MESSAGES = 40


class _Sized(Protocol):
    roles: list[Any]

    def __len__(self) -> int: ...

    def tokens(self, i: int) -> int: ...


class _Arrays:
    """Sizes and a user mask in the shape of a Transcript (the numpy entry point)."""

    __slots__ = ("roles", "sizes")

    def __init__(self, sizes: np.ndarray, user: np.ndarray) -> None:
        self.sizes = [int(s) for s in sizes]
        for i, s in enumerate(self.sizes):
            if s < 0:
                raise ArgumentError(f"sizes[{i}] is negative ({s})")
        self.roles = ["user" if u else "" for u in user.tolist()]

    def __len__(self) -> int:
        return len(self.sizes)

    def tokens(self, i: int) -> int:
        return self.sizes[i]


def _last_user(roles: list[Any]) -> int:
    for i in range(len(roles) - 1, -1, -1):
        if roles[i] == "user":
            return i
    return -1


def _suffix_exceeds(t: _Sized, start: int, budget: int) -> bool:
    total = 0
    for i in range(len(t) - 1, start - 1, -1):
        total += t.tokens(i)
        if total > budget:
            return True
    return False


def _message_front(n: int, window: int) -> int:
    chunk = window // 4
    return 0 if n <= window else -(-(n - window) // chunk) * chunk


def _token_cut_from_start(t: _Sized, budget: int, chunk: int) -> int:
    sizes = [t.tokens(i) for i in range(len(t))]
    remaining = sum(sizes)
    if remaining <= budget:
        return 0
    dropped = 0
    for i, size in enumerate(sizes):
        crossed = (dropped + size) // chunk > dropped // chunk
        dropped += size
        remaining -= size
        if crossed and remaining <= budget:
            return i + 1
    return len(sizes)


def _token_front(t: _Sized, window_tokens: int, front: int, last_user: int) -> int:
    chunk = window_tokens // 4
    suffix = 0
    at_front = -1
    for p in range(len(t) - 1, -1, -1):
        suffix += t.tokens(p)
        if suffix > window_tokens:
            if p + 1 >= last_user:
                return last_user
            break
        if p == front:
            at_front = suffix
        if at_front >= 0 and p < front and suffix - at_front >= chunk:
            return front
        if p == 0:
            return front
    return min(max(front, _token_cut_from_start(t, window_tokens, chunk)), last_user)


def _window_start(t: _Sized, window: int, token_budget: int) -> int:
    check_limits(window, token_budget)
    roles = t.roles
    n = len(t)
    last_user = _last_user(roles)
    if last_user < 0:
        return n - 1 if _suffix_exceeds(t, 0, token_budget) else 0
    front = _message_front(n, window)
    start = last_user if front >= last_user else _token_front(t, token_budget, front, last_user)
    while roles[start] != "user":
        start += 1
    return start


def window_start(messages: Any, window: int, token_budget: int, estimate: Counting = None) -> int:
    return _window_start(Transcript(messages, estimate), window, token_budget)


def window_start_array(sizes: np.ndarray, user: np.ndarray, window: int, token_budget: int) -> int:
    if len(sizes) != len(user):
        raise ArgumentError(f"sizes and user_mask differ in length ({len(sizes)} and {len(user)})")
    return _window_start(_Arrays(sizes, user), window, token_budget)


def _verbatim_start(roles: list[Any], i: int) -> int:
    n = len(roles)
    i = min(max(i, 0), n)
    while i < n and roles[i] == "tool":
        i += 1
    return i


def verbatim_start(messages: Any, i: int) -> int:
    return _verbatim_start(Transcript(messages).roles, i)


def compact_tail_start_for_budget(messages: Any, budget: int, estimate: Counting = None) -> int:
    t = Transcript(messages, estimate)
    n = len(t)
    start = n
    total = 0
    while start > 0:
        taken = n - start
        if taken >= COMPACT_TAIL_MAX_MESSAGES:
            break
        cost = t.tokens(start - 1)
        if taken >= COMPACT_TAIL_TURNS and total + cost > budget:
            break
        total += cost
        start -= 1
    return _verbatim_start(t.roles, start)


def pinned_directive_index(messages: Any, tail_start: int) -> int:
    last_user = _last_user(Transcript(messages).roles)
    return last_user if 0 <= last_user < tail_start else -1
