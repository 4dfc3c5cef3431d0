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
accepted, integers of at most as many digits as Python converts at the call
(``sys.get_int_max_str_digits()``: 4,300 unless set). The body must be strict UTF-8 (``json.loads``
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

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from . import _backend
from ._contract import (
    PackedRequest,
    PackKeywords,
    PackOptions,
    as_bytes,
    bytes_options,
    pack_options,
    read_items,
    thread_count,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Body", "PackedRequest", "as_bytes", "pack_request", "pack_requests"]

Body = bytes | bytearray | memoryview | str
"""What a request body may be given as."""


def pack_request(body: Body, *, options: PackOptions | None = None, **keywords: Unpack[PackKeywords]) -> PackedRequest:
    """Pack a request body's ``messages`` (a Responses body's ``input``) into
    ``target_context_tokens - reserve_output_tokens`` tokens; the options are
    :func:`~contextfold.pack_handoff`'s (as keywords, or ``options=`` a
    :class:`~contextfold.PackOptions`; ``estimate_tokens``: None or an embedded
    encoding's name).

    ``json.loads(result.body)`` equals the loaded request with ``messages`` (``input``)
    replaced by ``pack_handoff(...).messages``; ``fits``, ``tokens``, ``dropped``,
    ``note`` and ``kept`` equal that pack's. The native backend works with the GIL
    released (but on a body under 8 KiB counted by chars/4: a few microseconds of work,
    about what releasing it costs).
    """
    impl = _backend.impl
    # As in pack_handoff: options made before of the same plain keywords, else made here.
    if options is None and (packed := impl.pack_request(body, None, keywords)) is not None:
        return packed
    made = pack_options(options, keywords)
    bytes_options(made)
    return cast(PackedRequest, impl.pack_request(body, made, {}))


def pack_requests(
    bodies: Iterable[Body],
    *,
    options: PackOptions | None = None,
    threads: int | None = None,
    **keywords: Unpack[PackKeywords],
) -> list[PackedRequest | Exception]:
    """:func:`pack_request` over many bodies with the same options, on ``threads``
    threads (default: one a CPU; at most 64), with the GIL released for all the work.

    One bad body loses nothing else: the list holds, for each body in order, its
    :class:`PackedRequest` or the exception :func:`pack_request` raises for it (check
    with ``isinstance(item, Exception)``). Bad options raise at once. Ctrl-C stops the
    batch between rounds of 1,024 bodies. The reference backend packs one body after
    another.
    """
    options = pack_options(options, keywords)
    bytes_options(options)
    count = thread_count(threads)
    return _backend.impl.pack_requests(read_items("bodies", bodies, "bodies"), options, count)
