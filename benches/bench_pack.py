"""pack_handoff: native vs reference vs LangChain's trim_messages, on the corpus at an
8,000-token budget, in one run. Outputs are checked before timing (native == reference;
LangChain's result is counted, not compared: it trims differently).

    pytest benches/bench_pack.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

from typing import Any

import pytest
from contextfold import _backend, pack_handoff, reference

from .conftest import corpus, native, repeated

BUDGET = 8_000


def _fixture(name: str) -> list[list[dict[str, Any]]]:
    return corpus() if name == "corpus" else [repeated(int(name))]


def _pack_all(impl: Any, convos: list[list[dict[str, Any]]]) -> list[Any]:
    saved = _backend.impl
    _backend.impl = impl
    try:
        return [pack_handoff(c, target_context_tokens=BUDGET) for c in convos]
    finally:
        _backend.impl = saved


@pytest.mark.parametrize("fixture", ["corpus", "1000"])
@pytest.mark.parametrize("backend", ["native", "python"])
def bench_pack_handoff(benchmark: Any, backend: str, fixture: str) -> None:
    impl = native() if backend == "native" else reference
    convos = _fixture(fixture)
    expected = [(p.kept, p.note) for p in _pack_all(reference, convos)]
    assert [(p.kept, p.note) for p in _pack_all(impl, convos)] == expected
    benchmark.group = f"pack_handoff {fixture} @ {BUDGET}"
    saved = _backend.impl
    _backend.impl = impl
    try:
        benchmark(lambda: [pack_handoff(c, target_context_tokens=BUDGET) for c in convos])
    finally:
        _backend.impl = saved


@pytest.mark.parametrize("fixture", ["corpus", "1000"])
def bench_langchain_trim_messages(benchmark: Any, fixture: str) -> None:
    from contextfold.bench import langchain_trimmer

    prepare = langchain_trimmer(BUDGET)
    if prepare is None:
        pytest.skip("langchain-core is not installed")
    convos = _fixture(fixture)
    run = prepare(convos)  # message objects built before timing
    assert len(run()) == len(convos)
    benchmark.group = f"pack_handoff {fixture} @ {BUDGET}"
    benchmark(run)


@pytest.fixture(scope="module")
def distinct_batch() -> list[list[dict[str, Any]]]:
    """10,000 corpus transcripts, each a distinct copy (as a gateway's requests are)."""
    import gc
    import json

    pool = corpus()
    batch = [json.loads(json.dumps(pool[i % len(pool)])) for i in range(10_000)]
    gc.freeze()  # the batch is long-lived: keep the collector from rescanning it each round
    return batch


@pytest.mark.parametrize("threads", [1, 2])
def bench_pack_many(benchmark: Any, threads: int, distinct_batch: list[list[dict[str, Any]]]) -> None:
    from contextfold import pack_many

    native()
    assert pack_many(distinct_batch[:200], target_context_tokens=BUDGET, threads=threads) == [
        pack_handoff(c, target_context_tokens=BUDGET) for c in distinct_batch[:200]
    ]
    benchmark.group = f"pack_many 10,000 transcripts @ {BUDGET}"
    benchmark.pedantic(
        lambda: pack_many(distinct_batch, target_context_tokens=BUDGET, threads=threads), rounds=5, iterations=1
    )


def bench_pack_handoff_loop(benchmark: Any, distinct_batch: list[list[dict[str, Any]]]) -> None:
    """The baseline pack_many must beat: native pack_handoff called in a Python loop."""
    native()
    benchmark.group = f"pack_many 10,000 transcripts @ {BUDGET}"
    benchmark.pedantic(
        lambda: [pack_handoff(c, target_context_tokens=BUDGET) for c in distinct_batch], rounds=5, iterations=1
    )
