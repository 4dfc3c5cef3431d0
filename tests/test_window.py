"""Chunked windowing (SPEC §4), case by case, on both backends."""

from __future__ import annotations

import itertools
from typing import Any

import contextfold as cf
import numpy as np
import pytest
from contextfold import _backend
from hypothesis import given
from hypothesis import strategies as st

from .conftest import IMPLS, examples
from .strategies import transcripts


def convo_of(roles: str, size: int = 40) -> list[dict[str, Any]]:
    """u/a/t/s letters → user/assistant/tool/system messages of `size` chars (14 tokens at 40)."""
    names = {"u": "user", "a": "assistant", "t": "tool", "s": "system"}
    return [{"role": names[r], "content": "x" * size} for r in roles]


def test_front_stays_put_while_appending_and_jumps_a_chunk(backend: str) -> None:
    full = convo_of("ua" * 100)
    starts = [cf.window_start(full[:n]) for n in range(1, 201)]
    assert starts[:80] == [0] * 80
    assert set(starts[80:100]) == {20}  # 81..100 messages: one jump of 20, then it holds
    assert set(starts[100:120]) == {40}
    assert all(b - a in (0, 20) for a, b in itertools.pairwise(starts))


def test_token_front_moves_in_quarter_budget_chunks(backend: str) -> None:
    # 1,000-token messages: 64 fill the budget; the front moves 16 at a time.
    full = convo_of("u" * 70, size=3984)
    starts = [cf.window_start(full[:n]) for n in range(1, 71)]
    assert starts[:64] == [0] * 64
    assert set(starts[64:70]) == {16}


def test_window_starts_on_a_user_turn(backend: str) -> None:
    convo = convo_of("u" + "at" * 50 + "ua")  # 103 messages
    start = cf.window_start(convo)
    assert convo[start]["role"] == "user"
    assert start == 101


def test_last_user_turn_is_never_dropped(backend: str) -> None:
    convo = convo_of("u" + "at" * 60)  # one user turn, then a long tool loop
    assert cf.window_start(convo) == 0
    huge = [{"role": "user", "content": "x" * 400_000}, {"role": "assistant", "content": "ok"}]
    assert cf.windowed(huge) == huge


def test_no_user_turn_keeps_all_when_it_fits_else_the_last(backend: str) -> None:
    small = convo_of("sat")
    assert cf.windowed(small) == small
    big = convo_of("at" * 10, size=40_000)
    assert cf.windowed(big, token_budget=64_000) == big[-1:]
    assert cf.windowed([]) == []


def test_custom_limits_and_their_checks(backend: str) -> None:
    convo = convo_of("ua" * 10)
    assert cf.window_start(convo, window=8) == 12
    with pytest.raises(cf.ArgumentError, match=r"^window must be at least 4, got 3$"):
        cf.window_start(convo, window=3)
    with pytest.raises(cf.ArgumentError, match=r"^token_budget must be at least 4, got -1$"):
        cf.window_start(convo, token_budget=-1)
    with pytest.raises(cf.ArgumentError, match=r"^window must be an int, got float$"):
        cf.window_start(convo, window=8.0)  # type: ignore[arg-type]


def test_windowed_returns_a_new_list_of_the_same_objects(backend: str) -> None:
    convo = convo_of("ua" * 50)
    out = cf.windowed(convo)
    assert out is not convo
    assert all(a is b for a, b in zip(out, convo[cf.window_start(convo) :], strict=True))


def test_array_variant_matches(backend: str) -> None:
    convo = convo_of("uatuaatu" * 20, size=2000)
    sizes = cf.message_tokens_array(convo)
    mask = np.array([m["role"] == "user" for m in convo])
    for window, budget in [(80, 64_000), (16, 4_000), (4, 4)]:
        expected = cf.window_start(convo, window=window, token_budget=budget)
        assert cf.window_start_array(sizes, mask, window=window, token_budget=budget) == expected
    with pytest.raises(
        cf.ArgumentError, match=rf"^sizes and user_mask differ in length \({len(sizes)} and {len(sizes) - 1}\)$"
    ):
        cf.window_start_array(sizes, mask[:-1])
    with pytest.raises(cf.ArgumentError, match=r"^sizes\[0\] is negative \(-1\)$"):
        cf.window_start_array(np.array([-1]), np.array([True]))


