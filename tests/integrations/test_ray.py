"""Ray Data on a local Ray: ``pack_batch`` as a ``map_batches`` body over pyarrow batches
(the ``integrations`` extra installs Ray; the adapter itself needs only pyarrow)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest

from ..conftest import corpus_rows
from . import need

ray = need("ray", "integrations")
need("ray.data", "integrations")
need("pyarrow", "arrow")
from contextfold.integrations.arrow import ERROR_COLUMN, pack_batch  # noqa: E402


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A Ray of two worker CPUs on this machine, shut down after the module."""
    # address="local": a Ray of its own, whatever RAY_ADDRESS names.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    try:
        yield
    finally:
        ray.shutdown()


def test_map_batches_packs_each_line_as_pack_request_does(local_ray: None, tmp_path: Path) -> None:
    import ray.data

    lines = [json.dumps(r, ensure_ascii=False) for r in corpus_rows("transcripts.jsonl")]
    lines.insert(7, '{"messages": [{"role": 7}]}')
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    execution = ray.data.DataContext.get_current().execution_options
    preserved, execution.preserve_order = execution.preserve_order, True
    try:
        dataset = ray.data.read_text(str(tmp_path / "runs.jsonl")).map_batches(
            pack_batch,
            batch_format="pyarrow",
            batch_size=8,  # several batches, so several tasks
            fn_kwargs={"column": "text", "target_context_tokens": 3_000},
        )
        rows: list[dict[str, Any]] = dataset.take_all()
    finally:
        execution.preserve_order = preserved
    assert len(rows) == len(lines)
    for line, row in zip(lines, rows, strict=True):
        if line.startswith('{"messages": [{"role": 7}'):
            assert row["text"] is None
            record = json.loads(row[ERROR_COLUMN])
            assert record["type"] == "MessageTypeError"
            assert record["message"] == "message 0, field 'role': expected str, got int"
            continue
        packed = cf.pack_request(line.encode(), target_context_tokens=3_000)
        assert (row["text"], row[ERROR_COLUMN]) == (packed.body.decode(), None)
    folded = [row["text"] is not None and len(row["text"]) < len(line) for row, line in zip(rows, lines, strict=True)]
    assert sum(folded) >= 10
