"""A gateway's view of a conversation (issue #26): the four longest corpus transcripts
replayed turn by turn as request bodies, each turn resending the turns before it, packed
by ``pack_request`` at an 8,000-token budget from turn 2 on, sized by chars/4 and by exact
``o200k_base`` counts. Exact counts go through the count cache: warm, every message has
been counted before (a retried or re-packed conversation, and every round of a benchmark
after its first); cold, the cache is emptied before each replay, so each turn's new
message is byte-pair encoded once. Outputs are checked against the reference (tiktoken)
before timing.

    pytest benches/bench_replay.py --benchmark-enable --benchmark-group-by=group
    python -m benches.bench_replay          # the ratios to chars/4, measured in one run
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from contextfold import DEFAULT_COUNT_CACHE_BYTES, _backend, pack_request, reference, set_count_cache
from contextfold._contract import EncodingName

from tests.offline_tiktoken import tiktoken_encoding

from .conftest import SHARED, native

BUDGET = 8_000


@cache
def replays() -> list[list[bytes]]:
    """The four longest corpus transcripts (both corpus files), each as its request body
    at every turn, written as the corpus is (``json.dumps``)."""
    rows = []
    for name in ("transcripts.jsonl", "anthropic.jsonl"):
        path = SHARED / "corpus" / name
        if not path.exists():
            pytest.skip(f"corpus not found at {path} (set CONTEXTFOLD_SHARED)")
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows.append((row["messages"], {"model": "gpt-4o"} | ({"system": row["system"]} if "system" in row else {})))
    longest = sorted(rows, key=lambda r: len(r[0]), reverse=True)[:4]
    return [
        [json.dumps({**request, "messages": convo[:n]}).encode() for n in range(1, len(convo) + 1)]
        for convo, request in longest
    ]


def replay(estimate: EncodingName | None) -> list[Any]:
    """Turns 2 on of every replay (turn 1 was packed before)."""
    return [
        pack_request(body, target_context_tokens=BUDGET, estimate_tokens=estimate)
        for turns in replays()
        for body in turns[1:]
    ]


def cold_start() -> None:
    """An empty cache that has seen turn 1 of each replay."""
    set_count_cache(DEFAULT_COUNT_CACHE_BYTES)
    for turns in replays():
        pack_request(turns[0], target_context_tokens=BUDGET, estimate_tokens="o200k_base")


def check_against_tiktoken() -> None:
    tiktoken_encoding("o200k_base")
    with _backend.using(native()):
        cold_start()
        exact = replay("o200k_base")
    with _backend.using(reference):
        assert replay("o200k_base") == exact


@pytest.mark.parametrize("run", ["chars/4", "o200k_base warm", "o200k_base cold"])
def bench_replay(benchmark: Any, run: str) -> None:
    with _backend.using(native()):
        benchmark.group = f"replay of the 4 longest corpus transcripts, turns 2+, @ {BUDGET}"
        if run == "chars/4":
            benchmark(replay, None)
        elif run == "o200k_base warm":
            check_against_tiktoken()
            benchmark(replay, "o200k_base")
        else:
            benchmark.pedantic(replay, args=("o200k_base",), setup=cold_start, rounds=5)
        set_count_cache(DEFAULT_COUNT_CACHE_BYTES)


def ratios(rounds: int = 7) -> dict[str, float]:
    """Median over interleaved rounds of time(exact) / time(chars/4), warm and cold (CPU
    time)."""

    def timed(setup: Callable[[], None], estimate: str | None) -> float:
        setup()
        start = time.process_time()
        replay(estimate)
        return time.process_time() - start

    out: dict[str, list[float]] = {"warm": [], "cold": []}
    with _backend.using(native()):
        replay("o200k_base")
        for _ in range(rounds):
            chars = timed(lambda: None, None)
            out["warm"].append(timed(lambda: None, "o200k_base") / chars)
            out["cold"].append(timed(cold_start, "o200k_base") / chars)
        set_count_cache(DEFAULT_COUNT_CACHE_BYTES)
    return {name: statistics.median(values) for name, values in out.items()}


if __name__ == "__main__":
    for name, ratio in ratios().items():
        print(f"o200k_base {name} vs chars/4: {ratio:.2f}x")