@pytest.mark.parametrize(
    ("sizes", "mask"),
    [
        (np.array(5), np.array(True)),
        (np.int64(5), np.bool_(True)),
        (np.array([5]), np.array(True)),
        (np.ones((1, 1), dtype=np.int64), np.ones((1, 1), dtype=bool)),
    ],
)
def test_arrays_of_another_dimension_are_refused(backend: str, sizes: Any, mask: Any) -> None:
    # A 0-d array or a numpy scalar was read as a one-message transcript.
    with pytest.raises(cf.ArgumentError, match="sizes and user_mask must be 1-D arrays"):
        cf.window_start_array(sizes, mask)


@pytest.mark.parametrize(
    ("sizes", "words"),
    [
        (np.array([1.9, 1.9, 1.9]), "sizes must hold integers, got float64"),
        (np.array([2**64 - 1, 1], dtype=np.uint64), "sizes\\[0\\] is past 2\\*\\*63 - 1"),
        (np.array(["1", "2", "3"]), "sizes must hold integers, got <U1"),
        ([10**30, 1, 1], "sizes must hold integers, got object"),
    ],
)
def test_array_sizes_are_taken_only_as_the_ints_they_hold(backend: str, sizes: Any, words: str) -> None:
    # Floats were cut to ints (1.9 read as 1) and a uint64 past 2**63 - 1 wrapped to a
    # negative size, named as such: no size is changed on the way in.
    with pytest.raises(cf.ArgumentError, match=words):
        cf.window_start_array(sizes, np.array([True] * len(sizes)))
    assert cf.window_start_array(np.array([], dtype=np.uint8), np.array([], dtype=bool)) == 0
    for mask, dtype in (([" no"] * 3, "<U3"), ([None] * 3, "object"), ([0.5, 0, 1], "float64")):
        with pytest.raises(cf.ArgumentError, match=f"user_mask must hold bools \\(or ints\\), got {dtype}"):
            cf.window_start_array(np.ones(3, dtype=np.int64), np.array(mask))
    assert cf.window_start_array([5, 5, 5], [True, False, True], window=4, token_budget=8) == 2


def test_verbatim_and_compact_tail_rules(backend: str) -> None:
    convo = convo_of("uattauat")
    assert cf.verbatim_start(convo, 2) == 4
    assert cf.verbatim_start(convo, -5) == 0
    assert cf.verbatim_start(convo, 99) == 8
    assert cf.compact_tail_start(convo, 6) == 4
    long = convo_of("ua" * 40)
    assert cf.compact_tail_start_for_budget(long, 10**9) == 40  # at most 40 messages
    assert cf.compact_tail_start_for_budget(long, 0) == 72  # at least 8, even over budget
    assert cf.pinned_directive_index(long, 79) == 78
    assert cf.pinned_directive_index(long, 78) == -1


@pytest.mark.parametrize("huge", [2**62 + 1, 2**63, 2**64, 10**30])
def test_an_index_of_any_size_is_clamped(backend: str, huge: int) -> None:
    # Documented as clamped, an index past ±2**62 raised instead (the backends' range).
    convo = convo_of("uattauat")
    assert cf.verbatim_start(convo, -huge) == 0
    assert cf.verbatim_start(convo, huge) == 8
    assert cf.compact_tail_start(convo, huge) == 0
    assert cf.pinned_directive_index(convo, huge) == 5
    assert cf.pinned_directive_index(convo, -huge) == -1
    for call in (lambda: cf.verbatim_start(convo, 2.0), lambda: cf.pinned_directive_index(convo, True)):
        with pytest.raises(cf.ArgumentError, match="must be an int"):
            call()


