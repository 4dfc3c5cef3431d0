"""Exact token counts and what packing costs as the history grows, in one run.

- counting corpus message texts: the native count vs tiktoken's ``encode`` (the vocabulary
  loaded offline from the file the extension embeds);
- ``pack_many`` of 2,000 corpus transcripts with ``estimate_tokens="o200k_base"``: 2
  threads vs 1;
- walk-back: ``pack_handoff`` at 8,000 tokens on a 5,000-message generated agent run vs
  on its last 500 messages (``"o200k_base"``), and on 20,000 vs 2,000 messages (chars/4):
  the cost follows what is kept, not the length of the history.

They time the encoder, so the count cache is off (each round would otherwise be answered
from it); benches/bench_replay.py times the cache.

    pytest benches/bench_encodings.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
from contextfold import DEFAULT_COUNT_CACHE_BYTES, count_tokens, pack_handoff, pack_many, reference, set_count_cache
from contextfold._backend import using
from contextfold._contract import estimator_text
from contextfold.synthetic import agent_run

from tests.offline_tiktoken import ENCODINGS, tiktoken_encoding

from .conftest import corpus, native

BUDGET = 8_000


@pytest.fixture(autouse=True)
def _count_cache_off() -> Iterator[None]:
    for impl in (native(), reference):
        with using(impl):
            set_count_cache(0)
    yield
    for impl in (native(), reference):
        with using(impl):
            set_count_cache(DEFAULT_COUNT_CACHE_BYTES)


@cache
def texts() -> list[str]:
    return [estimator_text(m) for convo in corpus() for m in convo]


@cache
def run(messages: int) -> list[dict[str, Any]]:
    """A generated agent run of exactly ``messages`` messages: its system prompt and task,
    then its newest messages."""
    full = agent_run(messages * 4 // 9 + 2)
    assert len(full) >= messages
    return full[:2] + full[len(full) - messages + 2 :]


def tail(messages: int, of: int) -> list[dict[str, Any]]:
    """The last ``messages`` messages of ``run(of)``."""
    return run(of)[-messages:]


@pytest.mark.parametrize("name", ENCODINGS)
def bench_count_native(benchmark: Any, name: str) -> None:
    native()
    encoding = tiktoken_encoding(name)
    corpus_texts = texts()
    assert [count_tokens(t, name) for t in corpus_texts] == [
        len(encoding.encode(t, disallowed_special=())) for t in corpus_texts
    ]
    benchmark.group = f"count corpus texts, {name}"
    benchmark(lambda: [count_tokens(t, name) for t in corpus_texts])


@pytest.mark.parametrize("name", ENCODINGS)
def bench_count_tiktoken_encode(benchmark: Any, name: str) -> None:
    encoding = tiktoken_encoding(name)
    corpus_texts = texts()
    benchmark.group = f"count corpus texts, {name}"
    benchmark(lambda: [len(encoding.encode(t, disallowed_special=())) for t in corpus_texts])


@pytest.mark.parametrize("threads", [1, 2])
def bench_pack_many_o200k(benchmark: Any, threads: int) -> None:
    native()
    batch = (corpus() * (2_000 // len(corpus()) + 1))[:2_000]
    expected = pack_many(batch[:50], target_context_tokens=BUDGET, estimate_tokens="o200k_base", threads=1)
    assert pack_many(batch[:50], target_context_tokens=BUDGET, estimate_tokens="o200k_base", threads=threads) == (
        expected
    )
    benchmark.group = "pack_many 2,000 corpus transcripts, o200k_base"
    benchmark(lambda: pack_many(batch, target_context_tokens=BUDGET, estimate_tokens="o200k_base", threads=threads))


WALKS = [
    ("native", "o200k_base", 500, 5_000),
    ("native", "o200k_base", 5_000, 5_000),
    ("native", None, 2_000, 20_000),
    ("native", None, 20_000, 20_000),
    ("python", None, 2_000, 20_000),
    ("python", None, 20_000, 20_000),
]


@pytest.mark.parametrize(("backend", "estimate", "messages", "of"), WALKS)
def bench_walk_back(benchmark: Any, backend: str, estimate: str | None, messages: int, of: int) -> None:
    """Each backend's cost as the run grows (docs/packing.md): compare within a group."""
    impl = native() if backend == "native" else reference
    transcript = tail(messages, of)
    assert len(transcript) == messages
    with using(impl):
        pack = pack_handoff(transcript, target_context_tokens=BUDGET, estimate_tokens=estimate)
    assert pack.fits and pack.dropped > 0
    if estimate is None:  # the reference counts an embedded encoding only with tiktoken's vocabulary
        with using(reference):
            assert pack == pack_handoff(transcript, target_context_tokens=BUDGET)
    benchmark.group = f"pack_handoff @ {BUDGET} as the run grows, {backend}, {estimate or 'chars/4'}"
    with using(impl):
        benchmark(lambda: pack_handoff(transcript, target_context_tokens=BUDGET, estimate_tokens=estimate))
