"""CONTEXTFOLD_TEST_BACKENDS (tests/conftest.py): which backends' cases the tests run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import _test_backends

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("raw", "expected"), [("native", ["native"]), ("python", ["python"]), ("native, python", ["native", "python"])]
)
def test_the_setting_names_the_backends(monkeypatch: pytest.MonkeyPatch, raw: str, expected: list[str]) -> None:
    monkeypatch.setenv("CONTEXTFOLD_TEST_BACKENDS", raw)
    assert _test_backends() == expected


def test_both_backends_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONTEXTFOLD_TEST_BACKENDS", raising=False)
    assert _test_backends() == ["native", "python"]


@pytest.mark.parametrize("raw", ["", "rust", "native,", "Native"])
def test_anything_else_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("CONTEXTFOLD_TEST_BACKENDS", raw)
    with pytest.raises(ValueError, match=rf"^CONTEXTFOLD_TEST_BACKENDS must name native, python or both, not {raw!r}$"):
        _test_backends()


def _collected(backends: str) -> list[str]:
    """The test ids a collection of a fixture-parametrized test and a benchmark with a
    third contender (``floor``) keeps under ``backends``."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p", "no:cacheprovider"),
            "tests/test_window.py::test_limits_under_four_are_refused",
            "benches/bench_window.py::bench_windowed",
        ],
        cwd=ROOT,
        env={**os.environ, "CONTEXTFOLD_TEST_BACKENDS": backends},
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_a_backend_left_out_is_deselected_and_other_contenders_kept() -> None:
    both = _collected("native,python")
    only_native = _collected("native")
    assert {i for i in both if "[python-" in i} and {i for i in both if "[floor-" in i}
    assert only_native == [i for i in both if "[python-" not in i]
