"""pack_handoff: native vs reference vs LangChain's trim_messages, on the corpus at an
8,000-token budget, in one run. Outputs are checked before timing (native == reference;
LangChain's result is counted, not compared: it trims differently).

    pytest benches/bench_pack.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from contextfold import _backend, pack_handoff, reference

from .conftest import corpus, native, repeated

BUDGET = 8_000


def _fixture(name: str) -> list[list[dict[str, Any]]]:
    return corpus() if name == "corpus" else [repeated(int(name))]


def pack_all(impl: Any, convos: list[list[dict[str, Any]]]) -> list[Any]:
    """Every transcript packed at ``BUDGET`` on backend ``impl``."""
    with _backend.using(impl):
        return [pack_handoff(c, target_context_tokens=BUDGET) for c in convos]


@pytest.mark.parametrize("fixture", ["corpus", "1000"])
@pytest.mark.parametrize("backend", ["native", "python"])
def bench_pack_handoff(benchmark: Any, backend: str, fixture: str) -> None:
    impl = native() if backend == "native" else reference
    convos = _fixture(fixture)
    expected = [(p.kept, p.note) for p in pack_all(reference, convos)]
    assert [(p.kept, p.note) for p in pack_all(impl, convos)] == expected
    benchmark.group = f"pack_handoff {fixture} @ {BUDGET}"
    with _backend.using(impl):
        benchmark(lambda: [pack_handoff(c, target_context_tokens=BUDGET) for c in convos])


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


@pytest.fixture(scope="module")
def long_batch() -> list[list[dict[str, Any]]]:
    """720 long transcripts: each corpus run, its messages repeated to 120 or more, a
    distinct copy each."""
    import gc
    import json

    def lengthened(convo: list[dict[str, Any]]) -> list[dict[str, Any]]:
        head = [m for m in convo if m["role"] == "system"]
        body = [m for m in convo if m["role"] != "system"] or convo
        out = list(head)
        while len(out) < 120:
            out.extend(body)
        return out

    pool = corpus()
    batch = [json.loads(json.dumps(lengthened(pool[i % len(pool)]))) for i in range(720)]
    gc.freeze()
    return batch


@pytest.mark.parametrize("fixture", ["short", "long"])
@pytest.mark.parametrize("threads", ["default", "1"])
def bench_pack_many_default_threads(
    benchmark: Any,
    threads: str,
    fixture: str,
    distinct_batch: list[list[dict[str, Any]]],
    long_batch: list[list[dict[str, Any]]],
) -> None:
    """The default thread count must never lose to one thread: it packs in place where
    workers would idle (compare the two rows of each group)."""
    from contextfold import pack_many

    native()
    batch = distinct_batch[:2_000] if fixture == "short" else long_batch
    count = None if threads == "default" else 1
    assert pack_many(batch, target_context_tokens=BUDGET, threads=count) == [
        pack_handoff(c, target_context_tokens=BUDGET) for c in batch
    ]
    benchmark.group = f"pack_many {len(batch)} {fixture} transcripts @ {BUDGET}: default vs 1 thread"
    benchmark.pedantic(lambda: pack_many(batch, target_context_tokens=BUDGET, threads=count), rounds=11, iterations=1)


def bench_pack_handoff_loop(benchmark: Any, distinct_batch: list[list[dict[str, Any]]]) -> None:
    """The baseline pack_many must beat: native pack_handoff called in a Python loop."""
    native()
    benchmark.group = f"pack_many 10,000 transcripts @ {BUDGET}"
    benchmark.pedantic(
        lambda: [pack_handoff(c, target_context_tokens=BUDGET) for c in distinct_batch], rounds=5, iterations=1
    )


@pytest.fixture
def busy_thread() -> Iterator[None]:
    """Another Python thread that wants the GIL all the time, as a gateway's others do."""
    import threading

    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    thread = threading.Thread(target=spin)
    thread.start()
    yield
    stop.set()
    thread.join()


@pytest.mark.parametrize("how", ["pack_many 1 thread", "pack_many 2 threads", "pack_handoff loop"])
def bench_pack_many_beside_a_busy_thread(
    benchmark: Any, how: str, distinct_batch: list[list[dict[str, Any]]], busy_thread: None
) -> None:
    """A batch must share the GIL as bytecode does: about twice its time alone, no more."""
    from contextfold import pack_many

    native()
    batch = distinct_batch[:2_000]
    runs = {
        "pack_many 1 thread": lambda: pack_many(batch, target_context_tokens=BUDGET, threads=1),
        "pack_many 2 threads": lambda: pack_many(batch, target_context_tokens=BUDGET, threads=2),
        "pack_handoff loop": lambda: [pack_handoff(c, target_context_tokens=BUDGET) for c in batch],
    }
    benchmark.group = f"2,000 transcripts @ {BUDGET}, beside a busy Python thread"
    benchmark.pedantic(runs[how], rounds=5, iterations=1)


@pytest.mark.parametrize("backend", ["native", "python"])
def bench_pack_handoff_200_000_pins(benchmark: Any, backend: str) -> None:
    """Every message pinned: each pin finds its segment in O(1), not by a scan."""
    impl = native() if backend == "native" else reference
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(200_000)]
    pins = list(range(len(messages)))
    benchmark.group = "pack_handoff 200,000 pins"
    with _backend.using(impl):
        packed = benchmark(lambda: pack_handoff(messages, target_context_tokens=1_000, pinned=pins))
    assert packed.kept == pins


@pytest.mark.parametrize("keywords", ["the last call's objects", "equal objects in turn", "two budgets in turn"])
def bench_pack_handoff_options_lookup(benchmark: Any, keywords: str) -> None:
    """What finding a call's options costs: keywords that are the thread's last call's
    objects are matched by identity; equal but distinct objects, or two call sites in
    turn, are looked up in pack_options' cache (one short message, so the lookup shows)."""
    from itertools import cycle

    native()
    messages = [{"role": "user", "content": "hi"}]
    same, equal, other = int("8000"), int("8000"), int("4000")
    turns = {
        "the last call's objects": cycle([same]),
        "equal objects in turn": cycle([same, equal]),
        "two budgets in turn": cycle([same, other]),
    }[keywords]
    benchmark.group = "pack_handoff options lookup, one short message"
    benchmark(lambda: pack_handoff(messages, target_context_tokens=next(turns)))
