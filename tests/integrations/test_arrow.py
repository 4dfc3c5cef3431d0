"""Arrow columns packed in place (the ``arrow`` extra): each row as ``pack_lines`` packs
its line, on both backends, bad and null rows reported per row, every column type."""

from __future__ import annotations

import json
from array import array
from typing import Any

import contextfold as cf
import pytest
from contextfold import _backend
from contextfold._contract import pack_options
from contextfold.integrations.dask import ERROR_KEY, pack_lines
from hypothesis import given
from hypothesis import strategies as st

from ..conftest import IMPLS, corpus_rows, examples
from ..strategies import item_transcripts, transcripts
from . import need

pa = need("pyarrow", "arrow")
from contextfold.integrations.arrow import ERROR_COLUMN, pack_batch, pack_column  # noqa: E402

TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]
CONVERSATION = [
    {"role": "user", "content": "x " * 300},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "now"},
]
ROWS: list[str | None] = [
    json.dumps(CONVERSATION),
    "{bad",
    None,
    json.dumps({"messages": [], "id": 3}),
    "[1]",
    json.dumps({"model": "m", "messages": CONVERSATION}, separators=(" , ", " : ")),
]


def one_by_one(rows: list[str | None], **options: Any) -> list[str | None]:
    """Each row as pack_lines packs it alone (None: null, or refused)."""
    out: list[str | None] = []
    for row in rows:
        if row is None:
            out.append(None)
            continue
        (line,) = pack_lines([row], **options)
        out.append(None if ERROR_KEY in json.loads(line) else line)
    return out


def values(column: Any) -> list[str | None]:
    return [v if v is None or isinstance(v, str) else v.decode() for v in column.to_pylist()]


@pytest.mark.parametrize("kind", TYPES, ids=str)
def test_each_row_is_packed_as_its_line_and_bad_ones_are_reported(backend: str, kind: Any) -> None:
    column = pa.array(ROWS, kind)
    packed, errors = pack_column(column, target_context_tokens=50)
    packed.validate(full=True)
    assert packed.type == kind and errors.type == pa.string()
    assert values(packed) == one_by_one(ROWS, target_context_tokens=50)
    assert len(values(packed)[0] or "") < len(ROWS[0] or "")  # the long one was folded
    records = [None if e is None else json.loads(e) for e in errors.to_pylist()]
    assert [r and (r["row"], r["type"]) for r in records] == [
        None,
        (1, "RequestError"),
        None,  # a null row is null, not an error
        None,
        (4, "MessageTypeError"),
        None,
    ]
    assert records[1]["offset"] == 1 and records[4]["message"] == "message 0: expected a dict, got int"
    # A slice reads from its offset; a chunked column numbers rows across its chunks.
    sliced, _ = pack_column(column[2:], target_context_tokens=50)
    assert values(sliced) == values(packed)[2:]
    chunked = pa.chunked_array([column[:3], column[3:3], column[3:]])
    packed_chunks, chunk_errors = pack_column(chunked, target_context_tokens=50)
    assert values(packed_chunks) == values(packed) and chunk_errors.to_pylist() == errors.to_pylist()


def test_the_backends_agree_on_the_corpus_and_on_generated_rows() -> None:
    rows = [json.dumps(r, ensure_ascii=False) for r in corpus_rows("transcripts.jsonl")]
    rows += [json.dumps(r["messages"]) for r in corpus_rows("anthropic.jsonl")]
    column = pa.array(rows, pa.large_string())
    outs = []
    for name, impl in IMPLS.items():
        if impl is None:
            pytest.skip("the native extension is not built")
        with _backend.using(name):
            outs.append([c.to_pylist() for c in pack_column(column, target_context_tokens=3_000, threads=2)])
    assert outs[0] == outs[1]
    assert sum(p != r for p, r in zip(outs[0][0], rows, strict=True)) >= 20  # folded rows, not only copies


@examples(60, deadline=None)
@given(rows=st.lists(st.one_of(transcripts(max_turns=8), item_transcripts(max_turns=8)), max_size=6))
def test_generated_rows_pack_as_their_lines_on_both_backends(rows: list[list[dict[str, Any]]]) -> None:
    text = [json.dumps(r) for r in rows]
    expected = one_by_one(list(text), target_context_tokens=120)
    for name, impl in IMPLS.items():
        if impl is None:
            continue
        with _backend.using(name):
            packed, _ = pack_column(pa.array(text, pa.string()), target_context_tokens=120)
        assert values(packed) == expected, name


def test_a_batch_gets_its_column_packed_and_an_error_column() -> None:
    table = pa.table({"id": list(range(len(ROWS))), "text": pa.chunked_array([ROWS[:2], ROWS[2:]])})
    packed = pack_batch(table, column="text", target_context_tokens=50)
    assert packed.schema.names == ["id", "text", ERROR_COLUMN]
    assert packed.column("id").to_pylist() == list(range(len(ROWS)))
    assert packed.column("text").to_pylist() == one_by_one(ROWS, target_context_tokens=50)
    again = pack_batch(packed.combine_chunks().to_batches()[0], column="text", target_context_tokens=50)
    assert isinstance(again, pa.RecordBatch) and again.schema.names == ["id", "text", ERROR_COLUMN]
    # The bad rows' values are null now, so their errors are gone; the column was replaced.
    assert again.column(ERROR_COLUMN).null_count == len(ROWS)


