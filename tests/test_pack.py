"""Handoff packing (SPEC §5): every contract point as a property, on generated and corpus
transcripts, for both backends; plus the seed's volatile-tail cases and bad input."""

from __future__ import annotations

import copy
import enum
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import contextfold as cf
import pytest
from contextfold import _backend, reference
from contextfold.synthetic import responses_items
from hypothesis import given
from hypothesis import strategies as st

from .conftest import anthropic_corpus, examples, native_required, openai_corpus
from .offline_tiktoken import tiktoken_encoding
from .strategies import item_transcripts, text, transcripts


def system_prefix(roles: Iterable[str]) -> int:
    """How many leading messages are the system prefix (``developer`` counts as ``system``,
    docs/packing.md)."""
    listed = list(roles)
    return next((i for i, role in enumerate(listed) if role not in ("system", "developer")), len(listed))


def msg(role: str, tag: str) -> dict[str, Any]:
    """A message costing exactly 14 tokens (40 characters / 4 + 4)."""
    return {"role": role, "content": tag.ljust(40, ".")}


def segments_of(messages: list[dict[str, Any]]) -> list[list[int]]:
    """OpenAI-shape segments: an assistant with tool calls plus the tool messages after it."""
    out: list[list[int]] = []
    i = 0
    while i < len(messages):
        end = i + 1
        m = messages[i]
        if m["role"] == "assistant" and isinstance(m.get("tool_calls"), list) and m["tool_calls"]:
            while end < len(messages) and messages[end]["role"] == "tool":
                end += 1
        out.append(list(range(i, end)))
        i = end
    return out


def check_contract(
    messages: list[dict[str, Any]], budget: int, pack: cf.HandoffPack, pinned: list[int], estimate: Any = None
) -> None:
    """SPEC §5, points 1-8, on one result packed with ``estimate_tokens=estimate``."""
    n = len(messages)
    kept = pack.kept
    assert pack.budget == budget
    # 1. under budget: unchanged
    if cf.tokens_of(messages, estimate_tokens=estimate) <= budget:
        assert pack.messages == messages and all(a is b for a, b in zip(pack.messages, messages, strict=True))
        assert pack.dropped == 0 and pack.note is None and pack.fits
        return
    # output = kept messages in original order (+ one note), identity preserved
    assert kept == sorted(kept) and len(set(kept)) == len(kept)
    assert pack.dropped == n - len(kept)
    body = [
        m for m in pack.messages if not (pack.note is not None and m.get("content") == pack.note and m not in messages)
    ]
    assert all(a is messages[i] for a, i in zip(body, kept, strict=True))
    # 2. leading system messages kept first
    prefix = system_prefix(m["role"] for m in messages)
    assert kept[:prefix] == list(range(prefix))
    volatile = n  # the volatile tail: the trailing <run-state> messages after the last pin
    while volatile > max(pinned, default=-1) + 1 and cf.is_volatile_tail(messages[volatile - 1]):
        volatile -= 1
    # 3. the directive and pinned turns are kept (when the core fits or not)
    directive = next(
        (
            i
            for i in range(volatile - 1, prefix - 1, -1)
            if messages[i]["role"] == "user" and not cf.is_volatile_tail(messages[i])
        ),
        None,
    )
    if directive is not None:
        assert directive in kept
    for p in pinned:
        if prefix <= p < volatile and messages[p]["role"] in ("user", "assistant"):
            assert p in kept
    # 4. segments are atomic (in the history; the volatile tail is whole or gone)
    for seg in segments_of(messages[:volatile]):
        assert all(i in kept for i in seg) or not any(i in kept for i in seg)
    assert all(i in kept for i in range(volatile, n)) or not any(i in kept for i in range(volatile, n))
    # 6. one note, after the system messages, roles alternating; 8. within budget
    if pack.note is not None:
        note = pack.messages[prefix]
        assert note["content"] == pack.note and note not in messages
        following = pack.messages[prefix + 1] if len(pack.messages) > prefix + 1 else None
        assert note["role"] == ("user" if following is None or following["role"] == "assistant" else "assistant")
        assert pack.note.startswith(("Earlier conversation", "Summary of the earlier"))
        if pack.note.startswith("Earlier conversation"):
            # 5. each dropped history message is listed or counted by the marker; a
            # dropped volatile tail is neither
            listed = pack.note.count("\n- ")
            marker = re.search(r"^\[… (\d+) earlier messages? not shown\]$", pack.note, re.M)
            unlisted = int(marker.group(1)) if marker else 0
            tail_dropped = 0 if volatile == n or volatile in kept else n - volatile
            assert listed + unlisted == pack.dropped - tail_dropped
    if pack.fits:
        assert pack.tokens <= budget
        expected = cf.tokens_of([messages[i] for i in kept], estimate_tokens=estimate)
        if pack.note is not None:
            expected += cf.message_tokens({"role": "user", "content": pack.note}, estimate_tokens=estimate)
        assert pack.tokens == expected
    else:
        assert pack.note is None


NOTE_HEADER = "Earlier conversation, folded to fit the context window (oldest first):"
"""The listing note's first line: the note format documented in ``contextfold.pack``."""


def marker_note_tokens(unlisted: int, estimate: Any = None) -> int:
    """What a note listing no line costs: its header and the elision marker for ``unlisted``."""
    body = NOTE_HEADER + (f"\n{cf.elision_marker(unlisted)}" if unlisted else "")
    return cf.message_tokens({"role": "user", "content": body}, estimate_tokens=estimate)


def volatile_from(messages: list[dict[str, Any]], pinned: list[int]) -> int:
    """Where the volatile tail starts: the trailing <run-state> messages after the last pin."""
    volatile = len(messages)
    while volatile > max(pinned, default=-1) + 1 and cf.is_volatile_tail(messages[volatile - 1]):
        volatile -= 1
    return volatile


