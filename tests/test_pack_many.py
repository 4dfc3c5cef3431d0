"""pack_many: equal to one-by-one packing under any thread count, the same errors, and
safe to call from many Python threads at once."""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

import contextfold as cf
import pytest
from hypothesis import given
from hypothesis import strategies as st

from .conftest import anthropic_corpus, ctrl_c_at_start, examples, native_required, openai_corpus
from .offline_tiktoken import tiktoken_encoding
from .strategies import transcripts


def one_by_one(batch: list[Any], **kwargs: Any) -> list[cf.HandoffPack]:
    systems = kwargs.pop("systems", None) or [None] * len(batch)
    return [cf.pack_handoff(m, system=s, **kwargs) for m, s in zip(batch, systems, strict=True)]


@pytest.mark.parametrize("threads", [1, 2, 8])
@pytest.mark.parametrize("budget", [500, 8_000])
def test_corpus_equals_one_by_one(backend: str, threads: int, budget: int) -> None:
    batch = openai_corpus() * 3
    for cut in ("greedy", "chunked"):
        many = cf.pack_many(batch, target_context_tokens=budget, threads=threads, cut=cut)
        assert many == one_by_one(batch, target_context_tokens=budget, cut=cut)
        for pack, transcript in zip(many, batch, strict=True):  # the caller's own objects come back
            own = [m for m in pack.messages if any(m is x for x in transcript)]
            assert len(own) == len(pack.kept) and all(m is transcript[i] for m, i in zip(own, pack.kept, strict=True))


def test_anthropic_systems(backend: str) -> None:
    rows = anthropic_corpus()
    batch = [r["messages"] for r in rows]
    systems = [r.get("system") for r in rows]
    many = cf.pack_many(batch, target_context_tokens=2_000, systems=systems, threads=2)
    assert many == one_by_one(batch, target_context_tokens=2_000, systems=systems)
    with pytest.raises(cf.ArgumentError, match=rf"^systems has {len(batch) - 1} entries for {len(batch)} transcripts$"):
        cf.pack_many(batch, target_context_tokens=2_000, systems=systems[:-1])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("encoding", [None, "o200k_base"])
def test_systems_and_tools_are_sized_as_one_by_one(backend: str, threads: int, encoding: str | None) -> None:
    if encoding is not None:
        tiktoken_encoding(encoding)  # the reference counts through tiktoken, offline
    rows = anthropic_corpus() * 4
    batch = [r["messages"] for r in rows]
    systems = [r.get("system") for r in rows]
    tools = [{"name": "grep", "description": "search files " * 20, "input_schema": {"type": "object"}}]
    options: dict[str, Any] = {"target_context_tokens": 3_000, "tools": tools, "estimate_tokens": encoding}
    many = cf.pack_many(batch, systems=systems, threads=threads, **options)
    assert many == one_by_one(batch, systems=systems, **options)
    bad = [*systems[:-1], 42]
    with pytest.raises(cf.MessageTypeError) as raised:
        cf.pack_many(batch, systems=bad, threads=threads, **options)
    # Which transcript's prompt it is, as an error in a transcript says which.
    assert str(raised.value) == "system: expected str, list or None, got int"
    assert raised.value.__notes__ == [f"in transcript {len(bad) - 1}"]
    bad = [*systems[:1], [{"type": "text", "text": {1}}], *systems[2:]]
    with pytest.raises(cf.MessageTypeError, match=r"^system: expected a JSON value") as raised:
        cf.pack_many(batch, systems=bad, threads=threads, **options)
    assert raised.value.__notes__ == ["in transcript 1"]


@pytest.mark.long
@examples(300)
@given(st.lists(transcripts(max_turns=12), max_size=12), st.integers(0, 1500), st.sampled_from([1, 2, 3]))
def test_generated_batches_equal_one_by_one(batch: list[Any], budget: int, threads: int) -> None:
    assert cf.pack_many(batch, target_context_tokens=budget, threads=threads) == one_by_one(
        batch, target_context_tokens=budget
    )


def test_odd_values_take_the_attached_path_and_raise_the_same(backend: str) -> None:
    deep: Any = "x"
    for _ in range(1_000):
        deep = [deep]
    good = [{"role": "user", "content": "hi"}]
    batch = [good, [{"role": "user", "content": [deep]}], good]
    assert cf.pack_many(batch, target_context_tokens=100, threads=2) == one_by_one(batch, target_context_tokens=100)
    bad = [good, [{"role": "user", "content": [{"a": {1, 2}}]}, {"role": "assistant", "content": "x" * 900}]]
    with pytest.raises(cf.MessageTypeError, match="message 0, field 'content'") as info:
        cf.pack_many(bad, target_context_tokens=100, threads=2)
    assert info.value.__notes__ == ["in transcript 1"]
    with pytest.raises(cf.MessageTypeError, match="messages: expected a list"):
        cf.pack_many([good, "nope"], target_context_tokens=100)


