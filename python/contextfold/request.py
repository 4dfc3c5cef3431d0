"""Bytes in, bytes out: pack a chat request body without loading it into Python objects.

A gateway receives a request as JSON bytes and forwards JSON bytes. :func:`pack_request`
packs the body's ``messages`` (and counts Anthropic's top-level ``system``) exactly as
:func:`~contextfold.pack_handoff` packs ``json.loads(body)["messages"]``, and returns the
packed body: every byte outside the messages array, and every kept message, is copied
from the input (spacing, key order and escapes included), so a provider's prompt cache
keyed on bytes keeps hitting; only the note is written by contextfold, as compact JSON.

Reading follows ``json.loads``: escapes decoded, a lone ``\\ud800`` kept, numbers sized as
JavaScript prints them, a repeated key holds its last value, ``NaN`` and ``Infinity``
accepted, integers of at most 4,300 digits. A ``str`` body is read as its UTF-8 encoding;
a leading UTF-8 byte-order mark is skipped (and kept in the output).

Errors: for a body that loads, the error ``pack_handoff`` raises on the loaded value
(:class:`~contextfold.MessageTypeError` for a malformed message or a ``messages`` that is
not a list, …); :class:`~contextfold.RequestError` (a ``ValueError``) for a body that is
not UTF-8, not JSON ``json.loads`` would load (with the byte ``offset``), empty, not an
object, or without ``messages``. Nesting is limited to 100,000 levels natively; the
reference backend, which loads through ``json``, stops at Python's recursion limit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NamedTuple, Union

from . import _backend
from ._args import whole
from ._handoff import pack_arguments
from .errors import RequestError

__all__ = ["Body", "PackedRequest", "pack_request", "pack_requests"]

Body = Union[bytes, bytearray, memoryview, str]
"""What a request body may be given as."""


class PackedRequest(NamedTuple):
    """The result of :func:`pack_request` (immutable; fields by name)."""

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
    """The body as ``bytes``: itself when it is ``bytes``, else a copy (a mutable buffer
    could change while it is read), a ``str`` encoded as UTF-8."""
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


def pack_request(
    body: Body,
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    pinned: Iterable[int] = (),
    summary: str | None = None,
    shape: Literal["auto", "openai", "anthropic"] = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
) -> PackedRequest:
    """Pack a request body's ``messages`` into ``target_context_tokens -
    reserve_output_tokens`` tokens; the options are :func:`~contextfold.pack_handoff`'s.

    ``json.loads(result.body)`` equals the loaded request with ``messages`` replaced by
    ``pack_handoff(...).messages``; ``fits``, ``tokens``, ``dropped``, ``note`` and
    ``kept`` equal that pack's. The work runs with the GIL released.
    """
    args = pack_arguments(
        target_context_tokens, reserve_output_tokens, None, pinned, summary, None, shape, cut, chunk_tokens
    )
    outcome = _backend.impl.pack_request(
        as_bytes(body), args.budget, args.pinned, args.summary, shape, args.chunk_tokens
    )
    return packed(outcome, args.budget)


def pack_requests(
    bodies: Iterable[Body],
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    pinned: Iterable[int] = (),
    summary: str | None = None,
    shape: Literal["auto", "openai", "anthropic"] = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
    threads: int | None = None,
) -> list[PackedRequest | Exception]:
    """:func:`pack_request` over many bodies with the same options, on ``threads``
    threads (default: one a CPU; at most 64), with the GIL released for all the work.

    One bad body loses nothing else: the list holds, for each body in order, its
    :class:`PackedRequest` or the exception :func:`pack_request` would raise for it
    (check with ``isinstance(item, Exception)``). Bad options raise at once. Ctrl-C
    stops the batch between rounds of 1,024 bodies.
    """
    args = pack_arguments(
        target_context_tokens, reserve_output_tokens, None, pinned, summary, None, shape, cut, chunk_tokens
    )
    count = (os.cpu_count() or 1) if threads is None else whole("threads", threads, 1)
    inputs: list[bytes] = []
    refused: dict[int, Exception] = {}
    for i, body in enumerate(bodies):
        try:
            inputs.append(as_bytes(body))
        except (RequestError, TypeError) as exc:
            refused[i] = exc
            inputs.append(b"")
    outcomes = _backend.impl.pack_requests(
        inputs, args.budget, args.pinned, args.summary, shape, args.chunk_tokens, count
    )
    return [
        refused[i] if i in refused else outcome if isinstance(outcome, Exception) else packed(outcome, args.budget)
        for i, outcome in enumerate(outcomes)
    ]


def packed(outcome: Sequence[Any], budget: int) -> PackedRequest:
    """The :class:`PackedRequest` for a backend's ``(body, dropped, fits, tokens, note,
    kept, input_tokens)``."""
    body, dropped, fits, tokens, note, kept, _ = outcome
    return PackedRequest(body, fits, tokens, budget, dropped, note, kept)
