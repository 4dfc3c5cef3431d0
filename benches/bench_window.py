"""message_tokens and windowed: native vs reference, with the native floor (reading each
message's role and content length, nothing more) measured in the same run.

    pytest benches --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

from typing import Any

import pytest
from contextfold import reference

from .conftest import corpus, native, repeated

SIZES = [200, 1_000, 5_000]


def _fixture(name: str) -> list[list[dict[str, Any]]]:
    return corpus() if name == "corpus" else [repeated(int(name))]


@pytest.mark.parametrize("fixture", ["corpus", *map(str, SIZES)])
@pytest.mark.parametrize("backend", ["native", "python"])
def bench_tokens_of(benchmark: Any, backend: str, fixture: str) -> None:
    impl = native() if backend == "native" else reference
    convos = _fixture(fixture)
    expected = [reference.tokens_of(c) for c in convos]
    assert [impl.tokens_of(c) for c in convos] == expected
    benchmark.group = f"tokens_of {fixture}"
    benchmark(lambda: [impl.tokens_of(c) for c in convos])


@pytest.mark.parametrize("fixture", ["corpus", *map(str, SIZES)])
@pytest.mark.parametrize("backend", ["native", "python", "floor"])
def bench_windowed(benchmark: Any, backend: str, fixture: str) -> None:
    convos = _fixture(fixture)
    benchmark.group = f"windowed {fixture}"
    if backend == "floor":
        scan = getattr(native(), "_scan_floor", None)
        if scan is None:
            pytest.skip("the floor needs a build with it: maturin develop --release --features bench-floor")
        benchmark(lambda: [scan(c) for c in convos])
        return
    impl = native() if backend == "native" else reference
    expected = [reference.window_start(c, 80, 64_000) for c in convos]
    assert [impl.window_start(c, 80, 64_000) for c in convos] == expected

    def run() -> list[list[dict[str, Any]]]:
        return [c[impl.window_start(c, 80, 64_000) :] for c in convos]

    benchmark(run)
