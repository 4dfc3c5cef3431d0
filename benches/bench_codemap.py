"""rank_by_count on 100,000 items (vs the idiomatic Counter expression) and consolidate on
a 10,000-observation run: native vs reference, in one run.

    pytest benches/bench_codemap.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest
from contextfold import _backend, consolidate, reference

from .conftest import native


def _paths(n: int, distinct: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    dirs = ["src/store", "src/gateway", "api/src/routes", "packages/memory/src/working", "tests", "docs"]
    pool = [f"{rng.choice(dirs)}/file_{i}.ts" for i in range(distinct)]
    return [pool[min(int(rng.paretovariate(1.2)) - 1, distinct - 1)] for _ in range(n)]


def _spread(n: int, distinct: int, seed: int = 4) -> list[str]:
    """n f-string paths, each of ``distinct`` paths equally often, in random order."""
    items = [f"src/pkg{i % 50}/file_{i % distinct}.ts" for i in range(n)]
    random.Random(seed).shuffle(items)
    return items


# Distinct str objects, as json.loads gives for the paths of a run's tool calls: a few
# paths read again and again (Pareto), or many paths equally often.
ITEMS = {
    "pareto": json.loads(json.dumps(_paths(100_000, 5_000))),
    "5,000 unique": _spread(100_000, 5_000),
}


def counter_sorted(items: list[str]) -> list[tuple[str, int]]:
    """The idiomatic Python expression rank_by_count is compared with."""
    return sorted(Counter(items).items(), key=lambda kv: (-kv[1], kv[0]))


@pytest.mark.parametrize("items", list(ITEMS))
@pytest.mark.parametrize("impl", ["native", "counter"])
def bench_rank_by_count(benchmark: Any, impl: str, items: str) -> None:
    paths = ITEMS[items]
    benchmark.group = f"rank_by_count 100,000 items, {items}"
    if impl == "counter":
        benchmark(counter_sorted, paths)
        return
    rank = native().rank_by_count
    assert rank(paths) == counter_sorted(paths)
    benchmark(rank, paths)


def fresh_in_order() -> tuple[list[str]]:
    """100,000 paths made just now, in the order made (5,000 distinct): no str holds a
    cached hash yet, and the objects lie in memory in list order."""
    return ([f"src/pkg{i % 50}/file_{i % 5_000}.ts" for i in range(100_000)],)


def then_allocate(rank: Any) -> Any:
    """``rank`` followed by one allocation the collector tracks, at which a young-generation
    collection its results left due runs (the native ranking pauses the collector while it
    builds them): timed with the call, as a caller pays it."""

    def ranked(items: list[str]) -> Any:
        out = rank(items)
        _ = [out]
        return out

    return ranked


@pytest.mark.parametrize("impl", ["native", "counter"])
def bench_rank_by_count_fresh(benchmark: Any, impl: str) -> None:
    benchmark.group = "rank_by_count 100,000 fresh items, in order"
    rank = then_allocate(counter_sorted if impl == "counter" else native().rank_by_count)
    (paths,) = fresh_in_order()
    assert rank(paths) == counter_sorted(paths)
    benchmark.pedantic(rank, setup=lambda: (fresh_in_order(), {}), rounds=30)


@pytest.mark.parametrize("backend", ["native", "python"])
def bench_consolidate(benchmark: Any, backend: str) -> None:
    impl = native() if backend == "native" else reference
    raw = _paths(10_000, 800, seed=5)
    snapshot = {
        "task": "find why the gateway drops requests",
        "read": [f"C:\\code\\repo\\{p}".replace("/", "\\") for p in raw[:7_000]],
        "edited": raw[7_000:9_000],
        "created": raw[9_000:9_500],
        "deleted": raw[9_500:],
    }
    saved = _backend.impl
    try:
        _backend.impl = reference
        expected = consolidate(snapshot, root="C:/code/repo")
        _backend.impl = impl
        assert consolidate(snapshot, root="C:/code/repo") == expected
        benchmark.group = "consolidate 10,000 observations"
        benchmark(lambda: consolidate(snapshot, root="C:/code/repo"))
    finally:
        _backend.impl = saved
