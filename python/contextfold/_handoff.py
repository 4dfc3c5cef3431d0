"""What handoff packing takes and returns, shared by both backends.

:func:`pack_arguments` is the one place the arguments of ``pack_handoff`` are checked and
normalised. The reference calls it on every call; the extension reads the plain case
(int budget, no estimator, pins a list or tuple of ints, known shape and cut) itself and
hands anything else to it, so both raise the same errors in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from ._args import whole
from ._estimate import Estimator, PerMessage, PerText, sizers
from .errors import ArgumentError, MessageTypeError, RequestError


class HandoffPack(NamedTuple):
    """The result of :func:`contextfold.pack_handoff` (immutable; fields by name)."""

    messages: list[Any]
    """The packed transcript: the caller's own message objects, plus the note (a new dict)."""
    dropped: int
    """Input messages not in the output (a dropped volatile tail included)."""
    fits: bool
    """False when the system messages, directive and pinned turns alone exceed the budget."""
    tokens: int
    """Estimated tokens of the output, the note and a separate ``system`` included."""
    budget: int
    """``target_context_tokens - reserve_output_tokens``."""
    note: str | None
    """The note's text, or None when nothing was folded (or no note fitted)."""
    kept: list[int]
    """Indices of the input messages kept, in output order."""


class PackedRequest(NamedTuple):
    """The result of :func:`contextfold.pack_request` (immutable; fields by name)."""

    body: bytes
    """The packed body; the input object itself when it is ``bytes`` and already fits."""
    fits: bool
    """False when the system messages, directive and pinned turns alone exceed the budget."""
    tokens: int
    """Estimated tokens of the packed messages, the note and a top-level ``system``."""
    budget: int
    """``target_context_tokens - reserve_output_tokens``."""
    dropped: int
    """Input messages not in the packed body."""
    note: str | None
    """The note's text, or None when nothing was folded (or no note fitted)."""
    kept: list[int]
    """Indices of the input messages kept, in output order."""


def as_bytes(body: Any) -> bytes:
    """A request body as ``bytes``: itself when it is ``bytes``, else a copy (a mutable
    buffer could change while it is read), a ``str`` encoded as UTF-8."""
    if type(body) is bytes:
        return body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestError(f"not UTF-8: the str holds a lone surrogate at index {exc.start}") from None
    raise TypeError(f"body must be bytes, bytearray, memoryview or str, got {type(body).__name__}")


def handoff_budget(target_context_tokens: int, reserve_output_tokens: int = 0) -> int:
    """Tokens the packed transcript may use: the target window minus the reserved output."""
    target = whole("target_context_tokens", target_context_tokens)
    reserve = whole("reserve_output_tokens", reserve_output_tokens)
    if reserve > target:
        raise ArgumentError(f"reserve_output_tokens ({reserve}) exceeds target_context_tokens ({target})")
    return target - reserve


class PackArguments(NamedTuple):
    """``pack_handoff``'s arguments, checked: what a backend packs with."""

    budget: int
    sizers: tuple[PerMessage, PerText] | None
    pinned: list[int]
    summary: str | None
    system: str | list[Any] | None
    """Still to be sized, by the backend, as a system message's content."""
    shape: str
    chunk_tokens: int | None
    """None for the greedy cut."""


def pack_arguments(
    target_context_tokens: int,
    reserve_output_tokens: int,
    estimate_tokens: Estimator | None,
    pinned: Iterable[int],
    summary: str | None,
    system: str | list[Any] | None,
    shape: str,
    cut: str,
    chunk_tokens: int | None,
) -> PackArguments:
    """Checks ``pack_handoff``'s arguments in order; the first at fault raises."""
    budget = handoff_budget(target_context_tokens, reserve_output_tokens)
    pins = [whole("pinned index", p) for p in pinned]
    if summary is not None and not isinstance(summary, str):
        raise ArgumentError(f"summary must be a str or None, got {type(summary).__name__}")
    chunk = chunk_size(budget, shape, cut, chunk_tokens)
    estimate = sizers(estimate_tokens)
    check_system(system)
    return PackArguments(budget, estimate, pins, summary, system, shape, chunk)


def chunk_size(budget: int, shape: str, cut: str, chunk_tokens: int | None) -> int | None:
    """The chunk size for ``cut`` (None for greedy), after checking the options."""
    if shape not in ("auto", "openai", "anthropic"):
        raise ArgumentError(f"shape must be 'auto', 'openai' or 'anthropic', not {shape!r}")
    if cut not in ("greedy", "chunked"):
        raise ArgumentError(f"cut must be 'greedy' or 'chunked', not {cut!r}")
    if cut == "greedy":
        return None
    return max(1, budget // 4) if chunk_tokens is None else whole("chunk_tokens", chunk_tokens, 1)


def check_system(system: Any) -> None:
    """A separate system prompt is None, a str or a list of blocks."""
    if system is not None and not isinstance(system, (str, list)):
        raise MessageTypeError(f"system: expected str, list or None, got {type(system).__name__}", None, "system")


def switch_point() -> None:
    """Does nothing, in Python code: a long native batch calls it now and then, and the
    interpreter, on entering it, hands the GIL to a thread waiting for it and runs pending
    signal handlers, as it does between bytecodes."""