def test_the_packed_field_is_nullable_in_every_batch() -> None:
    """A refused row is null: the packed field is nullable whether or not a batch holds one,
    so every batch of one input gets one schema (and batches can be joined)."""
    schema = pa.schema([pa.field("text", pa.string(), nullable=False)])
    good = pack_batch(pa.table({"text": ["[]"]}, schema=schema), column="text", target_context_tokens=50)
    bad = pack_batch(pa.table({"text": ["[]", "{bad"]}, schema=schema), column="text", target_context_tokens=50)
    assert good.schema == bad.schema and bad.schema.field("text").nullable
    assert pa.concat_tables([good, bad]).column("text").null_count == 1
    bad.validate(full=True)


def test_a_row_opening_with_a_newline_is_reported_as_its_list() -> None:
    _, errors = pack_column(pa.array(["\n [1]", "[1]"]), target_context_tokens=50)
    first, second = (json.loads(e) for e in errors.to_pylist())
    assert (
        (first["type"], first["message"])
        == (second["type"], second["message"])
        == (
            "MessageTypeError",
            "message 0: expected a dict, got int",
        )
    )


def test_bad_columns_and_options_are_refused() -> None:
    with pytest.raises(cf.ArgumentTypeError, match=r"expected a string or binary column .*got int64"):
        pack_column(pa.array([1, 2]), target_context_tokens=50)
    # Refused with no rows too (a chunked column of none, an empty table): a job fails
    # on its first batch, not on the first that has rows.
    with pytest.raises(cf.ArgumentTypeError, match=r"expected a string or binary column .*got int64"):
        pack_column(pa.chunked_array([], pa.int64()), target_context_tokens=50)
    with pytest.raises(cf.ArgumentTypeError, match=r"expected a string or binary column .*got int64"):
        pack_batch(pa.table({"text": pa.array([], pa.int64())}), column="text", target_context_tokens=50)
    with pytest.raises(cf.ArgumentTypeError, match="expected a pyarrow Array or ChunkedArray, got list"):
        pack_column(["[]"], target_context_tokens=50)  # type: ignore[type-var]
    with pytest.raises(cf.ArgumentError, match=r"one column 'body', it has none \(it has \['text'\]\)"):
        pack_batch(pa.table({"text": ["[]"]}), column="body", target_context_tokens=50)
    twice = pa.Table.from_arrays([pa.array(["[]"]), pa.array(["[]"])], names=["text", "text"])
    with pytest.raises(cf.ArgumentError, match="one column 'text', it has twice or more"):
        pack_batch(twice, column="text", target_context_tokens=50)
    errors_twice = pa.Table.from_arrays([pa.array(["[]"]), pa.array([None]), pa.array([None])], names=["t", "e", "e"])
    with pytest.raises(cf.ArgumentError, match="error_column: the batch has 2 columns 'e'"):
        pack_batch(errors_twice, column="t", error_column="e", target_context_tokens=50)
    with pytest.raises(cf.ArgumentError, match="column and error_column are both 'text'"):
        pack_batch(pa.table({"text": ["[]"]}), column="text", error_column="text", target_context_tokens=50)
    with pytest.raises(cf.ArgumentTypeError, match="expected a pyarrow RecordBatch or Table, got dict"):
        pack_batch({"text": ["[]"]}, column="text", target_context_tokens=50)  # type: ignore[type-var]
    with pytest.raises(cf.ArgumentError, match="estimate_tokens"):
        pack_column(pa.array(["[]"]), target_context_tokens=50, estimate_tokens=len)
    empty, errors = pack_column(pa.array([], pa.string()), target_context_tokens=50)
    assert len(empty) == 0 and len(errors) == 0
    nulls, errors = pack_column(pa.nulls(3, pa.large_binary()), target_context_tokens=50)
    assert (nulls.type, nulls.null_count, errors.null_count) == (pa.large_binary(), 3, 3)


def test_offsets_that_lie_are_refused_naming_the_row(impl: Any) -> None:
    """The backend function reads offsets it is given: each must stay in the data."""
    options = pack_options(None, {"target_context_tokens": 50})
    data = memoryview(b"[][]")

    def offsets(*values: int) -> memoryview:
        return memoryview(pa.array(values, pa.int32()).buffers()[1]).cast("B")

    with pytest.raises(cf.ArgumentError, match="row 1 runs from 2 to 9, backwards or outside the 4 bytes of data"):
        impl.pack_rows(data, offsets(0, 2, 9), False, 0, 2, options)
    with pytest.raises(cf.ArgumentError, match="row 1 runs from 2 to 1"):
        impl.pack_rows(data, offsets(0, 2, 1), False, 0, 2, options)
    with pytest.raises(cf.ArgumentError, match=r"3 offsets hold no rows 1\.\.3"):
        impl.pack_rows(data, offsets(0, 2, 4), False, 1, 2, options)
    out = impl.pack_rows(data, offsets(0, 2, 4), False, 1, 1, options)
    assert out[:2] == (b"[]", array("i", [0, 2]).tobytes())
    # An offsets buffer with bytes past its last whole offset (pyarrow pads buffers).
    padded = memoryview(array("i", [0, 2, 4]).tobytes() + b"\0").cast("B")
    assert impl.pack_rows(data, padded, False, 0, 2, options)[:2] == (b"[][]", array("i", [0, 2, 4]).tobytes())
