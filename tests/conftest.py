"""Shared fixtures: the seed vectors and corpus (read from ../shared), and a fixture that
runs the public API under each backend in turn."""

from __future__ import annotations

import _thread
import gc
import json
import operator
import os
import signal
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import contextfold
import pytest
from contextfold import _backend, reference
from hypothesis import settings


def _examples_scale() -> float:
    raw = os.environ.get("CONTEXTFOLD_EXAMPLES_SCALE", "1")
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not 0 < scale < float("inf"):
        raise ValueError(f"CONTEXTFOLD_EXAMPLES_SCALE must be a positive number, not {raw!r}")
    return scale


# Every property test draws its own count of examples times this scale: CI runs the
# README's suite at 1 and the deeper or repeated passes at less (.ci/run), and a longer
# hunt for bugs is CONTEXTFOLD_EXAMPLES_SCALE=10 (the README says so at its top).
EXAMPLES_SCALE = _examples_scale()


def examples(count: int, **options: Any) -> settings:
    """The settings of a property test that draws `count` examples (times the scale)."""
    return settings(max_examples=max(1, round(count * EXAMPLES_SCALE)), **options)


_ALL_BACKENDS = ("native", "python")


def _test_backends() -> list[str]:
    raw = os.environ.get("CONTEXTFOLD_TEST_BACKENDS", ",".join(_ALL_BACKENDS))
    names = [name.strip() for name in raw.split(",")]
    if any(name not in _ALL_BACKENDS for name in names):
        raise ValueError(f"CONTEXTFOLD_TEST_BACKENDS must name native, python or both, not {raw!r}")
    return names


# The backends the tests run on; both by default. CI's debug-allocator pass takes native
# alone: the reference is pure Python, where that allocator has nothing to find.
BACKENDS = _test_backends()

# The parameters that name the backend a test case runs on: the `backend` and `impl`
# fixtures', and the tests that parametrize a backend's name themselves. The benchmarks
# give `backend` and `impl` other contenders too (`floor`, `counter`): those always run.
_BACKEND_PARAMETERS = ("backend", "impl", "backend_name")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects the cases of a backend not in ``BACKENDS``."""
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        named = [params[name] for name in _BACKEND_PARAMETERS if name in params]
        off = any(value in _ALL_BACKENDS and value not in BACKENDS for value in named)
        (left_out if off else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


settings.register_profile("default", examples(100), deadline=None, print_blob=True)
settings.load_profile("default")

SHARED = Path(os.environ.get("CONTEXTFOLD_SHARED", Path(__file__).resolve().parents[2] / "shared"))

try:
    from contextfold import _native
except ImportError:  # the extension is not built: native cases skip
    _native = None  # type: ignore[assignment]

IMPLS = {"native": _native, "python": reference}


def missing(what: str, path: Path) -> NoReturn:
    """Skips a test whose shared data is absent; under CI (``CI=true``), fails it."""
    reason = f"{what} not found at {path} (set CONTEXTFOLD_SHARED)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run every test: {reason}", pytrace=False)
    pytest.skip(reason)


@cache
def vectors(fn: str) -> list[dict[str, Any]]:
    """The seed behaviour vectors for one function; none at all is a failure, so a loop
    over them cannot pass on zero rows."""
    path = SHARED / "vectors" / "seed_vectors.jsonl"
    if not path.exists():
        missing("seed vectors", path)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    found = [r for r in rows if r["fn"] == fn]
    if not found:
        pytest.fail(f"no seed vectors for {fn!r} in {path}", pytrace=False)
    return found


def corpus_file(name: str) -> Path:
    """A corpus file's path (see :func:`missing` when ../shared/corpus is absent)."""
    path = SHARED / "corpus" / name
    if not path.exists():
        missing("corpus", path)
    return path


def corpus_rows(name: str) -> list[dict[str, Any]]:
    """Rows of a corpus file."""
    return [json.loads(line) for line in corpus_file(name).read_text(encoding="utf-8").splitlines()]


@cache
def _corpus(name: str) -> list[dict[str, Any]]:
    return corpus_rows(name)


def openai_corpus() -> list[list[dict[str, Any]]]:
    return [row["messages"] for row in _corpus("transcripts.jsonl")]


def anthropic_corpus() -> list[dict[str, Any]]:
    return _corpus("anthropic.jsonl")


def switch_to(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Switches the public API to backend ``name`` for the test (skipped when the native
    extension is not built)."""
    impl = IMPLS[name]
    if impl is None:
        pytest.skip("the native extension is not built")
    monkeypatch.setattr(_backend, "impl", impl)


@pytest.fixture(params=["native", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs the test once per backend, with the public API switched to it."""
    switch_to(request.param, monkeypatch)
    yield request.param


@pytest.fixture(scope="session")
def offline_tiktoken() -> None:
    """Both encodings available to tiktoken (and so to the reference backend), offline."""
    from .offline_tiktoken import ENCODINGS, tiktoken_encoding

    for name in ENCODINGS:
        tiktoken_encoding(name)


@pytest.fixture(params=["native", "python"])
def impl(request: pytest.FixtureRequest) -> Any:
    """The low-level module of each backend."""
    module = IMPLS[request.param]
    if module is None:
        pytest.skip("the native extension is not built")
    return module


def native_required() -> Any:
    if _native is None:
        pytest.skip("the native extension is not built")
    return _native


class Interrupted:
    """What the Ctrl-C handler saw when it ran during a call (see :func:`ctrl_c_at_start`)."""

    inside = False
    """It ran inside the call: the call had not returned."""
    objects = 0
    """Objects the garbage collector tracks made since the call began (results, mostly)."""


def ctrl_c_at_start(call: Callable[[], object]) -> Interrupted:
    """Calls ``call`` with a Ctrl-C (SIGINT) already pending, as if it came the moment the
    call began, and returns what the handler saw when it ran; the call must raise the
    KeyboardInterrupt. ``call`` must run no Python code before its work starts (a native
    function, through ``functools.partial``): from the interrupt to it, only C code runs,
    so the interpreter cannot run the handler earlier. Nothing depends on timing."""
    seen = Interrupted()
    returned: list[object] = []

    def handler(signum: int, frame: Any) -> None:
        seen.inside = len(returned) == 1  # interrupt_main's None only: `call` had not returned
        seen.objects = gc.get_count()[0]
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    gc.collect()
    gc.disable()  # no finaliser runs the handler where its exception would be dropped
    try:
        with pytest.raises(KeyboardInterrupt):
            returned.extend(map(operator.methodcaller("__call__"), [_thread.interrupt_main, call]))
    finally:
        gc.enable()
        signal.signal(signal.SIGINT, previous)
    return seen


@pytest.fixture
def switch_interval_of_a_microsecond() -> Iterator[None]:
    """A long native batch passes through the interpreter (``contextfold._contract.
    switch_point``, where it also runs signal handlers) every quarter switch interval: at
    a microsecond, at every chance it has (after each transcript or chunk)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.fixture
def python_writes_4300_digits() -> Iterator[None]:
    """Python's default limit on the digits of an int it writes (``10**5000`` is past it),
    whatever the environment (``PYTHONINTMAXSTRDIGITS``) set."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)
    yield
    sys.set_int_max_str_digits(limit)


__all__ = [
    "IMPLS",
    "SHARED",
    "Interrupted",
    "anthropic_corpus",
    "contextfold",
    "corpus_rows",
    "ctrl_c_at_start",
    "missing",
    "native_required",
    "openai_corpus",
    "vectors",
]
