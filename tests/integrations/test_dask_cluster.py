"""pack_lines on a real Dask cluster: worker processes, the batch and its options pickled to
them, each partition packed there (``distributed.LocalCluster``, in the integrations extra)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.integrations.dask import ERROR_KEY, error_line, pack_jsonl, pack_lines

from ..conftest import corpus_rows
from . import need

need("dask.bag", "dask")
distributed = need("distributed", "integrations")


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """A client of a one-process, one-thread local cluster (its worker a separate process)."""
    with (
        distributed.LocalCluster(
            processes=True, n_workers=1, threads_per_worker=1, dashboard_address=None, host="127.0.0.1"
        ) as cluster,
        distributed.Client(cluster) as connected,
    ):
        yield connected


def test_a_worker_process_packs_every_good_line_and_reports_the_bad_one(client: Any, tmp_path: Path) -> None:
    rows = corpus_rows("transcripts.jsonl") + corpus_rows("anthropic.jsonl")
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    bad = len(lines) // 2
    lines.insert(bad, '{"messages": [{"role": 7}]}')
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    options = {"target_context_tokens": 3_000, "sizing": "provider", "edits": [cf.ClearToolUses(keep=2)]}
    bag = pack_jsonl(str(tmp_path / "runs.jsonl"), blocksize=200_000, **options)
    assert bag.npartitions > 2
    out = client.compute(bag).result()
    here = pack_lines(lines, **options)  # the same lines packed in this process, as one batch
    assert [i for i, line in enumerate(out) if ERROR_KEY in json.loads(line)] == [bad]
    assert out[:bad] + out[bad + 1 :] == here[:bad] + here[bad + 1 :]
    with pytest.raises(cf.MessageTypeError) as refused:
        cf.pack_request(lines[bad], **options)  # type: ignore[arg-type]
    partition, first = _partition_of(bag, bad)
    in_partition = bad - first  # the worker's batch is its partition
    assert partition > 0
    assert out[bad] == error_line(in_partition, refused.value, partition)
    assert json.loads(out[bad])[ERROR_KEY] == {
        **json.loads(here[bad])[ERROR_KEY],
        "line": in_partition,
        "partition": partition,
    }
    packed = [json.loads(line) for i, line in enumerate(out) if i != bad]
    good = [json.loads(line) for i, line in enumerate(lines) if i != bad]
    assert sum(len(p["messages"]) < len(g["messages"]) for p, g in zip(packed, good, strict=True)) >= 20


def _partition_of(bag: Any, index: int) -> tuple[int, int]:
    """The number of the partition holding line ``index`` of the file, and the index in the
    file of that partition's first line."""
    sizes = bag.map_partitions(lambda part: [len(list(part))]).compute(scheduler="sync")
    first = 0
    for number, size in enumerate(sizes):
        if index < first + size:
            return number, first
        first += size
    raise AssertionError(f"line {index} is in no partition")
