"""Hostile use of the boundary: interrupted batches, mutating callbacks and threads,
patched classes, small thread stacks. Each case gives the same outcome on both backends
(or, where only the native side can go wrong, checks that it does not)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import contextfold as cf
import pytest

from .conftest import native_required


def _interrupt_soon(seconds: float) -> None:
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM timers")
def test_interrupted_batches_release_every_string() -> None:
    native_required()
    probe = "λ-probe " * 80  # not Latin-1: the arena references it instead of copying it
    transcript = [{"role": "user" if i % 2 else "assistant", "content": probe} for i in range(30)]
    batch = [transcript] * 3_000
    before = sys.getrefcount(probe)
    interrupted = 0
    previous = signal.getsignal(signal.SIGALRM)
    try:
        for _ in range(40):
            try:
                _interrupt_soon(0.004)
                cf.pack_many(batch, target_context_tokens=600, threads=2)
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert interrupted >= 30, "the batches should have been interrupted mid-way"
    assert sys.getrefcount(probe) - before == 0


def _conversation(n: int, words: int = 20) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * words} for i in range(n)]


def _from_reading(pack: cf.HandoffPack, read: list[Any]) -> None:
    """Every field of ``pack`` comes from ``read``, the transcript as the call began."""
    assert pack.dropped == len(read) - len(pack.kept)
    kept = [m for m in pack.messages if not (pack.note is not None and m.get("content") is pack.note)]
    assert len(kept) == len(pack.kept)
    assert all(m is read[i] for m, i in zip(kept, pack.kept, strict=True))


@pytest.mark.parametrize("change", ["grow", "shrink"])
@pytest.mark.parametrize("budget", [300, 100_000])
def test_an_estimator_changing_the_list_does_not_reach_the_result(backend: str, change: str, budget: int) -> None:
    messages = _conversation(40)
    read = list(messages)

    def estimate(text: str) -> int:
        if change == "grow" and len(messages) < 1_000:
            messages.extend({"role": "user", "content": "late"} for _ in range(1_000))
        if change == "shrink" and len(messages) > 3:
            del messages[3:]
        return len(text) // 4

    pack = cf.pack_handoff(messages, target_context_tokens=budget, estimate_tokens=estimate)
    _from_reading(pack, read)
    assert pack.fits


@pytest.mark.parametrize("threads", [1, 2])
def test_a_thread_changing_transcripts_during_a_batch_does_not_reach_the_results(threads: int) -> None:
    batch = [_conversation(30) for _ in range(600)]
    huge = {"role": "assistant", "content": "x" * 40_016}
    stop = threading.Event()

    def meddle() -> None:
        while not stop.is_set():
            for transcript in batch:
                transcript.insert(1, huge)
                del transcript[1]

    meddler = threading.Thread(target=meddle)
    meddler.start()
    try:
        for _ in range(3):
            packs = cf.pack_many(batch, target_context_tokens=2_000, threads=threads)
            for pack in packs:
                assert pack.tokens == cf.tokens_of(pack.messages) <= pack.budget
                assert pack.dropped == 30 - len(pack.kept) or pack.dropped == 31 - len(pack.kept)
    finally:
        stop.set()
        meddler.join()


def _run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter (a crash must not take the test run with it)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("backend_name", ["native", "python"])
def test_a_patched_result_class_is_not_filled_blindly(backend_name: str) -> None:
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import os
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import sys
        from unittest import mock
        import contextfold as cf
        real = cf.HandoffPack
        module = sys.modules[real.__module__]
        class Impostor:
            __slots__ = ()
        with mock.patch.object(module, "HandoffPack", Impostor):
            pack = cf.pack_handoff([{{"role": "user", "content": "hi"}}], target_context_tokens=100)
        assert type(pack) is real, type(pack)
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize("backend_name", ["native", "python"])
def test_a_patched_error_class_is_not_an_abort(backend_name: str) -> None:
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import os
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import contextfold as cf, contextfold.errors as errors
        real = errors.MessageTypeError
        errors.MessageTypeError = 5
        errors.ArgumentError = None
        for call in (lambda: cf.tokens_of("nope"), lambda: cf.pack_handoff([], target_context_tokens=-1)):
            try:
                call()
            except (real, cf.ArgumentError.__mro__[0]) as exc:
                print(type(exc).__name__)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "MessageTypeError\nArgumentError\n"


def test_threads_past_the_cpus_are_capped(backend: str) -> None:
    batch = [_conversation(30) for _ in range(100)]
    expected = [cf.pack_handoff(m, target_context_tokens=500) for m in batch]
    for threads in (5_000, 2**64):
        assert cf.pack_many(batch, target_context_tokens=500, threads=threads) == expected


def test_deep_content_on_a_small_thread_stack() -> None:
    native_required()
    done = _run_isolated(
        """
        import threading
        import contextfold as cf
        deep = "x" * 300
        for _ in range(250):
            deep = [deep]
        batch = [[{"role": "user", "content": [deep]}, {"role": "assistant", "content": "y" * 900}]] * 64
        out = []
        def run():
            out.append(cf.pack_many(batch, target_context_tokens=100, threads=2))
            out.append([cf.pack_handoff(m, target_context_tokens=100) for m in batch])
        threading.stack_size(80 * 1024)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        assert len(out) == 2 and out[0] == out[1]
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize("backend_name", ["native", "python"])
def test_an_estimator_reentering_pack_handoff_on_a_small_stack(backend_name: str) -> None:
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import os
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import threading
        import contextfold as cf
        messages = [{{"role": "user", "content": "hello there"}}] * 3
        def estimate(text):
            return cf.pack_handoff(messages, target_context_tokens=2, estimate_tokens=estimate).tokens
        out = []
        def run():
            try:
                cf.pack_handoff(messages, target_context_tokens=2, estimate_tokens=estimate)
            except RecursionError:
                out.append("RecursionError")
        threading.stack_size(640 * 1024)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        print(*out)
        """
    )
    assert done.returncode == 0 and done.stdout == "RecursionError\n", done.stderr

