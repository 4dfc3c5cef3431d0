"""Hostile differential fuzz of the public API: whatever a caller passes, both backends give
the same outcome (the same result on every field, or the same exception class and text),
and nothing but a contextfold error, or the caller's own exception, escapes.

Hostile means what a gateway can be handed: numpy scalars, huge and negative ints, NaN,
circular and deep values, non-str keys, subclasses of dict, list and str that override how
they are read (both backends read their built-in storage and find keys as ``dict.get``
does), and estimators that return absurd numbers or mutate the transcript being packed.
Each backend gets its own fresh copy of every input, built from one drawn recipe.

Each test draws 150 examples times ``CONTEXTFOLD_EXAMPLES_SCALE`` (conftest; the README
gives a longer run). Marked ``long``: a plain ``pytest`` leaves it out (``pytest -m long``
runs it; CI does).
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

import contextfold as cf
import numpy as np
import pytest
from contextfold import _backend
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st

from .conftest import examples, native_required
from .hostile_types import LyingDict, LyingFloat, LyingInt, LyingList, LyingStr, OddHashKey
from .strategies import transcripts

pytestmark = pytest.mark.long  # two minutes of examples on a 2-core machine

EXAMPLES = examples(150, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class CallerError(Exception):
    """Raised by the fuzz's own callbacks: it must come back out unchanged."""


HOSTILE_SCALARS: list[Callable[[], Any]] = [
    lambda: np.float64(1.5),
    lambda: np.float64(1e21),
    lambda: np.float64("nan"),
    lambda: np.int64(-(2**63)),
    lambda: np.bool_(True),
    lambda: 2**64,
    lambda: -(2**70),
    lambda: 10**400,
    lambda: float("inf"),
    lambda: LyingInt(2**60),
    lambda: LyingInt(-(2**70)),
    lambda: LyingFloat(1e-9),
]


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _circular() -> list[Any]:
    value: list[Any] = ["loop"]
    value.append(value)
    return value


