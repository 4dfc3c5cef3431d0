"""Dask bag over stored JSONL transcripts, on the local synchronous and threaded schedulers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.integrations.dask import pack_jsonl, pack_lines

from ..conftest import SHARED, corpus_rows
from . import need

need("dask.bag", "dask")


def expected(row: dict[str, Any], budget: int) -> dict[str, Any]:
    pack = cf.pack_handoff(row["messages"], target_context_tokens=budget, system=row.get("system"))
    return {**row, "messages": pack.messages}


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_bag_pipeline_equals_one_by_one_packing(tmp_path: Path, scheduler: str) -> None:
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
