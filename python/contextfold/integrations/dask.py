"""Dask (and Ray Data, Spark): pack stored JSONL transcripts on the batch path.

``pip install 'contextfold[dask]'``. A line is what ``contextfold pack`` reads: a list of
messages, or an object with ``messages`` (and, for Anthropic, ``system``); the packed line
is the same JSON with ``messages`` replaced, every other field kept. :func:`pack_lines` is
the whole job for one partition or batch (``json.loads``, :func:`contextfold.pack_many`,
``json.dumps``), so the same function is the body of a Dask ``map_partitions``, a Ray Data
``map_batches`` and a Spark ``mapInArrow``::

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

from ._common import missing_extra

__all__ = ["pack_jsonl", "pack_lines"]


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

    ``threads`` goes to :func:`contextfold.pack_many` (default 1: Dask, Ray and Spark already
    run one task per core). A line that is not a transcript raises ``ValueError`` naming
    its index in ``lines``; a transcript that ``pack_handoff`` rejects raises its error,
    with the index added as a note.
    """
    rows: list[Any] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {index}: not JSON: {exc}") from None
        if not (isinstance(row, list) or (isinstance(row, dict) and isinstance(row.get("messages"), list))):
            raise ValueError(f"line {index}: expected a list of messages or an object with a 'messages' list")
        rows.append(row)
    transcripts = [row if isinstance(row, list) else row["messages"] for row in rows]
    systems = [None if isinstance(row, list) else row.get("system") for row in rows]
    packs = cf.pack_many(
        transcripts,
        target_context_tokens=target_context_tokens,
        reserve_output_tokens=reserve_output_tokens,
        systems=systems,
        shape=shape,
        cut=cut,
        chunk_tokens=chunk_tokens,
        threads=threads,
    )
    return [
        _dump(pack.messages if isinstance(row, list) else {**row, "messages": pack.messages})
        for row, pack in zip(rows, packs, strict=True)
    ]


def _dump(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate cannot be written as UTF-8: escape it
        text = json.dumps(value)
    return text


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