def check_greedy_cut(
    messages: list[dict[str, Any]], budget: int, pack: cf.HandoffPack, pinned: list[int], estimate: Any = None
) -> None:
    """SPEC §5.5 and §5.6 on a greedy result: the verbatim tail is maximal (the next older
    segment, with a note of at least the marker when there is a note, would not fit), and
    a listing note's lines are the handoff lines of the newest dropped history messages,
    oldest first."""
    if not pack.fits or pack.dropped == 0:
        return
    volatile = volatile_from(messages, pinned)
    kept = set(pack.kept)
    tail_kept = volatile < len(messages) and volatile in kept
    room = budget - (cf.tokens_of(messages[volatile:], estimate_tokens=estimate) if tail_kept else 0)
    prefix = system_prefix(m["role"] for m in messages)
    dropped = [i for i in range(prefix, volatile) if i not in kept]
    if not dropped:
        return  # only the volatile tail went
    start = volatile
    while start > prefix and start - 1 in kept:
        start -= 1
    older = next(seg for seg in segments_of(messages[:volatile]) if seg[-1] == start - 1)
    assert not any(i in kept for i in older)
    left = len(dropped) - len(older)
    reserve = marker_note_tokens(left, estimate) if pack.note is not None and left > 0 else 0
    grown = sorted(kept.intersection(range(volatile)).union(older))
    assert cf.tokens_of([messages[i] for i in grown], estimate_tokens=estimate) + reserve > room
    if pack.note is not None and pack.note.startswith(NOTE_HEADER):
        lines = [line[2:] for line in pack.note.split("\n")[1:] if line.startswith("- ")]
        newest = [cf.handoff_line(messages[i]) for i in dropped][len(dropped) - len(lines) :]
        assert lines == newest


def same_on_both(messages: Any, **kwargs: Any) -> cf.HandoffPack:
    """Packs with both backends; every field must be identical (9. deterministic)."""
    native = native_required()

    results = []
    for impl in (native, reference):
        with _backend.using(impl):
            results.append(cf.pack_handoff(messages, **kwargs))
    a, b = results
    assert (a.kept, a.note, a.fits, a.tokens, a.dropped, a.budget) == (
        b.kept,
        b.note,
        b.fits,
        b.tokens,
        b.dropped,
        b.budget,
    )
    assert a.messages == b.messages
    return a


@pytest.mark.slow
@examples(3_000)
@given(transcripts(), st.integers(0, 2500), st.data())
def test_contract_on_generated_transcripts(messages: list[dict[str, Any]], budget: int, data: st.DataObject) -> None:
    pinned = data.draw(st.lists(st.integers(0, max(0, len(messages) - 1)), max_size=3)) if messages else []
    summary = data.draw(st.one_of(st.none(), st.text(max_size=80)))
    pack = same_on_both(messages, target_context_tokens=budget, pinned=pinned, summary=summary)
    if summary is None or pack.note is None or pack.note.startswith("Earlier"):
        check_contract(messages, budget, pack, pinned)
    check_greedy_cut(messages, budget, pack, pinned)  # SPEC §5.5, §5.6: a maximal tail, the newest lines
    chunked = same_on_both(messages, target_context_tokens=budget, pinned=pinned, cut="chunked")
    check_contract(messages, budget, chunked, pinned)


@pytest.mark.parametrize("budget", [0, 500, 2_000, 8_000, 32_000, 200_000])
def test_contract_on_the_corpus(budget: int) -> None:
    for messages in openai_corpus():
        for cut in ("greedy", "chunked"):
            pack = same_on_both(messages, target_context_tokens=budget, cut=cut)
            check_contract(messages, budget, pack, [])
            if cut == "greedy":
                check_greedy_cut(messages, budget, pack, [])
            elif budget >= 4:
                check_chunked_cut(messages, budget, pack, None)
    for row in anthropic_corpus():
        for cut in ("greedy", "chunked"):
            pack = same_on_both(row["messages"], target_context_tokens=budget, system=row.get("system"), cut=cut)
            assert pack.fits is False or pack.tokens <= budget


def test_volatile_tail_is_built_tagged() -> None:
    assert cf.volatile_tail(["", None, "  "]) is None
    tail = cf.volatile_tail(["brief", "budget line"])
    assert tail == {"role": "user", "content": "<run-state>\nbrief\n\nbudget line\n</run-state>"}
    assert cf.is_volatile_tail(tail)
    assert cf.is_volatile_content([{"type": "text", "text": "<run-state>x"}])
    assert not cf.is_volatile_tail({"role": "assistant", "content": "<run-state>"})


def test_volatile_tail_is_never_the_directive_and_stays_last(backend: str) -> None:
    sys_msg, task = msg("system", "sys"), msg("user", "the real request")
    tail = cf.volatile_tail(["x" * 20])
    assert tail is not None
    messages = [
        sys_msg,
        task,
        msg("assistant", "a1"),
        msg("user", "u2"),
        msg("assistant", "a2"),
        msg("assistant", "a3"),
        tail,
    ]
    pack = cf.pack_handoff(messages, target_context_tokens=90)
    assert pack.messages[-1] is tail
    assert any(m is messages[3] for m in pack.messages)
    assert sum(cf.is_volatile_tail(m) for m in pack.messages) == 1


def test_volatile_tail_goes_when_the_history_needs_the_whole_budget(backend: str) -> None:
    sys_msg, task = msg("system", "sys"), msg("user", "the real request")
    tail = cf.volatile_tail(["y" * 400])
    pack = cf.pack_handoff([sys_msg, task, tail], target_context_tokens=40)
    assert pack.messages == [sys_msg, task]
    assert pack.dropped == 1 and pack.note is None


def test_a_pinned_run_state_message_is_kept_as_any_pin(backend: str) -> None:
    # A pin is kept (SPEC §5.3): a pinned <run-state> message is no volatile tail that
    # goes when the history needs the whole budget (it went, and fits said True).
    sys_msg, task = msg("system", "sys"), msg("user", "task " * 40)
    state, later = cf.volatile_tail(["branch: main"]), cf.volatile_tail(["y" * 400])
    pack = cf.pack_handoff([sys_msg, task, msg("assistant", "ok"), state], target_context_tokens=55, pinned=[3])
    assert pack.kept == [0, 1, 3] and not pack.fits
    # What follows the pin is still a volatile tail, which goes first.
    pack = cf.pack_handoff([sys_msg, task, state, later], target_context_tokens=100, pinned=[2])
    assert pack.kept == [0, 1, 2] and pack.fits and pack.note is None
    body = json.dumps({"messages": [sys_msg, task, state, later]}).encode()
    assert cf.pack_request(body, target_context_tokens=100, pinned=[2]).kept == pack.kept


