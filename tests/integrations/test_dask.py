"""Dask bag over stored JSONL transcripts, on the local synchronous and threaded schedulers;
pack_lines (which needs no Dask) read line by line as `contextfold pack` reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.cli import main
from contextfold.integrations.dask import pack_jsonl, pack_lines

from ..conftest import SHARED, corpus_rows
from . import need


def expected(row: dict[str, Any], budget: int) -> dict[str, Any]:
    pack = cf.pack_handoff(row["messages"], target_context_tokens=budget, system=row.get("system"))
    return {**row, "messages": pack.messages}


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_bag_pipeline_equals_one_by_one_packing(tmp_path: Path, scheduler: str) -> None:
    need("dask.bag", "dask")  # pack_lines itself needs no Dask: the tests below run without it
    rows = corpus_rows("transcripts.jsonl") + corpus_rows("anthropic.jsonl")
    half = len(rows) // 2
    for name, part in (("a.jsonl", rows[:half]), ("b.jsonl", rows[half:])):
        (tmp_path / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
    bag = pack_jsonl(str(tmp_path / "*.jsonl"), blocksize=200_000, target_context_tokens=3_000)
    assert bag.npartitions > 4  # several partitions per file: the batch path runs per partition
    out = [json.loads(line) for line in bag.compute(scheduler=scheduler)]
    assert out == [json.loads(json.dumps(expected(r, 3_000))) for r in rows]
    assert sum(len(o["messages"]) < len(r["messages"]) for o, r in zip(out, rows, strict=True)) >= 20


def test_pack_lines_takes_bare_lists_keeps_bytes_and_reports_bad_lines() -> None:
    path = SHARED / "corpus" / "transcripts.jsonl"
    if not path.exists():
        pytest.skip(f"corpus not found at {path}")
    messages = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["messages"]
    spaced = [json.dumps(m, separators=(" , ", " : ")) for m in messages]  # spacing json.dumps never writes
    (line,) = pack_lines(["[" + " , ".join(spaced) + "]\n", "  \n"], target_context_tokens=2_000)
    pack = cf.pack_handoff(messages, target_context_tokens=2_000)
    assert pack.dropped > 0 and json.loads(line) == pack.messages
    assert all(spaced[i] in line for i in pack.kept)  # kept messages byte for byte
    with pytest.raises(cf.RequestError) as bad:
        pack_lines([json.dumps(messages), "{oops"], target_context_tokens=2_000)
    assert "in line 1 of the batch" in bad.value.__notes__
    with pytest.raises(cf.RequestError, match="messages"):
        pack_lines(['{"id": 1}'], target_context_tokens=2_000)


CONVERSATION = [
    {"role": "user", "content": "x " * 300},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "now"},
]
BARE = json.dumps(CONVERSATION).encode()


def cli_pack(line: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[bytes]) -> tuple[bytes, bytes]:
    """``contextfold pack`` of a file holding ``line``: its output and its standard error."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(line + b"\n")
    main(["pack", str(path), "--context-tokens", "100", "--threads", "1"])
    return capsys.readouterr()  # type: ignore[return-value]


@pytest.mark.parametrize(
    "line",
    [
        BARE,
        b"\xef\xbb\xbf" + BARE,  # a byte-order mark before a bare list
        b"  " + BARE + b" \r",
        json.dumps({"id": 7, "messages": CONVERSATION}).encode(),
    ],
    ids=["bare", "bom", "spaced", "body"],
)
def test_pack_lines_packs_a_line_as_contextfold_pack_does(
    backend: str, line: bytes, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    out, err = cli_pack(line, tmp_path, capsysbinary)
    assert b"0 bad line(s)" in err and out.endswith(b"\n")
    expected = out[:-1].decode()
    assert expected.encode() != line  # packed, not passed through
    assert pack_lines([line, line + b"\n", line.decode()], target_context_tokens=100) == [expected] * 3


@pytest.mark.parametrize(
    "line",
    [
        BARE + b', "messages": []',  # not JSON: no longer packed from the array that follows
        BARE + b"}",
        b"\xef\xbb\xbf" + BARE + b" x",
        b"[" + b"[" * 100_000 + b"]" * 100_001,
        b'[{"role": "user", "content": "x", "n": ' + b"9" * 5_000 + b"}]",
        b'[{"role": "user", "content": "x"}, {"role": 5}]',
        b'{"messages": [{"role": "user", "content": 5}]}',
        b'{"id": 1}',
        b"3",
    ],
    ids=["injected", "brace", "bom", "deep", "digits", "bad-message", "bad-body", "no-messages", "number"],
)
def test_pack_lines_refuses_a_line_as_pack_request_does(
    backend: str, line: bytes, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    out, err = cli_pack(line, tmp_path, capsysbinary)
    assert out == b"" and b"1 bad line(s)" in err
    with pytest.raises(Exception) as raised:
        pack_lines([BARE, line], target_context_tokens=100)
    refused = raised.value
    assert refused.__notes__ == ["in line 1 of the batch"]
    if line.startswith(b"[") and b"line 1: not " not in err:  # a list that reads as JSON: its messages are bad
        with pytest.raises(Exception) as direct:
            cf.pack_handoff(json.loads(line), target_context_tokens=100)
    else:
        with pytest.raises(Exception) as direct:
            cf.pack_request(line, target_context_tokens=100)
        assert getattr(refused, "offset", None) == getattr(direct.value, "offset", None)
    assert (type(refused), str(refused)) == (type(direct.value), str(direct.value))


def test_pack_lines_refuses_what_is_not_one_line(backend: str) -> None:
    with pytest.raises(cf.RequestError, match="lone surrogate") as raised:
        pack_lines([BARE.decode(), '[{"role": "user", "content": "\ud800"}]'], target_context_tokens=100)
    assert raised.value.__notes__ == ["in line 1 of the batch"]
    with pytest.raises(cf.RequestError, match="newline") as raised:
        pack_lines([b"\n", BARE + b"\n" + BARE], target_context_tokens=100)
    assert raised.value.__notes__ == ["in line 1 of the batch"]
    assert pack_lines([], target_context_tokens=100) == []
