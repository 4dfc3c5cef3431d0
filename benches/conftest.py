"""Benchmark fixtures: corpus transcripts, and long transcripts built by repeating corpus
messages. Benchmarks refuse to time a debug build of the extension."""

from __future__ import annotations

import gc
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

SHARED = Path(os.environ.get("CONTEXTFOLD_SHARED", Path(__file__).resolve().parents[2] / "shared"))


@cache
def corpus() -> list[list[dict[str, Any]]]:
    path = SHARED / "corpus" / "transcripts.jsonl"
    if not path.exists():
        reason = f"corpus not found at {path} (set CONTEXTFOLD_SHARED)"
        if os.environ.get("CI") == "true":  # CI must run every benchmark
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return [json.loads(line)["messages"] for line in path.read_text(encoding="utf-8").splitlines()]


@cache
def repeated(n: int) -> list[dict[str, Any]]:
    """An n-message transcript: one system prompt, then corpus messages in order, cycled."""
    pool = [m for convo in corpus() for m in convo if m["role"] != "system"]
    out = [{"role": "system", "content": "You are a coding agent."}]
    while len(out) < n:
        out.extend(pool[: n - len(out)])
    gc.freeze()
    return out


def native() -> Any:
    try:
        from contextfold import _native
    except ImportError:
        pytest.skip("the native extension is not built")
    return _native


@pytest.fixture(scope="session", autouse=True)
def release_build() -> None:
    try:
        from contextfold import _native
    except ImportError:
        return
    if _native.build_profile != "release":
        pytest.skip(
            "benchmarks need a release build (pip install . or maturin develop --release)", allow_module_level=True
        )