class _FloatAppends(int):
    """An int too large for 64 bits whose ``float()`` (which sizing it calls, to print it
    as JavaScript would) grows its transcript: a transcript holding one must be read as
    one-by-one packing reads it, once."""

    transcript: list[Any]

    def __float__(self) -> float:
        self.transcript.append({"role": "user", "content": "appended by __float__ " * 50})
        return 1.5


@pytest.mark.parametrize("at", [0, 29, 31, 40, 99])  # the probe, its last transcripts, the rest
def test_a_value_whose_reading_runs_code_is_read_once(backend: str, at: int) -> None:
    def batch() -> list[list[dict[str, Any]]]:
        made = [
            [{"role": "user", "content": f"hello {i} " * 5}, {"role": "assistant", "content": "ok"}] for i in range(100)
        ]
        big = _FloatAppends(2**70)
        big.transcript = made[at]
        made[at].append({"role": "user", "content": [{"type": "text", "text": "x", "n": big}]})
        return made

    alone = batch()
    expected = one_by_one(alone, target_context_tokens=10_000)
    for threads in (1, 2):
        given = batch()
        assert cf.pack_many(given, target_context_tokens=10_000, threads=threads) == expected
        assert [len(t) for t in given] == [len(t) for t in alone]  # float() ran as often


def test_custom_estimator_batches(backend: str) -> None:
    batch = openai_corpus()[:10]
    words = lambda text: len(text.split())  # noqa: E731
    many = cf.pack_many(batch, target_context_tokens=300, estimate_tokens=words)
    assert many == one_by_one(batch, target_context_tokens=300, estimate_tokens=words)


def test_many_python_threads_at_once(backend: str) -> None:
    batch = [json.loads(json.dumps(m)) for m in openai_corpus()]
    expected = one_by_one(batch, target_context_tokens=1_000)
    failures: list[str] = []

    def run() -> None:
        for _ in range(3):
            if cf.pack_many(batch, target_context_tokens=1_000, threads=2) != expected:
                failures.append("mismatch")

    workers = [threading.Thread(target=run) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []


def test_bad_options(backend: str) -> None:
    with pytest.raises(cf.ArgumentError, match=r"^threads must be at least 1, got 0$"):
        cf.pack_many([], target_context_tokens=10, threads=0)
    assert cf.pack_many([], target_context_tokens=10) == []


@pytest.mark.parametrize("threads", [2**64, 2**100])
def test_threads_is_a_maximum_on_every_batch(backend: str, threads: int) -> None:
    # Any count past the CPUs packs as the CPUs do, on each batch path alike (helper-79
    # found pack_requests, pack_lines and pack_column refusing what pack_many took).
    convo = [{"role": "user", "content": "hi"}]
    assert cf.pack_many([convo] * 3, target_context_tokens=10, threads=threads) == cf.pack_many(
        [convo] * 3, target_context_tokens=10
    )
    body = json.dumps({"messages": convo}).encode()
    assert cf.pack_requests([body] * 3, target_context_tokens=10, threads=threads) == cf.pack_requests(
        [body] * 3, target_context_tokens=10, threads=1
    )


@pytest.mark.usefixtures("switch_interval_of_a_microsecond")
def test_a_signal_stops_a_long_batch() -> None:
    # Ctrl-C reaches the main thread as KeyboardInterrupt between bytecodes; a long native
    # batch must let it through at its next stop, not after packing everything.
    native = native_required()
    batch = [[{"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 20} for i in range(200)]] * 2_000
    options = cf.PackOptions(target_context_tokens=8_000)
    seen = ctrl_c_at_start(functools.partial(native.pack_many, batch, options, None, None, 1))
    assert seen.inside
    assert seen.objects < len(batch), "the batch made every result before it stopped"


def test_the_default_thread_count_equals_one_by_one(backend: str) -> None:
    # Large enough for the native side to time packing in place and try workers.
    batch = [json.loads(json.dumps(m)) for m in openai_corpus()] * 8
    for budget in (500, 8_000, 1_000_000):
        assert cf.pack_many(batch, target_context_tokens=budget) == one_by_one(batch, target_context_tokens=budget)
