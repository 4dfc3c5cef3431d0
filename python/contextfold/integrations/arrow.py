"""Arrow (Ray Data, Spark, Dask dataframes): pack a column of stored transcripts in place.

``pip install 'contextfold[arrow]'``. A row is read exactly as a line of
:func:`contextfold.integrations.dask.pack_lines` is: a list of messages, or a request
body as :func:`contextfold.pack_request` takes it; the packed row is the row with the
dropped messages replaced by the note, every other byte as it came. The column's bytes
are taken from its data buffer in one copy (an Arrow buffer may be written to by another
thread) and packed with the GIL released, and the packed column is written as one
buffer: no row becomes a Python object on the way.

A bad row does not stop the batch: its packed value is null and the error column says
why. One function serves every engine that hands batches over as Arrow::

    # Ray Data
    ds.map_batches(pack_batch, batch_format="pyarrow",
                   fn_kwargs={"column": "text", "target_context_tokens": 8_000})

    # Spark (the schema gains the error column)
    df.mapInArrow(lambda batches: (pack_batch(b, column="text", target_context_tokens=8_000)
                                   for b in batches),
                  df.schema.add("contextfold_error", "string"))
"""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any, TypeVar

import contextfold as cf
from contextfold import _backend
from contextfold._contract import bytes_options, pack_options, thread_count
from contextfold._js import quoted

from ._common import error_record, missing_extra, row_refusal

try:
    import pyarrow as pa
except ImportError as exc:
    raise missing_extra("arrow", exc) from exc

__all__ = ["ERROR_COLUMN", "pack_batch", "pack_column"]

ERROR_COLUMN = "contextfold_error"
"""The column :func:`pack_batch` adds: null for a row packed, else a JSON record
``{"row": index, "type": ..., "message": ..., "offset": ...}`` of why it was not."""

Column = TypeVar("Column", "pa.Array", "pa.ChunkedArray")
Batch = TypeVar("Batch", "pa.RecordBatch", "pa.Table")


def pack_column(
    column: Column,
    *,
    options: cf.PackOptions | None = None,
    threads: int | None = 1,
    **keywords: Any,
) -> tuple[Column, Column]:
    """``(packed, errors)`` for a string or binary column (``large_`` ones too; an
    ``Array`` or a ``ChunkedArray``, each chunk packed from its buffers): ``packed`` of the
    column's type, a row's value its packed row, null where the row was null or could not
    be packed; ``errors`` a string column, null where the row was packed (or null), else
    the record :data:`ERROR_COLUMN` describes.

    The packing options are :func:`contextfold.pack_request`'s, as keywords or
    ``options=``; bad options raise at once. ``threads``: threads packing (default 1:
    Ray, Spark and Dask already run one task per core; None: one a CPU)."""
    options = pack_options(options, keywords)
    bytes_options(options)
    count = thread_count(threads)
    if not isinstance(column, (pa.Array, pa.ChunkedArray)):
        raise cf.ArgumentTypeError(f"column: expected a pyarrow Array or ChunkedArray, got {type(column).__name__}")
    wide = _wide_offsets(column.type)  # refused with no rows too, not at the first batch that has some
    if isinstance(column, pa.ChunkedArray):
        # Where each chunk starts in the column (and, last, where the column ends).
        starts = accumulate((len(chunk) for chunk in column.chunks), initial=0)
        pairs = zip(column.chunks, starts, strict=False)
        chunks = [_pack_chunk(chunk, wide, options, count, start) for chunk, start in pairs]
        packed = pa.chunked_array([p for p, _ in chunks], column.type)
        errors = pa.chunked_array([e for _, e in chunks], pa.string())
        return packed, errors
    return _pack_chunk(column, wide, options, count, 0)


def pack_batch(
    batch: Batch,
    *,
    column: str,
    error_column: str = ERROR_COLUMN,
    options: cf.PackOptions | None = None,
    threads: int | None = 1,
    **keywords: Any,
) -> Batch:
    """``batch`` (a ``RecordBatch`` or a ``Table``) with ``column`` packed by
    :func:`pack_column` and ``error_column`` (replaced when there is one) saying why a
    row was not; every other column as it was."""
    if not isinstance(batch, (pa.RecordBatch, pa.Table)):
        raise cf.ArgumentTypeError(f"batch: expected a pyarrow RecordBatch or Table, got {type(batch).__name__}")
    if column == error_column:
        raise cf.ArgumentError(f"column and error_column are both {quoted(column)}: the errors would replace the rows")
    found = batch.schema.get_all_field_indices(column)
    if len(found) != 1:
        have = "twice or more" if found else f"none (it has {batch.schema.names})"
        raise cf.ArgumentError(f"column: the batch must have one column {quoted(column)}, it has {have}")
    (at,) = found
    packed, errors = pack_column(batch.column(at), options=options, threads=threads, **keywords)
    # A refused row's value is null, so the packed field is nullable, whatever the batch
    # holds: every batch of one input gets one schema.
    batch = batch.set_column(at, batch.schema.field(at).with_nullable(True), packed)
    where = batch.schema.get_all_field_indices(error_column)
    if len(where) > 1:
        raise cf.ArgumentError(f"error_column: the batch has {len(where)} columns {quoted(error_column)}")
    if where:
        return batch.set_column(where[0], error_column, errors)
    return batch.append_column(error_column, errors)


_KINDS = {
    pa.string(): False,
    pa.binary(): False,
    pa.large_string(): True,
    pa.large_binary(): True,
}
"""The column types packed, each with whether its offsets are 64-bit."""


def _wide_offsets(kind: pa.DataType) -> bool:
    """Whether a column of type ``kind`` has 64-bit offsets; refused when it is not one
    packed."""
    wide = _KINDS.get(kind)
    if wide is None:
        raise cf.ArgumentTypeError(
            f"column: expected a string or binary column (large ones too), got {kind}: cast it first"
        )
    return wide


def _pack_chunk(
    chunk: pa.Array, wide: bool, options: cf.PackOptions, threads: int, first: int
) -> tuple[pa.Array, pa.Array]:
    """One array packed, ``(packed, errors)`` (``wide``: 64-bit offsets); its rows are the
    column's from ``first``."""
    n = len(chunk)
    _, offsets, data = chunk.buffers()
    if n == 0 or offsets is None:  # nothing to read: every row (if any) is null
        return pa.nulls(n, chunk.type), pa.nulls(n, pa.string())
    data = data if data is not None else pa.py_buffer(b"")
    output, packed_offsets, *_, refused = _backend.impl.pack_rows(
        memoryview(data).cast("B"), memoryview(offsets).cast("B"), wide, chunk.offset, n, options, threads
    )
    valid = chunk.is_valid()
    errors: list[str | None] = [None] * n
    bad = [row for row, _ in refused if valid[row].as_py()]
    for row in bad:
        error = row_refusal(chunk[row].as_buffer().to_pybytes(), options)
        errors[row] = json.dumps({"row": first + row, **error_record(error)}, ensure_ascii=False)
    if bad:
        mask = valid.to_numpy(zero_copy_only=False)
        mask[bad] = False
        valid = pa.array(mask)
    nulls = n - valid.true_count
    validity = valid.buffers()[1] if nulls else None
    packed = pa.Array.from_buffers(
        chunk.type, n, [validity, pa.py_buffer(packed_offsets), pa.py_buffer(output)], null_count=nulls
    )
    return packed, pa.array(errors, pa.string())