def test_assemble_compacted_reinjects_the_directive(backend: str) -> None:
    convo = convo_of("uatau" + "at" * 6)
    out = cf.assemble_compacted("sys", convo, "note", 6)
    assert out[0] == {"role": "system", "content": "sys"}
    assert out[1] == {"role": "assistant", "content": "note"}
    assert out[2] is convo[4]  # the last user turn, before the tail
    assert out[3:] == convo[7:]  # verbatim_start skips the tool message at 6


def seed_window_start(convo: list[dict[str, Any]], window: int, token_budget: int) -> int:
    """Seed 004's windowed() (transcript.ts), written out with chunks of window // 4
    messages and token_budget // 4 tokens: the oracle for custom limits."""
    message_chunk, token_chunk = window // 4, token_budget // 4
    roles = [m["role"] for m in convo]
    sizes = [cf.message_tokens(m) for m in convo]
    last_user = max((i for i, r in enumerate(roles) if r == "user"), default=-1)
    if last_user < 0:
        return 0 if sum(sizes) <= token_budget else len(convo) - 1
    n = len(convo)
    by_count = 0 if n <= window else -(-(n - window) // message_chunk) * message_chunk
    remaining, dropped, next_cut, by_tokens = sum(sizes), 0, token_chunk, 0
    if remaining > token_budget:
        by_tokens = n
        for i, size in enumerate(sizes):
            dropped += size
            remaining -= size
            if dropped < next_cut:
                continue
            while dropped >= next_cut:
                next_cut += token_chunk
            if remaining <= token_budget:
                by_tokens = i + 1
                break
    start = min(max(by_count, by_tokens), last_user)
    while roles[start] != "user":
        start += 1
    return start


# Long runs of short messages (up to 200, every role), so the message-count front matters
# too: each message's role and length (0 to 40) from one byte, so that hypothesis draws a
# run as one value (drawn message by message, generating them was most of the test's time).
ROLES = ("user", "assistant", "tool", "system")
long_runs = st.integers(0, 200).flatmap(
    lambda n: st.binary(min_size=n, max_size=n).map(
        lambda codes: [{"role": ROLES[c % 4], "content": "x" * ((c >> 2) * 40 // 63)} for c in codes]
    )
)


@examples(1_000)
@given(
    st.one_of(transcripts(max_turns=60), long_runs),
    st.integers(4, 100),
    st.one_of(st.integers(4, 3_000), st.integers(4, 100_000)),
)
def test_custom_limits_move_the_front_in_quarter_chunks(
    convo: list[dict[str, Any]], window: int, token_budget: int
) -> None:
    # SPEC §4: for custom values the chunks are window // 4 messages and token_budget // 4 tokens.
    expected = seed_window_start(convo, window, token_budget)
    for impl in IMPLS.values():
        if impl is None:
            continue  # the extension is not built: the reference alone
        with _backend.using(impl):
            assert cf.window_start(convo, window=window, token_budget=token_budget) == expected
            assert cf.windowed(convo, window=window, token_budget=token_budget) == convo[expected:]


@pytest.mark.parametrize("small", [0, 1, 2, 3])
def test_limits_under_four_are_refused(backend: str, small: int) -> None:
    # SPEC §4: custom window and token_budget must be at least 4 (the code and docs; a quarter of each is the chunk).
    convo = convo_of("ua" * 10)
    with pytest.raises(cf.ArgumentError, match=rf"^token_budget must be at least 4, got {small}$"):
        cf.window_start(convo, token_budget=small)
    with pytest.raises(cf.ArgumentError, match=rf"^window must be at least 4, got {small}$"):
        cf.windowed(convo, window=small)
    assert 0 <= cf.window_start(convo, window=4, token_budget=4) < len(convo)  # 4 itself is taken


def test_the_pinned_directive_may_be_a_volatile_tail(backend: str) -> None:
    # SPEC §4: pinned_directive_index is the last user message, volatile tails NOT skipped.
    tail = cf.volatile_tail(["branch: main"])
    assert tail is not None and cf.is_volatile_tail(tail)
    convo = [*convo_of("uaua"), tail]
    assert cf.pinned_directive_index(convo, 5) == 4
    out = cf.assemble_compacted("sys", convo, "note", 5)
    assert len(out) == 3 and out[2] is tail
