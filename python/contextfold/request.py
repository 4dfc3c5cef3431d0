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
from collections.abc import Iterable
from typing import Literal

from . import _backend
from ._contract import PackedRequest, as_bytes, whole

__all__ = ["Body", "PackedRequest", "as_bytes", "pack_request", "pack_requests"]

Body = bytes | bytearray | memoryview | str
"""What a request body may be given as."""


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
    ``kept`` equal that pack's. The native backend works with the GIL released.
    """
    return _backend.impl.pack_request(  # type: ignore[no-any-return]
        body, target_context_tokens, reserve_output_tokens, pinned, summary, shape, cut, chunk_tokens
    )


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
    :class:`PackedRequest` or the exception :func:`pack_request` raises for it (check
    with ``isinstance(item, Exception)``). Bad options raise at once. Ctrl-C stops the
    batch between rounds of 1,024 bodies. The reference backend packs one body after
    another.
    """
    count = (os.cpu_count() or 1) if threads is None else whole("threads", threads, 1)
    return _backend.impl.pack_requests(  # type: ignore[no-any-return]
        list(bodies), target_context_tokens, reserve_output_tokens, pinned, summary, shape, cut, chunk_tokens, count
    )
