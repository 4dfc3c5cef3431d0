"""pack_handoff on OpenAI Responses API items: native vs reference, on the corpus
converted to Responses items (:func:`contextfold.synthetic.responses_items`) at an
8,000-token budget. Outputs are checked equal before timing.

    pytest benches/bench_shapes.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from contextfold import _backend, pack_handoff, reference
from contextfold.synthetic import responses_items

from .bench_pack import pack_all
from .conftest import corpus, native, repeated

BUDGET = 8_000


@cache
def _items(fixture: str) -> list[list[dict[str, Any]]]:
    return [responses_items(c) for c in corpus()] if fixture == "corpus" else [responses_items(repeated(int(fixture)))]


@pytest.mark.parametrize("fixture", ["corpus", "1000"])
@pytest.mark.parametrize("backend", ["native", "python"])
def bench_pack_responses(benchmark: Any, backend: str, fixture: str) -> None:
    impl = native() if backend == "native" else reference
    transcripts = _items(fixture)
    assert pack_all(impl, transcripts) == pack_all(reference, transcripts)
    benchmark.group = f"pack_handoff responses {fixture} @ {BUDGET}"
    with _backend.using(impl):
        benchmark(lambda: [pack_handoff(t, target_context_tokens=BUDGET) for t in transcripts])
