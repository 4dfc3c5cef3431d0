"""Dask (and Ray Data, Spark): pack stored JSONL transcripts on the batch path.

``pip install 'contextfold[dask]'``. A line is read exactly as ``contextfold pack`` reads
it: a list of messages, or a request body as :func:`contextfold.pack_request` takes it
(an object with ``messages`` and, for Anthropic, ``system``; a Responses body with
``input``); the packed line is the line with the dropped messages replaced by the note,
every other byte as it came. :func:`pack_lines` is the whole job for one partition or
batch, on the bytes path, so the same function is the body of a Dask
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

import os
from collections.abc import Iterable
from typing import Any, Literal

import contextfold as cf
from contextfold import _backend
from contextfold._contract import add_note, as_bytes, whole  # add_note: exc.add_note, also on Python 3.10

from ._common import missing_extra

__all__ = ["pack_jsonl", "pack_lines"]


def pack_lines(
    lines: Iterable[str | bytes],
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    shape: Literal["auto", "openai", "anthropic", "responses"] = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
    threads: int | None = 1,
) -> list[str]:
    """Packs JSONL lines (blank lines skipped); one packed line out per line in, in order.

    Each item is one line (its own ending newline aside), read as ``contextfold pack``
    reads a line of a file: nothing is loaded into Python objects, the GIL is released for
    the work, and each output line is its input line with the dropped messages replaced
    by the note, every other byte as it came. ``threads``: threads packing (default 1:
    Dask, Ray and Spark already run one task per core; None: one a CPU). A bad line
    raises what :func:`contextfold.pack_request` raises for it (for a bare list, for a
    body holding it as ``messages``), with its index in ``lines`` added as a note.
    """
    options = cf.PackOptions(
        target_context_tokens=target_context_tokens,
        reserve_output_tokens=reserve_output_tokens,
        shape=shape,
        cut=cut,
        chunk_tokens=chunk_tokens,
    )
    count = (os.cpu_count() or 1) if threads is None else whole("threads", threads, 1)
    bodies: list[bytes] = []
    for index, line in enumerate(lines):
        try:
            body = as_bytes(line)
            body = body[:-1] if body.endswith(b"\n") else body
            if b"\n" in body:
                raise cf.RequestError("a line holds a newline: each item of lines must be one JSONL line")
        except (cf.ContextfoldError, TypeError, ValueError) as exc:
            add_note(exc, f"in line {index} of the batch")
            raise
        bodies.append(body)
    packed = _backend.impl.pack_lines(b"\n".join(bodies), b"", options, count)
    output: bytes = packed[0]
    errors: list[tuple[int, str]] = packed[-1]
    if errors:
        index = errors[0][0]
        refused = _refusal(bodies[index], options)
        add_note(refused, f"in line {index} of the batch")
        raise refused
    return output.decode().split("\n")[:-1]  # each packed line ends with a newline


_BOM = b"\xef\xbb\xbf"


def _refusal(line: bytes, options: cf.PackOptions) -> Exception:
    """The exception for a line ``pack_lines`` refused: ``pack_request``'s for it. A bare
    list refused with no offset was read whole (refused for being a list, or by the
    reference for its depth or a long number): the error is then that of the body holding
    it as its ``messages``, which names the bad message (or repeats the refusal)."""
    try:
        cf.pack_request(line, options=options)
    except cf.RequestError as exc:
        array = line.removeprefix(_BOM).lstrip(b" \t\r")
        if exc.offset is not None or not array.startswith(b"["):
            return exc
        try:
            cf.pack_request(b'{"messages":' + array + b"}", options=options)
        except (cf.ContextfoldError, TypeError) as refused:
            return refused
    except (cf.ContextfoldError, TypeError) as exc:
        return exc
    raise AssertionError(f"pack_lines refused a line pack_request packs: {line[:200]!r}")


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
