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

import json
from collections.abc import Iterable
from typing import Any, Literal

import contextfold as cf
from contextfold import _backend
from contextfold._contract import (  # add_note: exc.add_note, also on Python 3.10
    add_note,
    as_bytes,
    bytes_options,
    pack_options,
    thread_count,
    whole,
)
from contextfold._edits import iterable_of
from contextfold._js import quoted

from ._common import error_record, missing_extra, row_refusal

__all__ = ["ERROR_KEY", "error_line", "pack_jsonl", "pack_lines"]


ERROR_KEY = "contextfold_error"
"""The member of the line that stands, in :func:`pack_lines`' output, for a line it could not pack."""


def pack_lines(
    lines: Iterable[str | bytes],
    *,
    options: cf.PackOptions | None = None,
    errors: Literal["line", "raise"] = "line",
    threads: int | None = 1,
    partition: int | None = None,
    **keywords: Any,
) -> list[str]:
    """Packs JSONL lines (blank lines skipped); one output line per line in, in order.

    Each item is one line (its own ending newline aside), read as ``contextfold pack``
    reads a line of a file: nothing is loaded into Python objects, the GIL is released for
    the work, and each output line is its input line with the dropped messages replaced
    by the note, every other byte as it came. The packing options are
    :func:`contextfold.pack_request`'s (:class:`contextfold.PackOptions`' fields; typed
    loosely here: ``typing_extensions``, which ``Unpack`` needs before Python 3.11, is not
    in the ``dask`` extra), as keywords or ``options=`` a
    :class:`contextfold.PackOptions` (``target_context_tokens``, ``reserve_output_tokens``,
    ``estimate_tokens="o200k_base"`` for exact counts, ``sizing="provider"``,
    ``shape="responses"``, ``cut``, ``pinned``, ``summary``, ``edits``, …); bad options
    raise at once. ``threads``: threads packing (default 1: Dask, Ray and Spark already
    run one task per core; None: one a CPU).

    A line that cannot be packed (not JSON, a malformed message, …) does not stop the
    batch: with ``errors="line"`` (the default) its output line is
    ``{"contextfold_error": {"line": index, "type": ..., "message": ..., "offset": ...}}``
    (``index`` in ``lines``; ``offset`` the byte :class:`contextfold.RequestError` names,
    or null), the error :func:`contextfold.pack_request` raises for it (for a bare list,
    for a body holding it as ``messages``); with ``partition`` given (:func:`pack_jsonl`
    gives the partition's number), the record says ``"partition": partition`` too. With
    ``errors="raise"`` the first bad line's error is raised, its index in ``lines`` added
    as a note.
    """
    if errors not in ("line", "raise"):
        raise cf.ArgumentError(f"errors must be 'line' or 'raise', not {quoted(errors)}")
    if partition is not None:
        partition = whole("partition", partition)
    options = pack_options(options, keywords)
    bytes_options(options)
    count = thread_count(threads)
    bodies: list[bytes] = []
    refused: dict[int, Exception] = {}
    for index, line in enumerate(iterable_of("lines", lines, "JSONL lines")):  # one str is no batch
        try:
            body = as_bytes(line)
            body = body[:-1] if body.endswith(b"\n") else body
            if b"\n" in body:
                raise cf.RequestError("a line holds a newline: each item of lines must be one JSONL line")
        except (cf.ContextfoldError, TypeError, ValueError) as exc:
            # Kept, not raised, with errors="raise" too: a line before it may be one the
            # packer refuses, and the first bad line's error is the one raised.
            refused[index] = exc
            body = b""  # packed as a blank line: nothing; its error stands in its place
        bodies.append(body)
    packed = _backend.impl.pack_lines(b"\n".join(bodies), b"", options, count)
    # Each packed line ends with a newline; split before decoding (a newline is no part
    # of any other UTF-8 character): a third of the time of decoding the whole first.
    good = map(bytes.decode, packed[0].split(b"\n")[:-1])
    for index, _ in packed[-1]:
        refused[index] = row_refusal(bodies[index], options)
        if errors == "raise":
            break
    if errors == "raise" and refused:
        index = min(refused)
        add_note(refused[index], f"in line {index} of the batch")
        raise refused[index]
    output: list[str] = []
    for index, body in enumerate(bodies):
        if index in refused:
            output.append(error_line(index, refused[index], partition))
        elif body.strip():
            output.append(next(good))
    return output


def error_line(index: int, error: Exception, partition: int | None = None) -> str:
    """The output line standing for line ``index`` of a batch (of partition ``partition``,
    when given), refused with ``error``."""
    record: dict[str, Any] = {"line": index, **error_record(error)}
    if partition is not None:
        record["partition"] = partition
    return json.dumps({ERROR_KEY: record}, ensure_ascii=False)


def pack_jsonl(paths: str | list[str], *, blocksize: int | str | None = "64MiB", **options: Any) -> Any:
    """A Dask bag of packed lines: ``db.read_text(paths).map_partitions(pack_lines, ...)``,
    each bad line's record naming its partition (``"partition": k``, the ``k``-th of the
    bag: a file, or with ``blocksize`` a block of one, files in order) beside its line's
    index in that partition.

    ``options`` are :func:`pack_lines`' keywords; compute it, or write it out with
    ``.to_textfiles(...)``.
    """
    if "partition" in options:
        raise cf.ArgumentError("pack_jsonl gives each partition its number: partition is not an option here")
    try:
        import dask.bag as db
    except ImportError as exc:
        raise missing_extra("dask", exc) from exc
    lines = db.read_text(paths, blocksize=blocksize)  # type: ignore[no-untyped-call]
    count = lines.npartitions
    numbers = db.from_sequence(range(count), npartitions=count)  # type: ignore[no-untyped-call]
    return lines.map_partitions(_pack_partition, numbers, **options)


def _pack_partition(lines: Iterable[str], number: Iterable[int], **options: Any) -> list[str]:
    """:func:`pack_lines` on one partition, told its number (a one-item partition of its own)."""
    (partition,) = number
    return pack_lines(lines, partition=partition, **options)
