"""Dask bag over stored JSONL transcripts, on the local synchronous and threaded schedulers;
pack_lines (which needs no Dask) read line by line as `contextfold pack` reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.cli import main
from contextfold.integrations.dask import ERROR_KEY, error_line, pack_jsonl, pack_lines

from ..conftest import corpus_rows, openai_corpus
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


def test_a_bad_lines_record_names_its_partition(tmp_path: Path) -> None:
    need("dask.bag", "dask")
    lines = [json.dumps(r, ensure_ascii=False) for r in corpus_rows("transcripts.jsonl")[:12]]
    lines[9] = '{"messages": [{"role": 7}]}'
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    bag = pack_jsonl(str(tmp_path / "a.jsonl"), blocksize=len("\n".join(lines[:6])), target_context_tokens=3_000)
    sizes = bag.map_partitions(lambda part: [len(list(part))]).compute(scheduler="sync")
    partition = next(k for k in range(len(sizes)) if sum(sizes[: k + 1]) > 9)
    assert partition > 0  # the bad line is past the first partition
    records = [json.loads(line).get(ERROR_KEY) for line in bag.compute(scheduler="sync")]
    (record,) = [r for r in records if r is not None]
    assert record["partition"] == partition and record["line"] == 9 - sum(sizes[:partition])
    with pytest.raises(cf.ArgumentError, match="partition is not an option"):
        pack_jsonl(str(tmp_path / "a.jsonl"), target_context_tokens=3_000, partition=3)
    alone = json.loads(pack_lines(lines[9:10], target_context_tokens=3_000)[0])[ERROR_KEY]
    assert alone == {k: v for k, v in record.items() if k != "partition"} | {"line": 0}  # no partition given: none


def test_pack_lines_takes_bare_lists_keeps_bytes_and_reports_bad_lines() -> None:
    messages = openai_corpus()[0]
    spaced = [json.dumps(m, separators=(" , ", " : ")) for m in messages]  # spacing json.dumps never writes
    (line,) = pack_lines(["[" + " , ".join(spaced) + "]\n", "  \n"], target_context_tokens=2_000)
    pack = cf.pack_handoff(messages, target_context_tokens=2_000)
    assert pack.dropped > 0 and json.loads(line) == pack.messages
    assert all(spaced[i] in line for i in pack.kept)  # kept messages byte for byte
    with pytest.raises(cf.RequestError) as bad:
        pack_lines([json.dumps(messages), "{oops"], target_context_tokens=2_000, errors="raise")
    assert "in line 1 of the batch" in bad.value.__notes__
    with pytest.raises(cf.RequestError, match="messages"):
        pack_lines(['{"id": 1}'], target_context_tokens=2_000, errors="raise")


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
        pack_lines([BARE, line], target_context_tokens=100, errors="raise")
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
    # by default the bad line's error stands in its place, and the batch goes on
    packed = pack_lines([BARE, line, BARE], target_context_tokens=100)
    good = pack_lines([BARE], target_context_tokens=100)[0]
    assert packed == [good, error_line(1, refused), good]
    assert json.loads(packed[1])[ERROR_KEY] == {
        "line": 1,
        "type": type(refused).__name__,
        "message": str(refused),
        "offset": getattr(refused, "offset", None),
    }


def test_pack_lines_refuses_what_is_not_one_line(backend: str) -> None:
    with pytest.raises(cf.RequestError, match="lone surrogate") as raised:
        pack_lines(
            [BARE.decode(), '[{"role": "user", "content": "\ud800"}]'], target_context_tokens=100, errors="raise"
        )
    assert raised.value.__notes__ == ["in line 1 of the batch"]
    with pytest.raises(cf.RequestError, match="newline") as raised:
        pack_lines([b"\n", BARE + b"\n" + BARE], target_context_tokens=100, errors="raise")
    assert raised.value.__notes__ == ["in line 1 of the batch"]
    # The first bad line's error, whichever step refuses it: a later line that is not
    # one line (or no text) was raised before the packer read the lines before it.
    for later in (5, b"x\ny", "\ud800"):
        with pytest.raises(cf.RequestError, match="expecting") as raised:
            pack_lines([BARE, b"{bad", later], target_context_tokens=100, errors="raise")  # type: ignore[list-item]
        assert raised.value.__notes__ == ["in line 1 of the batch"]
    assert pack_lines([], target_context_tokens=100) == []
    lines = pack_lines([BARE, b"  ", BARE + b"\n" + BARE, 7, BARE], target_context_tokens=100)  # type: ignore[list-item]
    assert [ERROR_KEY in json.loads(line) for line in lines] == [False, True, True, False]  # the blank one skipped
    assert [json.loads(line)[ERROR_KEY]["line"] for line in lines[1:3]] == [2, 3]
    with pytest.raises(cf.ArgumentError, match="errors"):
        pack_lines([BARE], target_context_tokens=100, errors="skip")  # type: ignore[arg-type]
    for one in (BARE, BARE.decode()):  # packed character by character, one error line each
        with pytest.raises(cf.ArgumentTypeError, match="lines must be an iterable of JSONL lines, not a "):
            pack_lines(one, target_context_tokens=100)  # type: ignore[arg-type]


def test_pack_lines_takes_every_pack_option(backend: str) -> None:
    from contextfold.synthetic import responses_items

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0K" * 2_000}}
    shot = [*CONVERSATION[:2], {"role": "user", "content": [{"type": "text", "text": "?"}, image]}]
    items = responses_items(CONVERSATION)
    lines = [
        json.dumps({"messages": shot}),
        json.dumps({"input": items, "instructions": "Be brief."}),
        json.dumps({"messages": CONVERSATION}),
        '{"messages": [{"role": 5}]}',
    ]
    for options in (
        {"sizing": "provider", "image_tokens": 50},
        {"estimate_tokens": "o200k_base"},
        {"shape": "responses", "summary": "So far: setup."},
        {"pinned": [1], "cut": "chunked"},
        {"edits": [cf.ClearToolUses(keep=0)], "reserve_output_tokens": 10},
    ):
        if backend == "python" and "estimate_tokens" in options:
            continue  # the reference counts through tiktoken, which may need a download
        out = pack_lines(lines, target_context_tokens=150, **options)  # type: ignore[arg-type]
        expected = []
        for line in lines:
            try:
                expected.append(cf.pack_request(line, target_context_tokens=150, **options).body.decode())  # type: ignore[arg-type]
            except cf.ContextfoldError as exc:
                expected.append(error_line(len(expected), exc))
        assert out == expected, options
        assert out == pack_lines(lines, options=cf.PackOptions(target_context_tokens=150, **options))  # type: ignore[arg-type]
    provider = pack_lines(lines[:1], target_context_tokens=400, sizing="provider", image_tokens=50)[0]
    assert provider == lines[0] != pack_lines(lines[:1], target_context_tokens=400)[0]  # the image fits as billed
