"""Dask (and Ray Data, Spark): pack stored JSONL transcripts on the batch path.

``pip install 'contextfold[dask]'``. A line is what ``contextfold pack`` reads: a list of
messages, or an object with ``messages`` (and, for Anthropic, ``system``); the packed line
is the line with the dropped messages replaced by the note, every other byte as it came.
:func:`pack_lines` is the whole job for one partition or batch, on the bytes path
(:func:`contextfold.pack_requests`), so the same function is the body of a Dask
``map_partitions``, a Ray Data ``map_batches`` and a Spark ``mapInArrow``::

    import dask.bag as db
    from contextfold.integrations.dask import pack_lines
    packed = db.read_text("runs/*.jsonl", blocksize="64MiB").map_partitions(
        pack_lines, target_context_tokens=8_000, reserve_output_tokens=1_000
    )
    packed.to_textfiles("packed/*.jsonl")

``pack_lines`` itself needs nothing but contextfold; only :func:`pack_jsonl` imports Dask.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import contextfold as cf
from contextfold._contract import add_note  # exc.add_note, also on Python 3.10

from ._common import missing_extra

__all__ = ["pack_jsonl", "pack_lines"]


_WRAP = b'{"messages":'
"""A bare message-list line is packed as the body ``{"messages":<line>}``, then unwrapped."""


def pack_lines(
    lines: Iterable[str | bytes],
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    shape: Literal["auto", "openai", "anthropic"] = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
    threads: int | None = 1,
) -> list[str]:
    """Packs JSONL lines (blank lines skipped); one packed line out per line in, in order.

    The lines go through :func:`contextfold.pack_requests`, the bytes path: nothing is
    loaded into Python objects, the GIL is released for the work, and each output line is
    its input line with the dropped messages replaced by the note, every other byte as it
    came. ``threads`` is ``pack_requests``' (default 1: Dask, Ray and Spark already run
    one task per core). A bad line raises the error ``pack_request`` raises for it, with
    its index in ``lines`` added as a note.
    """
    bodies: list[bytes] = []
    wrapped: list[bool] = []
    indices: list[int] = []
    for index, line in enumerate(lines):
        body = (line.encode() if isinstance(line, str) else bytes(line)).strip()
        if not body:
            continue
        bare = body.startswith(b"[")
        bodies.append(_WRAP + body + b"}" if bare else body)
        wrapped.append(bare)
        indices.append(index)
    results = cf.pack_requests(
        bodies,
        target_context_tokens=target_context_tokens,
        reserve_output_tokens=reserve_output_tokens,
        shape=shape,
        cut=cut,
        chunk_tokens=chunk_tokens,
        threads=threads,
    )
    out: list[str] = []
    for index, bare, result in zip(indices, wrapped, results, strict=True):
        if isinstance(result, Exception):
            add_note(result, f"in line {index} of the batch")
            raise result
        body = result.body[len(_WRAP) : -1] if bare else result.body  # bytes outside messages come back as sent
        out.append(body.decode())
    return out


def pack_jsonl(paths: str | list[str], *, blocksize: int | str | None = "64MiB", **options: Any) -> Any:
    """A Dask bag of packed lines: ``db.read_text(paths).map_partitions(pack_lines, ...)``.

    ``options`` are :func:`pack_lines`' keywords; compute it, or write it out with
    ``.to_textfiles(...)``.
    """
    try:
        import dask.bag as db
    except ImportError as exc:
        raise missing_extra("dask", exc) from exc
    return db.read_text(paths, blocksize=blocksize).map_partitions(pack_lines, **options)  # type: ignore[no-untyped-call]
