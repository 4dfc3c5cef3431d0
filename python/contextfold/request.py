"""Bytes in, bytes out: pack a request body without loading it into Python objects.

A gateway receives a request as JSON bytes and forwards JSON bytes. :func:`pack_request`
packs the body exactly as :func:`~contextfold.pack_handoff` packs the loaded request
``req``, and returns the packed body: every byte outside the packed array, and every kept
message, is copied from the input (spacing, key order and escapes included), so a
provider's prompt cache keyed on bytes keeps hitting; only the note is written by
contextfold, as compact JSON. What is packed:

- a chat body (OpenAI chat completions, Anthropic Messages: it has ``messages``):
  ``pack_handoff(req["messages"], system=req.get("system"), tools=req.get("tools"))``;
- a Responses body (OpenAI ``/v1/responses``: ``input`` and no ``messages``):
  ``pack_handoff(req["input"], shape="responses", system=req.get("instructions"),
  tools=req.get("tools"))`` (``shape="auto"`` means ``"responses"`` here; another shape
  is used as given). A plain-string ``input`` is one user message and nothing to pack:
  the body comes back unchanged, ``kept == [0]``, ``tokens`` its count with
  ``instructions`` and ``tools``, ``fits`` whether that is within the budget.

The body's ``tools`` (tool definitions) count as ``pack_handoff(tools=...)`` counts them
and are never dropped; a body's other members (a chat body's ``instructions``, a
Responses body's ``system``) are not counted. ``estimate_tokens`` may name an embedded
encoding (``"o200k_base"``, ``"cl100k_base"``: exact counts, native and GIL-free) and
``sizing``/``image_tokens`` are ``pack_handoff``'s; a custom callable is not taken here
(it would run Python code in the middle of the bytes path): use ``pack_handoff``.

Reading follows ``json.loads``: escapes decoded, a lone ``\\ud800`` kept, numbers sized as
JavaScript prints them, a repeated key holds its last value, ``NaN`` and ``Infinity``
accepted, integers of at most 4,300 digits. The body must be strict UTF-8 (``json.loads``
given bytes also takes UTF-16 and UTF-32, and surrogates encoded in UTF-8: these are
refused). A ``str`` body is read as its UTF-8 encoding; a leading UTF-8 byte-order mark is
skipped (and kept in the output).

Errors: for a body that loads, the error ``pack_handoff`` raises on the loaded value
(:class:`~contextfold.MessageTypeError` for a malformed message, a ``messages`` that is
not a list, ``tools`` that are not a list of objects, …; an ``instructions`` of the wrong
type is named as ``instructions``); :class:`~contextfold.RequestError` (a ``ValueError``)
for a body that is not UTF-8, not JSON ``json.loads`` would load (with the byte
``offset``), empty, not an object, or with neither ``messages`` nor ``input``. Nesting
is limited to 100,000 levels natively; the reference backend, which loads through
``json``, stops at Python's recursion limit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal

from . import _backend
from ._contract import DEFAULT_IMAGE_TOKENS, EncodingName, PackedRequest, as_bytes, image_tokens_for, whole
from .errors import ArgumentError

__all__ = ["Body", "PackedRequest", "as_bytes", "pack_request", "pack_requests"]

Body = bytes | bytearray | memoryview | str
"""What a request body may be given as."""


Shape = Literal["auto", "openai", "anthropic", "responses"]


def pack_request(
    body: Body,
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    estimate_tokens: EncodingName | None = None,
    pinned: Iterable[int] = (),
    summary: str | None = None,
    shape: Shape = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
    sizing: Literal["seed", "provider"] = "seed",
    image_tokens: int = DEFAULT_IMAGE_TOKENS,
) -> PackedRequest:
    """Pack a request body's ``messages`` (a Responses body's ``input``) into
    ``target_context_tokens - reserve_output_tokens`` tokens; the options are
    :func:`~contextfold.pack_handoff`'s (``estimate_tokens``: None or an embedded
    encoding's name).

    ``json.loads(result.body)`` equals the loaded request with ``messages`` (``input``)
    replaced by ``pack_handoff(...).messages``; ``fits``, ``tokens``, ``dropped``,
    ``note`` and ``kept`` equal that pack's. The native backend works with the GIL
    released.
    """
    estimate, images = _sizing(estimate_tokens, sizing, image_tokens)
    return _backend.impl.pack_request(  # type: ignore[no-any-return]
        body,
        target_context_tokens,
        reserve_output_tokens,
        estimate,
        pinned,
        summary,
        shape,
        cut,
        chunk_tokens,
        images,
    )


def pack_requests(
    bodies: Iterable[Body],
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    estimate_tokens: EncodingName | None = None,
    pinned: Iterable[int] = (),
    summary: str | None = None,
    shape: Shape = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
    sizing: Literal["seed", "provider"] = "seed",
    image_tokens: int = DEFAULT_IMAGE_TOKENS,
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
    estimate, images = _sizing(estimate_tokens, sizing, image_tokens)
    count = (os.cpu_count() or 1) if threads is None else whole("threads", threads, 1)
    return _backend.impl.pack_requests(  # type: ignore[no-any-return]
        list(bodies),
        target_context_tokens,
        reserve_output_tokens,
        estimate,
        pinned,
        summary,
        shape,
        cut,
        chunk_tokens,
        images,
        count,
    )


def _sizing(estimate_tokens: object, sizing: str, image_tokens: int) -> tuple[str | None, int | None]:
    """The estimate (None or a name, checked by the backends with the other options) and
    the image cost (None: the seeds' sizing) the backends take."""
    if estimate_tokens is not None and not isinstance(estimate_tokens, str):
        raise ArgumentError(
            "pack_request takes estimate_tokens=None or an encoding name ('o200k_base', 'cl100k_base'), "
            f"not {type(estimate_tokens).__name__}: a custom estimator runs with pack_handoff"
        )
    if sizing == "seed" and image_tokens is DEFAULT_IMAGE_TOKENS:  # the defaults: nothing to check
        return estimate_tokens, None
    return estimate_tokens, image_tokens_for(sizing, image_tokens, estimate_tokens)