def test_core_overflow_returns_the_core_unfitted(backend: str) -> None:
    messages = [msg("system", "s"), msg("user", "old"), msg("assistant", "a"), msg("user", "x" * 400)]
    pack = cf.pack_handoff(messages, target_context_tokens=50, pinned=[2])
    assert not pack.fits
    assert pack.kept == [0, 2, 3] and pack.note is None


def test_tool_exchange_is_kept_whole_and_the_note_lists_dropped_turns(backend: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    messages = [
        msg("system", "s"),
        msg("user", "first ask"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "r" * 400},
        msg("assistant", "done reading"),
        msg("user", "now fix it"),
        msg("assistant", "fixed"),
    ]
    pack = cf.pack_handoff(messages, target_context_tokens=120)
    assert pack.fits and 3 not in pack.kept and 2 not in pack.kept
    assert pack.note is not None and "- assistant [read_file]" in pack.note
    assert cf.handoff_line(messages[2]) == "assistant [read_file]"
    assert cf.handoff_line({"role": "user", "content": "  a \n b\ufeff "}) == "user: a b"
    assert cf.elision_marker(1) == "[… 1 earlier message not shown]"


def test_summary_becomes_the_note_body(backend: str) -> None:
    messages = [msg("user", "a" * 200), msg("assistant", "b" * 200), msg("user", "c"), msg("assistant", "d")]
    pack = cf.pack_handoff(messages, target_context_tokens=60, summary="the user asked for a and got b")
    assert pack.note is not None and pack.note.endswith("\nthe user asked for a and got b")
    assert pack.messages[0]["role"] == "assistant"  # next kept is a user turn


def test_anthropic_pairs_tool_use_with_tool_result(backend: str) -> None:
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": "x"}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "z" * 300}]}
    messages = [msg("user", "ask"), use, result, msg("assistant", "answer")]
    pack = cf.pack_handoff(messages, target_context_tokens=60)
    assert 0 in pack.kept  # the directive: the tool_result turn is not one
    assert (1 in pack.kept) == (2 in pack.kept)
    openai_view = cf.pack_handoff(messages, target_context_tokens=60, shape="openai")
    # read as OpenAI messages, the tool_result turn is a plain user turn: the directive,
    # too big for the budget on its own
    assert (openai_view.kept, openai_view.fits) == ([2], False)


def test_chunked_prefix_is_stable_while_the_transcript_grows(backend: str) -> None:
    convo = [msg("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(200)]
    kept_prefix = 0
    previous = None
    for n in range(60, 200):
        pack = cf.pack_handoff(convo[:n], target_context_tokens=400, cut="chunked")
        prefix = (pack.note, pack.kept[0] if pack.kept else None)
        kept_prefix += prefix == previous
        previous = prefix
    assert kept_prefix / 139 >= 0.85


BAD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"target_context_tokens": -1}, cf.ArgumentError),
    ({"target_context_tokens": 10.5}, cf.ArgumentError),
    ({"target_context_tokens": 10, "reserve_output_tokens": 11}, cf.ArgumentError),
    ({"target_context_tokens": 10, "pinned": [5]}, cf.ArgumentError),
    ({"target_context_tokens": 10, "pinned": [-1]}, cf.ArgumentError),
    ({"target_context_tokens": 10, "shape": "gemini"}, cf.ArgumentError),
    ({"target_context_tokens": 10, "cut": "middle"}, cf.ArgumentError),
    ({"target_context_tokens": 10, "cut": "chunked", "chunk_tokens": 0}, cf.ArgumentError),
    ({"target_context_tokens": 10, "system": 5}, cf.MessageTypeError),
]


@pytest.mark.parametrize(("kwargs", "error"), BAD)
def test_bad_arguments(backend: str, kwargs: dict[str, Any], error: type[Exception]) -> None:
    bad = list(kwargs)[-1]
    with pytest.raises(error, match=rf"^{bad}\b"):  # the message opens with the argument's name
        cf.pack_handoff([msg("user", "a"), msg("assistant", "b")], **kwargs)


def test_bad_messages_name_the_index(backend: str) -> None:
    with pytest.raises(cf.MessageTypeError, match="message 1, field 'role'"):
        cf.pack_handoff([msg("user", "a"), {"content": "x"}], target_context_tokens=10)


class Pin(enum.IntEnum):
    FIRST = 0


class Word(str):
    pass


# Argument forms the extension does not read itself (it hands them to the shared checks in
# contextfold._handoff) next to the plain ones it does: results, or errors, must be identical.
ARGUMENT_FORMS: list[dict[str, Any]] = [
    {"target_context_tokens": 40, "pinned": (0,)},
    {"target_context_tokens": 40, "pinned": iter([0])},
    {"target_context_tokens": 40, "pinned": range(1)},
    {"target_context_tokens": 40, "pinned": [Pin.FIRST]},
    {"target_context_tokens": 40, "pinned": [True]},
    {"target_context_tokens": 40, "pinned": [10**30]},
    {"target_context_tokens": Pin.FIRST},
    {"target_context_tokens": True},
    {"target_context_tokens": 10**30, "reserve_output_tokens": 10**30 - 40},
    {"target_context_tokens": 10**30},
    {"target_context_tokens": 40, "reserve_output_tokens": 10**30},
    {"target_context_tokens": 40, "cut": "chunked", "chunk_tokens": 10**30},
    {"target_context_tokens": 40, "cut": "chunked", "chunk_tokens": 7},
    {"target_context_tokens": 40, "cut": "greedy", "chunk_tokens": "ignored"},
    {"target_context_tokens": 40, "cut": "chunked", "chunk_tokens": 2.5},
    {"target_context_tokens": 80, "summary": "lone \ud800 surrogate, pair \ud83d\ude00"},
    {"target_context_tokens": 80, "summary": Word("a str subclass")},
    {"target_context_tokens": 80, "cut": "chunked"},
    {"target_context_tokens": 80},
    {"target_context_tokens": 40, "summary": b"bytes"},
    {"target_context_tokens": 40, "system": "be brief"},
    {"target_context_tokens": 40, "system": [{"type": "text", "text": "be brief"}]},
    {"target_context_tokens": 40, "system": Word("a str subclass")},
    {"target_context_tokens": 40, "system": [{"type": "text", "text": {1, 2}}]},
    {"target_context_tokens": 40, "shape": Word("openai")},
    {"target_context_tokens": 40, "shape": None},
    {"target_context_tokens": 40, "estimate_tokens": len},
    {"target_context_tokens": 40, "estimate_tokens": "len"},
]


