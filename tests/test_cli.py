"""The contextfold command line: every path, including bad lines, empty input, standard
input, Anthropic input and -o."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.cli import main

from .conftest import SHARED, anthropic_corpus, openai_corpus


def run(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: str | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")))
    try:
        code = main(argv)
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return code, out, err


def test_pack_corpus_in_budget_and_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    path = SHARED / "corpus" / "transcripts.jsonl"
    rows = openai_corpus()
    code, out, err = run(["pack", str(path), "--context-tokens", "2000", "--reserve-output-tokens", "200"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(rows)
    for line, original in zip(lines, rows, strict=True):
        packed = json.loads(line)["messages"]
        pack = cf.pack_handoff(original, target_context_tokens=2000, reserve_output_tokens=200)
        assert [m.get("role") for m in packed] == [m.get("role") for m in pack.messages]
        assert not pack.fits or cf.tokens_of(packed) <= 1800
    assert f"packed {len(rows)} transcript(s)" in err
    before = sum(cf.tokens_of(r) for r in rows)
    assert f"tokens {before:,} ->" in err


def test_pack_counts_with_an_embedded_encoding(capsys: pytest.CaptureFixture[str]) -> None:
    path = SHARED / "corpus" / "transcripts.jsonl"
    rows = openai_corpus()
    argv = ["pack", str(path), "--context-tokens", "1500", "--tokenizer", "o200k_base"]
    code, out, err = run(argv, capsys)
    assert code == 0
    for line, original in zip(out.splitlines(), rows, strict=True):
        pack = cf.pack_handoff(original, target_context_tokens=1500, estimate_tokens="o200k_base")
        assert [m.get("role") for m in json.loads(line)["messages"]] == [m.get("role") for m in pack.messages]
    before = sum(cf.tokens_of(r, estimate_tokens="o200k_base") for r in rows)
    assert f"tokens {before:,} ->" in err
    assert before != sum(cf.tokens_of(r) for r in rows)


def test_bad_lines_are_reported_and_the_run_goes_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = [{"role": "user", "content": "hello"}]
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({"x": 1}),
        "",
        json.dumps([{"content": "no role"}]),
        json.dumps(good),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run(["pack", str(path), "--context-tokens", "100"], capsys)
    assert code == 1
    assert out.splitlines() == [json.dumps(good), json.dumps(good)]
    assert "line 2: not JSON" in err
    assert "line 3: expected a list of messages" in err
    assert "line 5: message 0, field 'role': missing" in err
    assert "3 bad line(s)" in err


def test_empty_input_and_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["pack", "-", "--context-tokens", "100"], capsys, stdin="")
    assert (code, out) == (0, "")
    assert "packed 0 transcript(s)" in err
    transcript = [{"role": "user", "content": "x" * 800}, {"role": "assistant", "content": "ok"}]
    code, out, _ = run(["pack", "-", "--context-tokens", "100"], capsys, stdin=json.dumps(transcript) + "\n")
    assert code == 0 and json.loads(out) == cf.pack_handoff(transcript, target_context_tokens=100).messages


def test_anthropic_rows_keep_their_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = anthropic_corpus()
    path = tmp_path / "anthropic.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out_path = tmp_path / "out.jsonl"
    code, out, _ = run(
        ["pack", str(path), "--context-tokens", "3000", "--shape", "anthropic", "-o", str(out_path)], capsys
    )
    assert code == 0 and out == ""
    packed = [json.loads(line) for line in out_path.read_text(encoding="utf-8").splitlines()]
    assert len(packed) == len(rows)
    for row, result in zip(rows, packed, strict=True):
        assert result["id"] == row["id"] and result.get("system") == row.get("system")
        pack = cf.pack_handoff(row["messages"], target_context_tokens=3000, system=row.get("system"), shape="anthropic")
        assert result["messages"] == json.loads(json.dumps(pack.messages))


def test_lone_surrogates_are_written_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    transcript: list[dict[str, Any]] = [{"role": "user", "content": "a\ud800b"}]
    code, out, _ = run(["pack", "-", "--context-tokens", "100"], capsys, stdin=json.dumps(transcript) + "\n")
    assert code == 0 and "\\ud800" in out


def test_missing_file_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["pack", "/nonexistent.jsonl", "--context-tokens", "100"], capsys)
    assert code == 2 and "nonexistent" in err


def test_window_command(capsys: pytest.CaptureFixture[str]) -> None:
    transcript = [{"role": "user", "content": "x"}] * 100
    code, out, _ = run(["window", "-"], capsys, stdin=json.dumps(transcript) + "\n[1]\n")
    assert code == 1
    assert out.splitlines()[1].split("\t")[:4] == ["1", "100", "500", "20"]


def test_demo_shows_before_and_after(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["demo", "--turns", "12", "--context-tokens", "2000"], capsys)
    assert code == 0
    assert "dropped" in out and "kept" in out and "fits=True" in out
    assert "Earlier conversation, folded to fit the context window" in out


def test_bench_writes_a_table_and_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "bench.png"
    code, out, _ = run(["bench", "--sizes", "20,40", "--repeat", "1", "--plot", str(plot)], capsys)
    assert code == 0
    assert "pack_handoff (native)" in out or cf.backend == "python"
    assert "pack_handoff (reference)" in out and "vs native" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
