"""pack_jsonl on a Dask LocalCluster of 1 and of 2 worker processes: the corpus JSONL
repeated to ``--megabytes`` (one bad line in the middle), 4 MiB partitions, each round
after a warm-up computation; prints each round, the lines packed and refused, and the
2-process speed-up (best round against best round).

    python -m benches.cluster --megabytes 100

Needs the integrations extra (``distributed``); not part of the gate (a cluster takes
seconds to start).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from contextfold.integrations.dask import ERROR_KEY, pack_jsonl

from .conftest import SHARED

BAD_LINE = '{"messages": [{"role": 7}]}'


def write_input(path: Path, megabytes: int) -> None:
    """The corpus lines repeated to ``megabytes``, with one bad line in the middle."""
    source = (SHARED / "corpus" / "transcripts.jsonl").read_text(encoding="utf-8").splitlines()
    lines: list[str] = []
    size = 0
    while size < megabytes * 2**20:
        lines.append(source[len(lines) % len(source)])
        size += len(lines[-1]) + 1
    lines.insert(len(lines) // 2, BAD_LINE)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def tally(partition: list[str]) -> list[tuple[int, int]]:
    """``(packed, refused)`` lines of a partition."""
    refused = sum(line.startswith('{"' + ERROR_KEY) for line in partition)
    return [(len(partition) - refused, refused)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="rounds for each cluster size (default: 3)")
    args = parser.parse_args()
    from dask.distributed import Client, LocalCluster

    best: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.jsonl"
        write_input(path, args.megabytes)
        for workers in [1, 2] * args.rounds:
            with (
                LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
                ) as cluster,
                Client(cluster),
            ):
                bag = pack_jsonl(str(path), blocksize="4MiB", target_context_tokens=8_000).map_partitions(tally)
                bag.compute()  # the workers import contextfold and read the file once
                started = time.perf_counter()
                counts = bag.compute()
                took = time.perf_counter() - started
            packed, refused = sum(c[0] for c in counts), sum(c[1] for c in counts)
            best[workers] = min(took, best.get(workers, took))
            print(f"{workers} process(es): {took:.2f} s, {packed} lines packed, {refused} refused")
    print(f"2 processes vs 1: {best[1] / best[2]:.2f}x")


if __name__ == "__main__":
    main()