def _outcome(messages: list[dict[str, Any]], kwargs: dict[str, Any]) -> Any:
    try:
        p = cf.pack_handoff(messages, **kwargs)
    except Exception as exc:
        return type(exc), str(exc)
    return [id(m) if m in messages else m for m in p.messages], p.dropped, p.fits, p.tokens, p.budget, p.note, p.kept


@pytest.mark.parametrize("kwargs", ARGUMENT_FORMS, ids=repr)
def test_argument_forms_agree(kwargs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [msg("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(9)]
    outcomes = []
    for impl in (native_required(), reference):
        monkeypatch.setattr(_backend, "impl", impl)
        # An iterator is used up by one call: give each backend its own.
        fresh = {
            k: iter([0]) if k == "pinned" and not isinstance(v, (list, tuple, range)) else v for k, v in kwargs.items()
        }
        outcomes.append(_outcome(messages, fresh))
    assert outcomes[0] == outcomes[1]


# OpenAI Responses API items (shape="responses") ---------------------------------------


def item_role(item: dict[str, Any]) -> str:
    """The role an item plays: a message item's role, calls and reasoning as the
    assistant, outputs as tool results, anything else none."""
    kind = item.get("type", "message")
    if kind == "message":
        return str(item["role"])
    if kind == "reasoning" or kind.endswith("_call"):
        return "assistant"
    return "tool" if kind.endswith("_call_output") else ""


def check_item_contract(items: list[dict[str, Any]], budget: int, pack: cf.HandoffPack, pinned: list[int]) -> None:
    """SPEC §5, points 1-8, on a Responses-shape result."""
    n = len(items)
    kept = pack.kept
    if cf.tokens_of(items) <= budget:
        assert all(a is b for a, b in zip(pack.messages, items, strict=True)) and len(pack.messages) == n
        assert pack.dropped == 0 and pack.note is None and pack.fits
        return
    assert kept == sorted(kept) and len(set(kept)) == len(kept) and pack.dropped == n - len(kept)
    roles = [item_role(m) for m in items]
    prefix = system_prefix(roles)
    assert kept[:prefix] == list(range(prefix))
    body = [m for k, m in enumerate(pack.messages) if not (pack.note is not None and k == prefix)]
    assert all(a is items[i] for a, i in zip(body, kept, strict=True))
    volatile = n  # the volatile tail: the trailing <run-state> messages after the last pin
    while volatile > max(pinned, default=-1) + 1 and cf.is_volatile_tail(items[volatile - 1]):
        volatile -= 1
    directive = next(
        (i for i in range(volatile - 1, prefix - 1, -1) if roles[i] == "user" and not cf.is_volatile_tail(items[i])),
        None,
    )
    if directive is not None:
        assert directive in kept
    for p in pinned:
        if prefix <= p < volatile and roles[p] in ("user", "assistant"):
            assert p in kept
    # 4. atomic: a call and its output (the first after it with its call_id) and all
    # between are kept or dropped together; reasoning goes with the item after it.
    together: list[range] = []
    for k in range(prefix, volatile):
        if roles[k] == "assistant" and items[k].get("type", "message").endswith("_call"):
            answer = next(
                (
                    o
                    for o in range(k + 1, volatile)
                    if items[o].get("type", "").endswith("_call_output")
                    and "call_id" in items[k]
                    and items[o].get("call_id") == items[k]["call_id"]
                ),
                None,
            )
            if answer is not None:
                together.append(range(k, answer + 1))
        if items[k].get("type") == "reasoning" and k + 1 < volatile:
            together.append(range(k, k + 2))
    for run in together:
        assert all(i in kept for i in run) or not any(i in kept for i in run), run
    assert all(i in kept for i in range(volatile, n)) or not any(i in kept for i in range(volatile, n))
    if pack.note is not None:
        note = pack.messages[prefix]
        assert note == {"type": "message", "role": note["role"], "content": pack.note}
        following = body[prefix] if len(body) > prefix else None
        assert note["role"] == ("user" if following is None or item_role(following) == "assistant" else "assistant")
    if pack.fits:
        assert pack.tokens <= budget
        expected = cf.tokens_of([items[i] for i in kept])
        if pack.note is not None:
            expected += cf.message_tokens(pack.messages[prefix])
        assert pack.tokens == expected
    else:
        assert pack.note is None


@pytest.mark.slow
@examples(2_000)
@given(item_transcripts(), st.integers(0, 2500), st.data())
def test_contract_on_generated_responses_items(items: list[dict[str, Any]], budget: int, data: st.DataObject) -> None:
    pinned = data.draw(st.lists(st.integers(0, max(0, len(items) - 1)), max_size=3)) if items else []
    for cut in ("greedy", "chunked"):
        pack = same_on_both(items, target_context_tokens=budget, pinned=pinned, shape="responses", cut=cut)
        check_item_contract(items, budget, pack, pinned)
        # Detected: an item with a type and no role, or a message or function call item.
        marked = ("message", "function_call", "function_call_output")
        if any("type" in m and ("role" not in m or m["type"] in marked) for m in items):
            assert same_on_both(items, target_context_tokens=budget, pinned=pinned, cut=cut) == pack


def test_responses_calls_pair_by_call_id_with_their_reasoning(backend: str) -> None:
    big = "x" * 400
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "old request " + big},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e" * 40},
        {"type": "function_call", "call_id": "a", "name": "grep", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "b", "output": "b out"},
        {"type": "function_call_output", "call_id": "a", "output": "a out"},
        {"type": "function_call_output", "call_id": "zzz", "output": "orphan"},
        {"type": "item_reference", "id": "msg_1"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now fix it"}]},
        {"type": "reasoning", "id": "rs_2", "summary": []},
        {"type": "custom_tool_call", "call_id": "c", "name": "patch", "input": "diff"},
        {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"},
        {"role": "user", "content": [{"type": "input_text", "text": "<run-state>\nstate\n</run-state>"}]},
    ]
    pack = cf.pack_handoff(items, target_context_tokens=160)
    assert pack.fits and pack.kept == [0, 8, 9, 10, 11, 12, 13]
    assert pack.messages[1] == {"type": "message", "role": "assistant", "content": pack.note}
    assert pack.note is not None and "- function_call_output: orphan" in pack.note
    # With more room the parallel exchange comes back whole, its reasoning first.
    wider = cf.pack_handoff(items, target_context_tokens=280)
    assert wider.kept == [0, *range(2, 14)] and wider.dropped == 1


def test_responses_sizes_items_by_their_json(backend: str) -> None:
    call = {"type": "function_call", "call_id": "a", "name": "grep", "arguments": "{}"}
    # {"type":"function_call","call_id":"a","name":"grep","arguments":"{}"}: 69 units.
    assert cf.message_tokens(call) == 18 + 4
    assert cf.tokens_of([{"role": "user", "content": "abcd"}, call]) == 5 + 22
    assert cf.message_tokens({"type": "message", "role": "user", "content": "abcd"}) == 5
    # A custom estimator sees the item's compact JSON.
    seen: list[str] = []
    cf.tokens_of([call], estimate_tokens=lambda t: seen.append(t) or 1)
    assert seen == ['{"type":"function_call","call_id":"a","name":"grep","arguments":"{}"}']


BAD_ITEMS: list[tuple[list[Any], str, type[Exception], str]] = [
    ([{"role": "user", "content": "a"}, 7], "responses", cf.MessageTypeError, "message 1: expected a dict, got int"),
    (
        [{"type": "function_call", "call_id": 3, "name": "f"}],
        "auto",
        cf.MessageTypeError,
        "message 0, field 'call_id': expected str, got int",
    ),
    (
        [{"role": "user", "content": "a"}, {"type": "function_call_output", "call_id": None}],
        "responses",
        cf.MessageTypeError,
        "message 1, field 'call_id': expected str, got NoneType",
    ),
    (
        [{"type": ["message"], "role": "user"}],
        "responses",
        cf.MessageTypeError,
        "message 0, field 'type': expected str",
    ),
    ([{"type": "message", "content": "a"}], "responses", cf.MessageTypeError, "message 0, field 'role': missing"),
    ([{"type": "reasoning"}, 3], "auto", cf.MessageTypeError, "message 1: expected a dict, got int"),
]


@pytest.mark.parametrize(("items", "shape", "error", "text"), BAD_ITEMS)
def test_bad_responses_items_name_the_index_and_field(
    backend: str, items: list[Any], shape: str, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=re.escape(text)):
        cf.pack_handoff(items, target_context_tokens=0, shape=shape)  # type: ignore[arg-type]
    with pytest.raises(error, match=re.escape(text)):
        cf.pack_many([items], target_context_tokens=0, shape=shape)  # type: ignore[arg-type]


# Tool definitions (tools=) ----------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "grep", "description": "search " * 30, "parameters": {}}}]


def test_tools_count_against_the_budget_and_are_never_dropped(backend: str) -> None:
    messages = [msg("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(9)]
    cost = cf.message_tokens({"role": "system", "content": TOOLS})
    assert cf.tokens_of(messages, tools=TOOLS) == cf.tokens_of(messages) + cost
    plain = cf.pack_handoff(messages, target_context_tokens=126)
    assert plain.kept == list(range(9)) and plain.tokens == 126
    packed = cf.pack_handoff(messages, target_context_tokens=126, tools=TOOLS)
    assert packed.fits and packed.dropped > 0 and packed.tokens <= 126
    assert packed.tokens == cf.tokens_of([messages[i] for i in packed.kept], tools=TOOLS) + (
        cf.message_tokens({"role": "user", "content": packed.note}) if packed.note else 0
    )
    # Tools alone over budget: the core comes back unfitted.
    assert not cf.pack_handoff(messages, target_context_tokens=cost - 1, tools=TOOLS).fits
    many = cf.pack_many([messages, messages[:3]], target_context_tokens=126, tools=TOOLS)
    assert many[0] == packed
    assert many[1] == cf.pack_handoff(messages[:3], target_context_tokens=126, tools=TOOLS)
    counted: list[str] = []
    cf.pack_handoff(
        messages[:1], target_context_tokens=10**6, tools=TOOLS, estimate_tokens=lambda t: counted.append(t) or 0
    )
    # A custom estimator sees the tools' compact JSON.
    assert json.dumps(TOOLS, separators=(",", ":")) in counted


@pytest.mark.parametrize(
    ("tools", "text"),
    [
        ({"name": "grep"}, "tools: expected a list or None, got dict"),
        ([{"name": "grep"}, "read"], "tools[1]: expected a dict, got str"),
    ],
)
def test_bad_tools_are_named(backend: str, tools: Any, text: str) -> None:
    messages = [msg("user", "a")]
    for call in (
        lambda: cf.pack_handoff(messages, target_context_tokens=10, tools=tools),
        lambda: cf.pack_many([messages], target_context_tokens=10, tools=tools),
        lambda: cf.tokens_of(messages, tools=tools),
    ):
        with pytest.raises(cf.MessageTypeError, match=re.escape(text)):
            call()


@pytest.mark.parametrize(
    ("given", "text"),
    [
        ({"tools": [{"type": "function", "x": b"1"}]}, "tools: expected a JSON value ({}), got bytes"),
        ({"tools": [{1: "a"}]}, "tools: expected str object keys, got int"),
        ({"system": [{"type": "text", "text": {1, 2}}]}, "system: expected a JSON value ({}), got set"),
    ],
)
def test_a_prompt_or_tools_value_with_no_json_form_is_named(backend: str, given: dict[str, Any], text: str) -> None:
    # Sized as a message's content, it was named "message, field 'content'": no message.
    text = text.format("None, bool, int, float, str, list or dict")
    field = next(iter(given))
    for call in _prompt_calls(given):
        with pytest.raises(cf.MessageTypeError) as raised:
            call()
        assert (str(raised.value), raised.value.index, raised.value.field) == (text, None, field)


def _prompt_calls(given: dict[str, Any]) -> list[Callable[[], Any]]:
    """Every call that sizes the one separate system prompt or tools ``given``."""
    field = next(iter(given))
    messages = [msg("user", "a")]
    many = given if field == "tools" else {"systems": [given["system"]]}
    calls = [
        lambda: cf.pack_handoff(messages, target_context_tokens=10, **given),
        lambda: cf.pack_many([messages], target_context_tokens=10, **many),
    ]
    if field == "tools":
        calls.append(lambda: cf.tokens_of(messages, tools=given["tools"]))
    return calls


@pytest.mark.parametrize("field", ["system", "tools"])
@pytest.mark.parametrize("circular", [False, True])
def test_a_prompt_or_tools_nested_too_deep_is_named(backend: str, field: str, circular: bool) -> None:
    # Sized as a message's content, it was named "message, field 'content'": no message.
    deep: Any = []
    if circular:
        deep.append(deep)
    else:
        for _ in range(100_001):
            deep = [deep]
    for call in _prompt_calls({field: [{"type": "text", "text": "a", "x": deep}]}):
        with pytest.raises(cf.MessageValueError) as raised:
            call()
        text = f"{field}: nested deeper than 100000 levels (or circular)"
        assert (str(raised.value), raised.value.index, raised.value.field) == (text, None, field)
    # Under a custom estimator what its adapter raises passes through as raised.
    with pytest.raises(cf.MessageValueError) as raised:
        cf.pack_handoff([msg("user", "a")], target_context_tokens=10, estimate_tokens=len, **{field: [{"x": deep}]})
    assert (str(raised.value), raised.value.field) == (
        "message, field 'content': nested deeper than 100000 levels (or circular)",
        "content",
    )


@pytest.mark.parametrize("budget", [0, 2_000, 8_000, 32_000])
def test_contract_on_the_corpus_as_responses_items(budget: int) -> None:
    """Real transcripts, converted to Responses items by ``synthetic.responses_items``."""
    for messages in openai_corpus():
        items = responses_items(messages)
        for cut in ("greedy", "chunked"):
            check_item_contract(items, budget, same_on_both(items, target_context_tokens=budget, cut=cut), [])


# What packing reads (SPEC §5, last paragraph; docs/packing.md) ------------------------


def _anthropic_exchange(k: int) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"u{k}", "name": "read", "input": {}}
    return [
        {"role": "assistant", "content": [use, {"type": "text", "text": "a" * 150}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"u{k}", "content": "r" * 150}]},
    ]


def _openai_exchange(k: int) -> list[dict[str, Any]]:
    call = {"id": f"c{k}", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": "c" * 150, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{k}", "content": "t" * 150},
    ]


@pytest.mark.parametrize("newest", ["openai", "anthropic"])
def test_auto_packs_in_the_shape_of_the_newest_entry_that_shows_one(backend: str, newest: str) -> None:
    """A transcript mixing shapes is packed in the shape of its newest tool exchange: the
    entries before it are never read for the shape."""
    older, newer = (
        (_anthropic_exchange, _openai_exchange) if newest == "openai" else (_openai_exchange, _anthropic_exchange)
    )
    messages = [{"role": "user", "content": "fix it"}, *older(1), *newer(2), {"role": "user", "content": "go on"}]
    packs = {s: cf.pack_handoff(messages, target_context_tokens=100, shape=s) for s in ("openai", "anthropic")}
    assert packs["openai"].kept != packs["anthropic"].kept  # the shape decides this pack
    assert cf.pack_handoff(messages, target_context_tokens=100) == packs[newest]


def test_auto_reads_no_tool_exchange_as_openai_chat(backend: str) -> None:
    messages = [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": "y" * 400}] * 3
    assert cf.pack_handoff(messages, target_context_tokens=300) == cf.pack_handoff(
        messages, target_context_tokens=300, shape="openai"
    )


def _run_with(bad: Any, at: int) -> list[Any]:
    """A long run with ``bad`` at index ``at``, its directive last."""
    messages: list[Any] = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    messages += [{"role": "assistant", "content": f"step {i} " + "x" * 400} for i in range(200)]
    messages.append({"role": "user", "content": "go on"})
    messages[at] = bad
    return messages


@pytest.mark.parametrize("bad", [{"content": "no role"}, {"role": "assistant", "content": 5}, 7])
@pytest.mark.parametrize("at", [60, 171])
def test_a_malformed_message_packing_does_not_read_raises_nothing(backend: str, bad: Any, at: int) -> None:
    """Over budget, an entry is checked only when packing sizes it or lists it in the
    note: one in the dropped middle that no note line reaches is dropped unread, and the
    pack is what a well-formed message there gives (171 is the newest message before
    the ones the note reads: it lists 174 and 173 and tries 172)."""
    pack = cf.pack_handoff(_run_with(bad, at), target_context_tokens=3_000)
    assert pack == cf.pack_handoff(_run_with({"role": "assistant", "content": "fine"}, at), target_context_tokens=3_000)
    assert pack.fits and pack.kept == [0, *range(175, 203)] and pack.dropped == 174


@pytest.mark.parametrize(
    ("at", "budget"),
    [
        (60, 10**9),  # at or under budget, every message is read
        (201, 3_000),  # kept in the tail: sized
        (174, 3_000),  # the segment the tail stops at: sized
        (173, 3_000),  # listed in the note
        (172, 3_000),  # its note line written, then left out for room
    ],
)
def test_a_malformed_message_packing_reads_raises(backend: str, at: int, budget: int) -> None:
    with pytest.raises(cf.MessageTypeError, match=rf"^message {at}, field 'role': missing"):
        cf.pack_handoff(_run_with({"content": "no role"}, at), target_context_tokens=budget)


def test_of_several_malformed_messages_the_newest_raises(backend: str) -> None:
    """At or under budget every message is sized, newest first (docs/packing.md)."""
    messages = _run_with({"content": "no role"}, 60)
    messages[120] = {"content": "no role"}
    with pytest.raises(cf.MessageTypeError, match=r"^message 120, field 'role': missing"):
        cf.pack_handoff(messages, target_context_tokens=10**9)


def test_the_chunked_cut_reads_every_entry_after_the_system_prefix(backend: str) -> None:
    """Where the greedy cut drops a malformed message unread, the chunked cut, which sizes
    every entry after the leading system messages, raises (docs/packing.md)."""
    messages = _run_with({"content": "no role"}, 60)
    assert cf.pack_handoff(messages, target_context_tokens=3_000).fits
    with pytest.raises(cf.MessageTypeError, match=r"^message 60, field 'role': missing"):
        cf.pack_handoff(messages, target_context_tokens=3_000, cut="chunked")


@pytest.mark.slow
@examples(1_500)
@given(
    item_transcripts(max_turns=4),
    transcripts(),
    st.booleans(),
    st.integers(0, 3_000),
    st.sampled_from([None, "o200k_base", "custom"]),
)
def test_auto_on_items_and_messages_mixed(
    items: list[dict[str, Any]], chat: list[dict[str, Any]], items_first: bool, budget: int, estimate: str | None
) -> None:
    """``shape="auto"`` first sizes a transcript as chat messages, and looks for its shape
    only when that fails or it does not fit (natively; docs/packing.md): on Responses
    items and chat messages mixed either way, whatever fits, equal to the reference,
    which decides the shape first, and a custom estimator sees the same texts in the
    same order."""
    if estimate == "o200k_base":
        tiktoken_encoding(estimate)  # the reference counts through tiktoken: its vocabulary, offline
    mixed = [*items, *chat] if items_first else [*chat, *items]
    outcomes = []
    for impl in (native_required(), reference):
        seen: list[str] = []

        def custom(text: str, seen: list[str] = seen) -> int:
            seen.append(text)
            return len(text) // 3

        with _backend.using(impl):
            try:
                pack: Any = cf.pack_handoff(
                    mixed, target_context_tokens=budget, estimate_tokens=custom if estimate == "custom" else estimate
                )
            except cf.ContextfoldError as error:  # compared below: class and text
                pack = (type(error), str(error))
        outcomes.append((pack, seen))
    assert outcomes[0] == outcomes[1]


def test_nothing_to_pack_under_a_prompt_over_budget(backend: str) -> None:
    """An empty transcript under a separate prompt that is over budget does not fit."""
    pack = cf.pack_handoff([], target_context_tokens=10, system="s" * 400)
    assert (pack.fits, pack.kept, pack.tokens) == (
        False,
        [],
        cf.message_tokens({"role": "system", "content": "s" * 400}),
    )


# Outputs, pins, cut points and the Anthropic shape, point by point ---------------------


def test_the_output_is_a_new_list_even_when_everything_fits(backend: str) -> None:
    # SPEC §2: the caller's own message objects, in new lists (§5.1: unchanged at or under budget).
    messages = [msg("system", "s"), msg("user", "ask"), msg("assistant", "answer")]
    pack = cf.pack_handoff(messages, target_context_tokens=10_000)
    assert pack.dropped == 0 and pack.messages is not messages
    assert all(a is b for a, b in zip(pack.messages, messages, strict=True))
    many = cf.pack_many([messages, messages], target_context_tokens=10_000)
    assert all(p.messages is not messages for p in many) and many[0].messages is not many[1].messages
    assert all(a is b for p in many for a, b in zip(p.messages, messages, strict=True))


@examples(300)
@given(transcripts(), st.integers(0, 2500), st.one_of(st.none(), st.text(max_size=80)), st.data())
def test_packing_never_mutates_its_input(
    messages: list[dict[str, Any]], budget: int, summary: str | None, data: st.DataObject
) -> None:
    # SPEC §2: functions never mutate input (the list, its messages, nothing inside them).
    pinned = data.draw(st.lists(st.integers(0, max(0, len(messages) - 1)), max_size=2)) if messages else []
    before, members = copy.deepcopy(messages), list(messages)
    for impl in (native_required(), reference):
        with _backend.using(impl):
            for cut in ("greedy", "chunked"):
                options: dict[str, Any] = {
                    "target_context_tokens": budget,
                    "pinned": pinned,
                    "summary": summary,
                    "cut": cut,
                }
                pack = cf.pack_handoff(messages, **options)
                assert pack.messages is not messages
                assert cf.pack_many([messages], **options)[0].messages is not messages
    assert messages == before and all(a is b for a, b in zip(messages, members, strict=True))


def test_pins_on_roles_other_than_user_and_assistant_are_ignored(backend: str) -> None:
    # SPEC §5.3: pinned indices are for user/assistant messages only; others are ignored.
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    messages = [
        msg("system", "s"),
        msg("user", "old ask"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "r" * 400},
        {"role": "system", "content": "a system message mid-transcript " + "m" * 400},
        msg("assistant", "done"),
        msg("user", "now fix it"),
        msg("assistant", "fixed"),
    ]
    plain = cf.pack_handoff(messages, target_context_tokens=120)
    assert plain.fits and not {2, 3, 4} & set(plain.kept)  # both would go unpinned
    for pinned in ([3], [4], [3, 4]):  # a tool message, a system message after the first turn
        assert cf.pack_handoff(messages, target_context_tokens=120, pinned=pinned) == plain
    # the same exchange pinned by its assistant message is kept, whole
    assert {2, 3} <= set(cf.pack_handoff(messages, target_context_tokens=120, pinned=[2]).kept)


def check_chunked_cut(messages: list[dict[str, Any]], budget: int, pack: cf.HandoffPack, chunk: int | None) -> None:
    """SPEC §5.10 on a chunked result (OpenAI shape, no pins): the tail starts on a cut point."""
    if not pack.fits or pack.dropped == 0:
        return
    volatile = volatile_from(messages, [])
    prefix = system_prefix(m["role"] for m in messages)
    kept = set(pack.kept)
    if all(i in kept for i in range(prefix, volatile)):
        return  # the history was kept whole: only the volatile tail went
    size = chunk or budget // 4
    cuts = {volatile}
    running = 0
    for seg in segments_of(messages[:volatile]):
        if seg[0] >= prefix:
            before = running
            running += cf.tokens_of([messages[i] for i in seg])
            if running // size > before // size:
                cuts.add(seg[-1] + 1)
    directive = next(
        (
            i
            for i in range(volatile - 1, prefix - 1, -1)
            if messages[i]["role"] == "user" and not cf.is_volatile_tail(messages[i])
        ),
        None,
    )
    core = next((seg for seg in segments_of(messages[:volatile]) if directive in seg), [])
    # The tail's first message: the oldest kept history message outside the directive's
    # segment, unless that segment opens the tail.
    start = min((i for i in kept if prefix <= i < volatile and i not in core), default=volatile)
    assert start in cuts or (core and core[-1] + 1 == start and core[0] in cuts), (start, sorted(cuts))


@examples(1_000)
@given(transcripts(), st.integers(4, 2500), st.one_of(st.none(), st.integers(1, 400)))
def test_the_chunked_tail_starts_on_a_cut_point(messages: list[dict[str, Any]], budget: int, chunk: int | None) -> None:
    # SPEC §5.10: the tail starts where the running total from the first non-system message
    # crosses a multiple of C = chunk_tokens or budget // 4 (the whole budget, a volatile
    # tail's share included), moved forward to the next segment start.
    pack = same_on_both(messages, target_context_tokens=budget, shape="openai", cut="chunked", chunk_tokens=chunk)
    check_chunked_cut(messages, budget, pack, chunk)


def _only_tool_results(message: dict[str, Any]) -> bool:
    blocks = message.get("content")
    return isinstance(blocks, list) and bool(blocks) and all(b.get("type") == "tool_result" for b in blocks)


def _has_block(message: dict[str, Any], kind: str) -> bool:
    blocks = message.get("content")
    return isinstance(blocks, list) and any(isinstance(b, dict) and b.get("type") == kind for b in blocks)


@st.composite
def anthropic_transcripts(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Anthropic Messages turns: text turns, tool_use calls answered (or not) by a user turn
    of tool_result blocks (some with text too), volatile tails; reused ids."""
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 20))):
        kind = draw(st.sampled_from(["user", "assistant", "exchange", "exchange", "volatile", "mixed"]))
        if kind == "user":
            out.append(
                {"role": "user", "content": draw(st.one_of(text, text.map(lambda t: [{"type": "text", "text": t}])))}
            )
        elif kind == "assistant":
            out.append({"role": "assistant", "content": [{"type": "text", "text": draw(text)}]})
        elif kind == "volatile":
            out.append({"role": "user", "content": "<run-state>\n" + draw(text) + "\n</run-state>"})
        else:
            ids = [f"t{draw(st.integers(0, 3))}" for _ in range(draw(st.integers(1, 2)))]
            uses = [{"type": "tool_use", "id": i, "name": "grep", "input": {}} for i in ids]
            out.append({"role": "assistant", "content": [{"type": "text", "text": draw(text)}, *uses]})
            if draw(st.booleans()):
                blocks = [{"type": "tool_result", "tool_use_id": i, "content": draw(text)} for i in ids]
                if kind == "mixed":
                    blocks.append({"type": "text", "text": "also " + draw(text)})
                out.append({"role": "user", "content": blocks})
    return out


@examples(1_000)
@given(
    anthropic_transcripts(), st.integers(0, 1500), st.one_of(st.none(), text), st.sampled_from(["greedy", "chunked"])
)
def test_anthropic_shape_on_generated_transcripts(
    messages: list[dict[str, Any]], budget: int, system: str | None, cut: str
) -> None:
    # SPEC §5 (Anthropic shape): a tool_use turn and its tool_result turn are one segment;
    # the directive is no tool_result-only turn; a separate system counts and is never dropped.
    pack = same_on_both(messages, target_context_tokens=budget, system=system, cut=cut)
    kept = set(pack.kept)
    volatile = volatile_from(messages, [])
    directive = next(
        (
            i
            for i in range(volatile - 1, -1, -1)
            if messages[i]["role"] == "user"
            and not cf.is_volatile_tail(messages[i])
            and not _only_tool_results(messages[i])
        ),
        None,
    )
    assert directive is None or directive in kept
    for i in range(len(messages) - 1):
        if _has_block(messages[i], "tool_use") and _has_block(messages[i + 1], "tool_result"):
            assert (i in kept) == (i + 1 in kept), i
    system_tokens = 0 if system is None else cf.message_tokens({"role": "system", "content": system})
    note_tokens = 0 if pack.note is None else cf.message_tokens({"role": "user", "content": pack.note})
    assert pack.tokens == cf.tokens_of([messages[i] for i in pack.kept]) + note_tokens + system_tokens
    if pack.fits:
        assert pack.tokens <= budget
    if system_tokens > budget:
        assert not pack.fits  # the prompt alone over budget: nothing fits


@pytest.mark.parametrize("cut", ["greedy", "chunked"])
def test_a_leading_developer_message_is_kept_as_the_system_prompt(backend: str, cut: str) -> None:
    # OpenAI's chat API takes `developer` for `system` (o-series and later models): read
    # as any other message, a gateway folded the instruction into the note (helper-85).
    convo: list[dict[str, Any]] = [
        {"role": "developer", "content": "Never run rm -rf."},
        {"role": "system", "content": "Answer briefly."},
    ]
    for i in range(30):
        convo += [{"role": "user", "content": f"q{i} " * 100}, {"role": "assistant", "content": f"a{i} " * 100}]
    convo.append({"role": "user", "content": "latest"})
    pack = cf.pack_handoff(convo, target_context_tokens=1_500, cut=cut)
    assert pack.messages[:2] == convo[:2] and pack.kept[:2] == [0, 1]
    assert pack.messages[-1] is convo[-1] and pack.dropped > 0
    # Where it does not lead, it is a message like any other.
    middle = [convo[2], convo[0], *convo[3:]]
    assert 1 not in cf.pack_handoff(middle, target_context_tokens=1_500, cut=cut).kept