def _subclassed(message: dict[str, Any], scalar: int) -> Any:
    """``message`` read through a subclass (a fresh object each call), by ``scalar``."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if scalar == 0:
        return LyingDict(message)
    if scalar == 1 and isinstance(blocks, list):
        return {**message, "content": LyingList(blocks)}
    if scalar == 2 and isinstance(content, str):
        return {**message, "content": LyingStr(content), "role": LyingStr(message["role"])}
    if scalar == 3:
        return {OddHashKey(k) if k in ("role", "content") else k: v for k, v in message.items()}
    if scalar == 4 and isinstance(blocks, list):
        return {**message, "content": [LyingDict(b) if isinstance(b, dict) else b for b in blocks]}
    if scalar == 5:
        return defaultdict(lambda: "made up", message)
    if scalar == 6:
        return OrderedDict(message)
    if scalar == 7 and message.get("tool_calls"):
        return {**message, "tool_calls": LyingList([LyingDict(c) for c in message["tool_calls"]])}
    if scalar == 8:  # an image to provider sizing, by the text its type holds
        return {**message, "content": [{"type": LyingStr("image"), "source": {"data": "x" * 400}}]}
    return message


def _hostile(message: dict[str, Any], how: int, scalar: int) -> Any:
    """``message`` made hostile in one of several ways (a fresh object each call)."""
    if how == 0:
        return {**message, "content": [{"type": "text", "value": HOSTILE_SCALARS[scalar]()}]}
    if how == 1:
        return {**message, "content": [_deep(50 + 97 * scalar)]}
    if how == 2:
        return {**message, "content": [_circular()]}
    if how == 3:
        return {**message, "tool_calls": [{"id": HOSTILE_SCALARS[scalar](), "function": None}]}
    if how == 4:
        return {**message, HOSTILE_SCALARS[scalar](): "key"} if scalar < 5 else message
    if how == 5:
        return _subclassed(message, scalar)
    return message


@st.composite
def recipes(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]], bool]:
    convo = draw(transcripts(max_turns=12))
    changes = draw(
        st.dictionaries(
            st.integers(0, max(0, len(convo) - 1)),
            st.tuples(st.integers(0, 6), st.integers(0, len(HOSTILE_SCALARS) - 1)),
            max_size=3,
        )
    )
    return convo, changes if convo else {}, draw(st.booleans())


def build(recipe: tuple[list[dict[str, Any]], dict[int, tuple[int, int]], bool]) -> list[Any]:
    convo, changes, lying_list = recipe
    fresh = [dict(m) for m in convo]
    for i, (how, scalar) in changes.items():
        fresh[i] = _hostile(fresh[i], how, scalar)
    return LyingList(fresh) if lying_list else fresh


def _pack_view(pack: Any, messages: list[Any]) -> Any:
    ids = {id(m): i for i, m in enumerate(messages)}
    shown = [ids.get(id(m), ("new", m.get("role"), m.get("content"))) for m in pack.messages]
    return (shown, pack.dropped, pack.fits, pack.tokens, pack.budget, pack.note, pack.kept)


def outcome(call: Callable[[list[Any]], Any], recipe: Any, backend: str) -> Any:
    messages = build(recipe)
    given = list.copy(messages)  # what was passed in, whatever a callback does to the list
    with _backend.using(backend):
        try:
            result = call(messages)
        except (cf.ContextfoldError, CallerError, RecursionError) as exc:
            return ("raised", type(exc).__name__, str(exc))
    if isinstance(result, cf.HandoffPack):
        return _pack_view(result, given)
    if isinstance(result, list) and result and isinstance(result[0], cf.HandoffPack):
        return [_pack_view(p, given) for p in result]
    if isinstance(result, list):
        # An input message by its index (identity is the contract), anything else (a
        # count, a line, a new message) by its value.
        ids = {id(m): i for i, m in enumerate(given)}
        return [("input", ids[id(m)]) if id(m) in ids else m for m in result]
    return result


def same(call: Callable[[list[Any]], Any], recipe: Any) -> None:
    native_required()
    native, python = (outcome(call, recipe, backend) for backend in ("native", "python"))
    assert native == python


ESTIMATES = [
    lambda t: 2**62,
    lambda t: 2**63,
    lambda t: 2**64,
    lambda t: len(t) * 10**12,
    lambda t: True,
    lambda t: -1,
    lambda t: 1.5,
    lambda t: np.int64(3),
]


@EXAMPLES
@given(recipes(), st.integers(0, len(ESTIMATES)))
def test_sizing(recipe: Any, estimate: int) -> None:
    chosen = ESTIMATES[estimate] if estimate < len(ESTIMATES) else None
    same(lambda m: cf.tokens_of(m, estimate_tokens=chosen), recipe)
    same(lambda m: [cf.message_tokens(x, estimate_tokens=chosen) for x in m], recipe)
    same(lambda m: cf.tokens_of(m, estimate_tokens=chosen, sizing="provider", image_tokens=99), recipe)
    same(lambda m: cf.compact_tail_start_for_budget(m, 2**64 + 1, estimate_tokens=chosen), recipe)


HUGE = st.one_of(st.integers(0, 5_000), st.sampled_from([2**62, 2**63, 2**64, 2**70, -1]))


@EXAMPLES
@given(recipes(), HUGE, HUGE)
def test_windowing(recipe: Any, window: int, budget: int) -> None:
    same(lambda m: cf.window_start(m, window=max(4, window), token_budget=max(4, budget)), recipe)
    same(lambda m: cf.windowed(m, window=window, token_budget=budget), recipe)
    same(lambda m: cf.verbatim_start(m, window), recipe)
    same(lambda m: cf.pinned_directive_index(m, budget), recipe)


@EXAMPLES
@given(
    recipes(),
    HUGE,
    st.sampled_from(["greedy", "chunked"]),
    st.lists(st.integers(0, 40), max_size=4),
    st.one_of(st.none(), st.text(max_size=40)),
)
def test_packing(recipe: Any, budget: int, cut: str, pinned: list[int], summary: str | None) -> None:
    same(
        lambda m: cf.pack_handoff(
            m, target_context_tokens=budget, cut=cut, pinned=[p for p in pinned if p < len(m)], summary=summary
        ),
        recipe,
    )
    same(lambda m: [cf.handoff_line(x) for x in m], recipe)


@EXAMPLES
@given(recipes(), st.integers(0, 3_000), st.sampled_from([1, 2]))
def test_batches(recipe: Any, budget: int, threads: int) -> None:
    same(
        lambda m: cf.pack_many(
            [m, list.copy(m)[: list.__len__(m) // 2]], target_context_tokens=budget, threads=threads
        ),
        recipe,
    )


MUTATIONS: list[Callable[[list[Any]], None]] = [
    lambda m: m.append({"role": "user", "content": "x" * 40_000}),
    lambda m: m.pop() if m else None,
    lambda m: m.clear(),
    lambda m: m.insert(0, {"role": "tool", "content": None}),
]


@EXAMPLES
@given(recipes(), st.integers(0, len(MUTATIONS) - 1), st.integers(0, 4_000), st.booleans())
@example(  # a NaN kept in a list the estimator clears: results compared by identity
    recipe=([{"role": "system", "content": ""}, {"role": "system", "content": ""}], {0: (0, 2)}, False),
    mutation=2,
    budget=0,
    raises=False,
)
def test_estimators_that_mutate_the_transcript(recipe: Any, mutation: int, budget: int, raises: bool) -> None:
    """A transcript is read once: an estimator that changes it mid-call changes nothing
    the call returns (or both backends raise the same error)."""

    def call(messages: list[Any]) -> Any:
        calls = 0

        def estimate(text: str) -> int:
            nonlocal calls
            calls += 1
            if calls == 2:
                MUTATIONS[mutation](messages)
                if raises:
                    raise CallerError("estimator failed")
            return len(text) // 3

        return cf.pack_handoff(messages, target_context_tokens=budget, estimate_tokens=estimate)

    same(call, recipe)


@pytest.mark.parametrize(
    "argument",
    [
        {"target_context_tokens": 2**64},
        {"target_context_tokens": 2**70, "reserve_output_tokens": 2**69},
        {"target_context_tokens": 10, "chunk_tokens": 2**64, "cut": "chunked"},
        {"target_context_tokens": 10, "pinned": [2**64]},
        {"target_context_tokens": np.int64(50)},
        {"target_context_tokens": 10, "threads": 2**64},
        {"target_context_tokens": 10, "threads": 0},
    ],
    ids=repr,
)
def test_huge_and_odd_arguments(argument: dict[str, Any]) -> None:
    recipe = ([{"role": "user", "content": "hello " * 40}, {"role": "assistant", "content": "hi " * 40}], {}, False)
    if "threads" in argument:
        same(lambda m: cf.pack_many([m], **argument), recipe)
    else:
        same(lambda m: cf.pack_handoff(m, **argument), recipe)
