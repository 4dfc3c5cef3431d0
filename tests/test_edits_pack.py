"""Context edits through the packers: ``edits=`` on pack_handoff, pack_many, pack_request
and pack_requests gives the same result on both backends (bytes for bytes), equals
folding the edited transcript (tests/test_edits.py holds the edits themselves), and a
request body packs as its loaded messages do."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import contextfold as cf
import pytest
from contextfold import _backend, reference
from contextfold.reference.edits import apply_edits
from contextfold.reference.pack import _compaction_segment
from contextfold.reference.tokens import TranscriptOnDemand
from hypothesis import given
from hypothesis import strategies as st

from .conftest import anthropic_corpus, examples, native_required, openai_corpus
from .test_edits import anthropic_transcript, openai_transcript, random_edits, responses_transcript, thinking_turn

MAKERS = {"openai": openai_transcript, "anthropic": anthropic_transcript, "responses": responses_transcript}


def _case(seed: int, shape: str) -> tuple[list[Any], list[Any], int]:
    rng = random.Random(seed)
    messages = MAKERS[shape](rng, rng.randint(1, 14))
    return messages, random_edits(rng), rng.choice([0, 200, 800, 3_000, 100_000])


def _both(call: Any) -> tuple[Any, Any]:
    native = native_required()
    with _backend.using(native):
        a = call()
    with _backend.using(reference):
        b = call()
    return a, b


@given(st.integers(0, 10**9), st.sampled_from(list(MAKERS)), st.sampled_from(["greedy", "chunked"]))
@examples(150, deadline=None)
def test_both_backends_edit_and_fold_alike(seed: int, shape: str, cut: str) -> None:
    messages, edits, budget = _case(seed, shape)
    options = cf.PackOptions(target_context_tokens=budget, edits=edits, cut=cut)  # type: ignore[arg-type]
    native, python = _both(lambda: cf.pack_handoff(messages, options=options))
    assert native == python
    key = "input" if shape == "responses" else "messages"
    body = json.dumps({"model": "m", key: messages}, indent=1, ensure_ascii=False).encode()
    native_body, python_body = _both(lambda: cf.pack_request(body, options=options))
    assert native_body == python_body
    # The bytes path equals the object path on every field, and its body loads as the
    # edited, folded messages.
    assert native_body.applied_edits == native.applied_edits
    assert (native_body.fits, native_body.tokens, native_body.kept, native_body.note) == (
        native.fits,
        native.tokens,
        native.kept,
        native.note,
    )
    assert json.loads(native_body.body)[key] == native.messages


@given(st.integers(0, 10**9), st.sampled_from(list(MAKERS)))
@examples(100, deadline=None)
def test_a_custom_estimator_sees_the_same_texts_in_the_same_order_on_both_backends(seed: int, shape: str) -> None:
    # A stateful estimator (a cache, a meter) gets what a pure one gets only when each
    # backend asks it the same questions: natively, edits that run over the budget only
    # were first sized for the fit, before the entries were checked and the plan sized
    # them again.
    messages, edits, budget = _case(seed, shape)

    def recorded() -> tuple[list[str], Any]:
        seen: list[str] = []

        def estimate(text: str) -> int:
            seen.append(text)
            return len(text) // 4

        return seen, cf.pack_handoff(messages, target_context_tokens=budget, edits=edits, estimate_tokens=estimate)

    native, python = _both(recorded)
    assert native == python


@pytest.mark.parametrize("edits", [(cf.ClearToolUses(),), (cf.ClearToolUses(trigger=10**9),), ()])
def test_ctrl_c_in_a_custom_estimator_stops_the_pack(backend: str, edits: tuple[Any, ...]) -> None:
    # Raised once, as a real Ctrl-C is: natively, an edit that runs over the budget only
    # sized the transcript for the fit first and put any error off until the entries
    # were checked, so the interrupt was dropped and the pack went on.
    messages = openai_transcript(random.Random(3), 4)
    calls = 0

    def estimate(text: str) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyboardInterrupt
        return len(text) // 4

    with pytest.raises(KeyboardInterrupt):
        cf.pack_handoff(messages, target_context_tokens=10**6, edits=edits, estimate_tokens=estimate)
    assert calls == 1


def test_an_entry_a_custom_estimator_empties_after_sizing_it_is_not_read_again() -> None:
    # ClearThinking sizes the reasoning item it removes; natively, ClearToolUses then
    # sized it again as the transcript was given, and found the dict the estimator had
    # emptied (a malformed message), where the reference asked once and packed.
    def run() -> tuple[Any, ...]:
        items: list[dict[str, Any]] = [
            {"type": "message", "role": "user", "content": "q" * 100},
            {"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "o" * 200},
            {"type": "message", "role": "user", "content": "next"},
        ]

        def estimate(text: str) -> int:
            if text.startswith('{"type":"reasoning"'):
                items[1].clear()
            return len(text) // 4

        edits = [cf.ClearThinking(keep=0), cf.ClearToolUses(keep=2)]
        pack = cf.pack_handoff(items, target_context_tokens=1000, estimate_tokens=estimate, edits=edits)
        return pack.kept, pack.tokens, pack.applied_edits

    native, python = _both(run)
    assert native == python
    assert native[0] == [0, 2, 3, 4]


@given(st.integers(0, 10**9), st.sampled_from(list(MAKERS)))
@examples(100, deadline=None)
def test_editing_then_folding_is_folding_the_edited_transcript(seed: int, shape: str) -> None:
    messages, edits, budget = _case(seed, shape)
    before = json.dumps(messages)
    pack = cf.pack_handoff(messages, target_context_tokens=budget, edits=edits)  # type: ignore[arg-type]
    assert json.dumps(messages) == before  # the caller's messages are never changed
    responses = shape == "responses"
    # What precedes a provider compaction is left out of the edits.
    transcript = TranscriptOnDemand(messages, None, "auto", None)
    transcript.responses = responses
    compaction = _compaction_segment(transcript, cf.PackOptions(target_context_tokens=budget))
    edited, removed, applied = apply_edits(
        messages,
        edits,
        cost=lambda i, m: cf.message_tokens(m),
        base=0,
        budget=budget,
        step=max(1, budget // 4),
        responses=responses,
        hidden=range(0) if compaction is None else range(compaction[0], compaction[1]),
    )
    folded = cf.pack_handoff(edited, target_context_tokens=budget, shape="responses" if responses else "auto")
    assert pack.applied_edits == tuple(applied)
    assert (pack.messages, pack.fits, pack.tokens, pack.note) == (
        folded.messages,
        folded.fits,
        folded.tokens,
        folded.note,
    )
    source = [i for i in range(len(messages)) if i not in set(removed)]
    assert pack.kept == [source[k] for k in folded.kept]
    # A kept message no edit changed is the caller's own object.
    unchanged = {id(m) for m in edited} & {id(m) for m in messages}
    assert all((m is messages[i]) == (id(m) in unchanged) for m, i in zip(_kept(pack), pack.kept, strict=True))


def _kept(pack: cf.HandoffPack) -> list[Any]:
    """The output messages but the note."""
    if pack.note is None:
        return pack.messages
    at = next(k for k, m in enumerate(pack.messages) if m.get("content") is pack.note or m.get("content") == pack.note)
    return pack.messages[:at] + pack.messages[at + 1 :]


def test_batches_with_edits_equal_one_by_one(backend: str) -> None:
    batch = openai_corpus()[:12] + [r["messages"] for r in anthropic_corpus()[:12]]
    edits = [cf.ClearToolUses(keep=2), cf.ClearThinking()]
    for threads in (1, 2):
        many = cf.pack_many(batch, target_context_tokens=4_000, edits=edits, threads=threads)
        assert many == [cf.pack_handoff(m, target_context_tokens=4_000, edits=edits) for m in batch]
    assert any(p.applied_edits for p in many)
    bodies = [json.dumps({"messages": m}).encode() for m in batch]
    packed = cf.pack_requests(bodies, target_context_tokens=4_000, edits=edits, threads=2)
    assert [p.applied_edits for p in packed] == [p.applied_edits for p in many]  # type: ignore[union-attr]


def test_ids_sharing_their_ends_pair_with_their_own_calls() -> None:
    """Two ids with the same ends (a hash of an id's last characters once put them in one
    bucket), a reused id and a non-str id each pair as the reference pairs them (the
    excluded tool's result is the one kept)."""
    big = "x" * 400
    calls = [
        {"id": "first_call_12345678", "type": "function", "function": {"name": "grep", "arguments": "{}"}},
        {"id": "other_call_12345678", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
    ]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "first_call_12345678", "content": big},
        {"role": "tool", "tool_call_id": "other_call_12345678", "content": big},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{**calls[1], "function": {"name": "grep", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "other_call_12345678", "content": big},
        {"role": "assistant", "content": None, "tool_calls": [{**calls[0], "id": 7}]},
        {"role": "tool", "tool_call_id": 7, "content": big},
        {"role": "user", "content": "and now?"},
    ]
    edit = cf.ClearToolUses(trigger=0, keep=0, exclude_tools=["grep"])
    options = cf.PackOptions(target_context_tokens=10**6, cut="chunked", chunk_tokens=1, edits=[edit])  # a step each
    native, python = _both(lambda: cf.pack_handoff(messages, options=options))
    assert native == python
    # grep's first result and the reused id's (its newest call is grep's) stay; bash's
    # result and the result of the call whose id is not a str (no known tool) are cleared.
    assert [m.get("content") for m in native.messages if m["role"] == "tool"] == [big, "[cleared]", big, "[cleared]"]
    body = json.dumps({"messages": messages}).encode()
    native_body, python_body = _both(lambda: cf.pack_request(body, options=options))
    assert native_body == python_body and json.loads(native_body.body)["messages"] == native.messages


def test_a_custom_estimator_sees_the_edited_messages(backend: str) -> None:
    seen: list[Any] = []

    def estimate(text: str) -> int:
        seen.append(text)
        return len(text) // 3

    messages = max(openai_corpus(), key=len)
    pack = cf.pack_handoff(messages, target_context_tokens=8_000, estimate_tokens=estimate, edits=[cf.ClearToolUses()])
    assert pack.applied_edits and any(text == "[cleared]" for text in seen)


@given(st.integers(0, 10**9))
@examples(60, deadline=None)
def test_a_custom_estimator_weighs_each_tool_result_block_alone(seed: int) -> None:
    """A block's tool use is weighed as its message holding that block alone: natively that
    view was refused when a custom estimator asked for it as a Python value."""
    rng = random.Random(seed)
    messages = anthropic_transcript(rng, rng.randint(2, 10))
    options = cf.PackOptions(
        target_context_tokens=rng.choice([100, 400, 1_500]),
        estimate_tokens=lambda text: len(text) // 3,
        edits=[cf.ClearToolUses(keep=rng.randint(0, 2), clear_tool_inputs=rng.random() < 0.5), cf.ClearThinking()],
    )
    native, python = _both(lambda: cf.pack_handoff(messages, options=options))
    assert native == python
    many, _ = _both(lambda: cf.pack_many([messages, messages], options=options))
    assert many == [native, native]


def test_results_report_no_edit_when_none_ran(backend: str) -> None:
    messages = openai_corpus()[0]
    pack = cf.pack_handoff(messages, target_context_tokens=10**7, edits=[cf.ClearToolUses()])
    assert pack.applied_edits == () and pack.dropped == 0
    assert all(a is b for a, b in zip(pack.messages, messages, strict=True))
    assert cf.pack_handoff(messages, target_context_tokens=10**7).applied_edits == ()


def _mixed_with_an_item_type_not_a_str() -> list[dict[str, Any]]:
    """A transcript that marks Responses items (its first entry) yet packs as chat (its
    newest entry shows the OpenAI shape), entry 1's ``type`` wrong for an item."""
    return [
        {"type": "message", "role": "user", "content": "hi"},
        {"role": "assistant", "content": "x", "type": 5},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "r"},
    ]


@pytest.mark.parametrize("trigger", [None, 1_000, 2_000])
def test_edits_that_run_only_over_the_budget_leave_a_fitting_transcript_as_packing_reads_it(
    backend: str, trigger: int | None
) -> None:
    # docs/editing.md: such a transcript costs nothing extra, so its entries are read as
    # packing without edits reads them (helper-80 found the reference checking them all).
    messages = _mixed_with_an_item_type_not_a_str()
    options = cf.PackOptions(target_context_tokens=1_000, edits=[cf.ClearToolUses(trigger=trigger)])
    plain = cf.pack_handoff(messages, target_context_tokens=1_000)
    edited = cf.pack_handoff(messages, options=options)
    assert edited.kept == plain.kept == [0, 1, 2, 3] and edited.applied_edits == ()
    assert cf.pack_many([messages], options=options) == [edited]
    body = json.dumps({"messages": messages}).encode()
    assert cf.pack_request(body, options=options).kept == [0, 1, 2, 3]


class _Interrupts:
    def __index__(self) -> int:
        raise KeyboardInterrupt


def test_a_pin_out_of_range_is_named_before_any_entry_is_read(backend: str) -> None:
    # helper-81: natively the fit read the entries first, and a Ctrl-C a number's
    # __index__ raised there was raised instead.
    messages = [{"role": "user", "content": [{"type": "text", "n": _Interrupts()}]}, {"role": "user", "content": "go"}]
    for edits in ([cf.ClearToolUses()], []):
        with pytest.raises(cf.ArgumentError, match="pinned index 5"):
            cf.pack_handoff(messages, target_context_tokens=1_000, edits=edits, pinned=[5])


@pytest.mark.parametrize(
    "keywords",
    [
        {"edits": [cf.ClearToolUses(trigger=5)]},  # runs under the budget too
        {"edits": [cf.ClearThinking()]},
        {"edits": [cf.ClearToolUses()], "estimate_tokens": lambda text: len(text) // 4},
        {"edits": [cf.ClearToolUses()], "target_context_tokens": 10},  # over the budget
    ],
    ids=["low trigger", "thinking", "custom estimator", "over budget"],
)
def test_edits_that_read_the_transcript_check_every_entry(backend: str, keywords: dict[str, Any]) -> None:
    messages = _mixed_with_an_item_type_not_a_str()
    with pytest.raises(cf.MessageTypeError, match=r"^message 1, field 'type': expected str, got int$"):
        cf.pack_handoff(messages, **{"target_context_tokens": 1_000, **keywords})


def _thinking_turns(turns: int, responses: bool) -> list[dict[str, Any]]:
    """``turns`` turns of a user question and an answer that thinks first."""
    out: list[dict[str, Any]] = []
    for t in range(turns):
        thought = f"weighing option {t} " * 20
        if responses:
            out += [
                {"type": "message", "role": "user", "content": f"q{t}"},
                {"type": "reasoning", "id": f"rs_{t}", "summary": [{"type": "summary_text", "text": thought}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"a{t}"}]},
            ]
        else:
            out += [{"role": "user", "content": f"q{t}"}, *thinking_turn(thought)]
    return out


@pytest.mark.parametrize("keep", [3, 4, 5])
@pytest.mark.parametrize("responses", [False, True], ids=["anthropic", "responses"])
def test_thinking_keeping_at_least_as_many_turns_as_hold_it_clears_none(
    backend: str, responses: bool, keep: int
) -> None:
    """Three turns hold thinking: ``keep`` of 3 or more leaves every one, on the object path
    and the bytes path (the reference once read keep 4 as 1 and keep 5 as 2)."""
    messages = _thinking_turns(3, responses)
    options = cf.PackOptions(target_context_tokens=10**6, edits=[cf.ClearThinking(keep=keep)])
    pack = cf.pack_handoff(messages, options=options)
    assert pack.applied_edits == () and all(a is b for a, b in zip(pack.messages, messages, strict=True))
    body = json.dumps({"model": "m", "input" if responses else "messages": messages}).encode()
    packed = cf.pack_request(body, options=options)
    assert packed.applied_edits == () and packed.body is body


def test_chunk_tokens_is_the_clearing_step_under_either_cut(backend: str) -> None:
    # Six results of 104 tokens, the newest kept: a step of 50 puts a cut point after
    # each, so five are cleared. The greedy cut read the step as a quarter of the budget
    # (1,000) and cleared none, chunk_tokens given or not.
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for k in range(6):
        call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": "x" * 400},
        ]
    body = json.dumps({"messages": messages}).encode()
    edits = [cf.ClearToolUses(trigger=0, keep=1)]
    steps = (("greedy", None, 0), ("greedy", 50, 5), ("chunked", 50, 5), ("chunked", None, 0))
    for cut, chunk_tokens, cleared in steps:
        options = cf.PackOptions(target_context_tokens=4_000, cut=cut, chunk_tokens=chunk_tokens, edits=edits)
        pack = cf.pack_handoff(messages, options=options)
        assert sum(a.cleared_tool_uses for a in pack.applied_edits) == cleared, (cut, chunk_tokens)
        assert cf.pack_request(body, options=options).applied_edits == pack.applied_edits


def test_a_pinned_reasoning_item_cleared_away_still_pins_its_segment(backend: str) -> None:
    # A run of reasoning items belongs to the segment of the item after it: ClearThinking
    # removing the pinned item dropped the pin, and the call and output it pinned went.
    messages: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "q1"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E" * 40},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "y " * 400},
        {"type": "message", "role": "assistant", "content": "done " * 100},
        {"type": "message", "role": "user", "content": "q2"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "E" * 40},
        {"type": "message", "role": "assistant", "content": "ok"},
    ]
    body = json.dumps({"input": messages}).encode()
    for pinned in ([1], [2]):
        options = cf.PackOptions(target_context_tokens=400, pinned=pinned, edits=[cf.ClearThinking(keep=1)])
        pack = cf.pack_handoff(messages, options=options)
        assert 1 not in pack.kept and {2, 3} <= set(pack.kept), pinned
        assert cf.pack_request(body, options=options).kept == pack.kept
    unpinned = cf.pack_handoff(messages, target_context_tokens=400, edits=[cf.ClearThinking(keep=1)])
    assert not {2, 3} & set(unpinned.kept)  # the pin is what keeps them
    # A pin on a reasoning item that nothing follows pins nothing (and is no index past
    # the edited transcript's end).
    tail = messages[:7]
    pack = cf.pack_handoff(tail, target_context_tokens=60, pinned=[6], edits=[cf.ClearThinking(keep=0)])
    assert pack == cf.pack_handoff(tail, target_context_tokens=60, edits=[cf.ClearThinking(keep=0)])


def _compacted_run(responses: bool) -> list[dict[str, Any]]:
    """An old exchange of 2,000 chars, a compaction, then two exchanges of 400."""

    def exchange(k: int, size: int) -> list[dict[str, Any]]:
        if responses:
            return [
                {"type": "function_call", "call_id": f"c{k}", "name": "read", "arguments": "{}"},
                {"type": "function_call_output", "call_id": f"c{k}", "output": "x" * size},
            ]
        return [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{k}", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}", "content": "x" * size}]},
        ]

    item: dict[str, Any] = {"type": "message"} if responses else {}
    compaction: dict[str, Any] = (
        {"type": "compaction", "encrypted_content": "C" * 40}
        if responses
        else {"role": "assistant", "content": [{"type": "compaction", "content": "the work so far"}]}
    )
    return [
        {**item, "role": "user", "content": "start"},
        *exchange(0, 2_000),
        compaction,
        {**item, "role": "user", "content": "continue"},
        *exchange(1, 400),
        *exchange(2, 400),
    ]


@pytest.mark.parametrize("responses", [False, True])
def test_edits_leave_what_precedes_a_compaction_to_go_first(backend: str, responses: bool) -> None:
    # What follows the compaction fits: packed without edits, the old exchange goes and
    # both newer results stay whole. The edit counted the old exchange toward its trigger,
    # cleared a newer result, the whole transcript then fit, and the part the provider
    # ignores was sent while a result it reads was lost.
    messages = _compacted_run(responses)
    body = json.dumps({"input" if responses else "messages": messages}).encode()
    folded = cf.pack_handoff(messages, target_context_tokens=400, cut="chunked", chunk_tokens=50)
    assert folded.fits and folded.kept == [3, 4, 5, 6, 7, 8]
    for edits in ([cf.ClearToolUses(keep=1)], [cf.ClearThinking(keep=0), cf.ClearToolUses(keep=0)]):
        options = cf.PackOptions(target_context_tokens=400, cut="chunked", chunk_tokens=50, edits=edits)
        edited = cf.pack_handoff(messages, options=options)
        assert (edited.kept, edited.messages, edited.applied_edits) == (folded.kept, folded.messages, ())
        unedited = replace(options, edits=())
        assert cf.pack_request(body, options=options).body == cf.pack_request(body, options=unedited).body
    # A trigger the part after the compaction passes clears there only (the older of its
    # two results), never in the old exchange, which goes first as ever.
    pack = cf.pack_handoff(messages, target_context_tokens=400, edits=[cf.ClearToolUses(trigger=100, keep=1)])
    assert pack.kept == [3, 4, 5, 6, 7, 8] and pack.applied_edits[0].cleared_tool_uses == 1
    assert pack.messages[:3] == messages[3:6] and pack.messages[4:] == messages[7:]
    assert pack.messages[3] != messages[6]  # the older result after the compaction, cleared


def test_the_edits_find_a_compaction_in_the_shape_they_read(backend: str) -> None:
    # The newest entry is a chat message, so the edits (and the fold) read chat messages:
    # a Responses compaction item among them is no compaction there, and hides nothing.
    # The native edits looked for one in the format any entry marks (Responses items
    # here), left the old result whole as if hidden, and the fold then dropped the item.
    def call(i: int) -> dict[str, Any]:
        function = {"name": "read", "arguments": "{}"}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": function}],
        }

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "read the files"},
        call(1),
        {"role": "tool", "tool_call_id": "c1", "content": "old output " * 40},
        {"type": "compaction", "encrypted_content": "C" * 40},
        {"role": "user", "content": "next"},
        call(2),
        {"role": "tool", "tool_call_id": "c2", "content": "new output " * 100},
    ]
    options = cf.PackOptions(target_context_tokens=200, pinned=[1], summary="s", edits=[cf.ClearToolUses(keep=1)])
    pack = cf.pack_handoff(messages, options=options)
    assert pack.kept == [1, 2, 4] and pack.messages[2] == {**messages[2], "content": "[cleared]"}
    assert [(a.cleared_tool_uses, a.cleared_input_tokens) for a in pack.applied_edits] == [(1, 107)]
    packed = cf.pack_request(json.dumps({"messages": messages}).encode(), options=options)
    assert (packed.kept, json.loads(packed.body)["messages"]) == (pack.kept, pack.messages)


def test_reasoning_an_item_names_by_its_id_is_never_cleared(backend: str) -> None:
    # OpenAI refuses an item sent with its id (fc_..., msg_...) without the reasoning item
    # before it ("was provided without its required 'reasoning' item"): such reasoning
    # stays; reasoning before an item without an id goes.
    messages: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "q1"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E" * 400},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "E" * 400},
        {"type": "reasoning", "id": "rs_3", "summary": [], "encrypted_content": "E" * 400},
        {"type": "message", "id": "msg_1", "role": "assistant", "content": "ok"},
        {"type": "message", "role": "user", "content": "q2"},
        {"type": "reasoning", "id": "rs_4", "summary": [], "encrypted_content": "E" * 400},
        {"type": "function_call", "call_id": "c2", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "done"},
        {"type": "message", "role": "user", "content": "q3"},
        {"type": "message", "role": "assistant", "content": "ok"},
    ]
    options = cf.PackOptions(target_context_tokens=100_000, edits=[cf.ClearThinking(keep=0)])
    pack = cf.pack_handoff(messages, options=options)
    assert pack.kept == [i for i in range(len(messages)) if i != 8]
    assert pack.applied_edits[0].cleared_thinking_turns == 1
    assert cf.pack_request(json.dumps({"input": messages}).encode(), options=options).kept == pack.kept


def test_a_result_after_a_compaction_pairs_with_its_call_before_it(backend: str) -> None:
    # The edits leave what precedes the compaction alone, but pairing reads it: a result
    # after the compaction whose call precedes it is that call's (its tool excluded here,
    # so kept whole), and the call's input is never emptied.
    calls = [{"id": f"c{k}", "type": "function", "function": {"name": "grep", "arguments": '{"q": 1}'}} for k in (1, 2)]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "x " * 400},
        {"role": "assistant", "content": [{"type": "compaction", "content": "so far"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "x " * 400},
        {"role": "user", "content": "more"},
    ]
    options = cf.PackOptions(
        target_context_tokens=100_000,
        chunk_tokens=1,
        edits=[cf.ClearToolUses(trigger=0, keep=0, exclude_tools=["grep"], clear_tool_inputs=True)],
    )
    assert cf.pack_handoff(messages, options=options).messages == messages
    excluding_nothing = replace(options, edits=[cf.ClearToolUses(trigger=0, keep=0, clear_tool_inputs=True)])
    pack = cf.pack_handoff(messages, options=excluding_nothing)
    assert pack.messages[4]["content"] == "[cleared]" and pack.messages[:4] == messages[:4]


def test_bad_edits_fail_when_the_options_are_built() -> None:
    with pytest.raises(cf.ArgumentTypeError, match="edits"):
        cf.PackOptions(target_context_tokens=10, edits=["clear"])  # type: ignore[list-item]
    with pytest.raises(cf.ArgumentTypeError, match="edits"):
        cf.pack_handoff([], target_context_tokens=10, edits=cf.ClearToolUses())  # type: ignore[arg-type]


# Provider compaction --------------------------------------------------------------------


def _responses_with_compaction() -> list[dict[str, Any]]:
    older = [{"type": "message", "role": "user", "content": f"old request {i} " + "x " * 200} for i in range(6)]
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "E" * 400}
    newer = []
    for i in range(8):
        newer += [
            {"type": "function_call", "call_id": f"c{i}", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": "y " * 300},
        ]
    return [{"type": "message", "role": "developer", "content": "be brief"}, *older, compaction, *newer]


def _anthropic_with_compaction() -> list[dict[str, Any]]:
    older = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x " * 200} for i in range(6)]
    compaction = {"role": "assistant", "content": [{"type": "compaction", "content": "all so far: " + "s " * 100}]}
    newer = [{"role": "user", "content": "go on"}]
    for i in range(8):
        newer += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "y " * 300}]},
        ]
    return [*older, compaction, *newer]


def _openai_with_compaction() -> list[dict[str, Any]]:
    # An Anthropic compaction block in a chat transcript paired the OpenAI way: what a
    # framework (LangChain, with ChatAnthropic) converts its messages to.
    older = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x " * 200} for i in range(6)]
    compaction = {
        "role": "assistant",
        "content": [{"type": "compaction", "content": "all so far: " + "s " * 100}],
        "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
    }
    newer = [{"role": "tool", "tool_call_id": "c0", "content": "z " * 50}, {"role": "user", "content": "go on"}]
    for i in range(1, 8):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        newer += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "y " * 300},
        ]
    return [*older, compaction, *newer]


COMPACTED = [_responses_with_compaction, _anthropic_with_compaction, _openai_with_compaction]


@pytest.mark.parametrize("make", COMPACTED)
def test_the_newest_compaction_is_kept_and_what_precedes_it_goes_first_unlisted(backend: str, make: Any) -> None:
    messages = make()
    at = next(i for i, m in enumerate(messages) if "compaction" in json.dumps(m))
    prefix = 1 if messages[0].get("role") == "developer" else 0
    total = sum(cf.message_tokens(m) for m in messages)
    for budget in (total // 4, total // 2, total - 100):
        pack = cf.pack_handoff(messages, target_context_tokens=budget)
        assert at in pack.kept, budget
        if "tool_calls" in messages[at]:  # its calls' answers are kept with it
            assert at + 1 in pack.kept
        # Nothing before the compaction (the leading system messages aside) is kept, and
        # the note lists only what followed it.
        assert [i for i in pack.kept if i < at] == list(range(prefix))
        if pack.note is not None:
            assert "old request" not in pack.note and "turn " not in pack.note
        assert pack.fits and pack.tokens <= budget
        body = json.dumps({"input" if prefix else "messages": messages}).encode()
        packed = cf.pack_request(body, target_context_tokens=budget)
        assert (packed.kept, packed.tokens, packed.note) == (pack.kept, pack.tokens, pack.note)
    # A transcript that fits comes back whole.
    assert cf.pack_handoff(messages, target_context_tokens=total).kept == list(range(len(messages)))


def test_a_compaction_is_kept_when_the_shape_is_named(backend: str) -> None:
    messages = _openai_with_compaction()
    at = next(i for i, m in enumerate(messages) if "compaction" in json.dumps(m))
    total = sum(cf.message_tokens(m) for m in messages)
    named = cf.pack_handoff(messages, target_context_tokens=total // 3, shape="openai")
    assert named == cf.pack_handoff(messages, target_context_tokens=total // 3)
    assert named.kept[:2] == [at, at + 1]


# Review findings ------------------------------------------------------------------------

W = "w " * 300


def test_edits_run_when_the_must_keep_part_alone_is_over_the_budget(backend: str) -> None:
    # The directive's own segment holds a long result: it does not fit unedited, and the
    # edit is what makes it fit (natively the edit was skipped: nothing was dropped).
    messages = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "w " * 400},
                {"type": "text", "text": "go"},
            ],
        },
    ]
    pack = cf.pack_handoff(messages, target_context_tokens=60, edits=[cf.ClearToolUses(keep=0)])
    assert pack.fits and pack.applied_edits and pack.applied_edits[0].cleared_tool_uses == 1


def test_a_compaction_that_calls_a_tool_keeps_its_answer(backend: str) -> None:
    messages = [
        {"role": "user", "content": "old " + W},
        {
            "role": "assistant",
            "content": [
                {"type": "compaction", "content": "summary"},
                {"type": "tool_use", "id": "t1", "name": "r", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": W}]},
        {"role": "assistant", "content": "ok " + W},
        {"role": "user", "content": "next"},
    ]
    assert cf.pack_handoff(messages, target_context_tokens=200).kept[:2] == [1, 2]


def test_a_compaction_in_a_chat_without_tools_is_kept(backend: str) -> None:
    messages = [
        {"role": "user", "content": "old " + W},
        {"role": "assistant", "content": "old reply " + W},
        {
            "role": "assistant",
            "content": [{"type": "compaction", "content": "all so far"}, {"type": "text", "text": "ok"}],
        },
        {"role": "user", "content": "more " + W},
        {"role": "assistant", "content": "a " + W},
        {"role": "user", "content": "last"},
    ]
    pack = cf.pack_handoff(messages, target_context_tokens=300)
    assert pack.kept[0] == 2 and "all so far" not in (pack.note or "")


def _pinned_before_a_compaction() -> tuple[list[dict[str, Any]], list[int]]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "old request " + W},
        {"role": "assistant", "content": [{"type": "compaction", "content": "all so far"}]},
        {"role": "user", "content": "latest request"},
    ]
    return messages, [1, 2]


def _items_pinned_before_a_compaction() -> tuple[list[dict[str, Any]], list[int]]:
    # The compaction item lies inside a call's segment, which it keeps whole.
    messages: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "old " + W},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "compaction", "encrypted_content": "E" * 100},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"type": "message", "role": "user", "content": "latest"},
    ]
    return messages, [1, 2, 3, 4]


@pytest.mark.parametrize("make", [_pinned_before_a_compaction, _items_pinned_before_a_compaction])
def test_pins_before_a_compaction_go_even_when_nothing_else_would(backend: str, make: Any) -> None:
    # Pins before the compaction go with the rest of what precedes it: also when, with
    # them, every message is in the must-keep part (nothing was dropped before the
    # compaction was looked for).
    messages, kept = make()
    body = json.dumps({"input" if "type" in messages[0] else "messages": messages}).encode()
    for pinned in ([0], [0, 1]):
        pack = cf.pack_handoff(messages, target_context_tokens=100, pinned=pinned)
        assert (pack.fits, pack.kept) == (True, kept), pinned
        assert cf.pack_request(body, target_context_tokens=100, pinned=pinned).kept == kept


def test_a_compaction_item_between_a_call_and_its_output_keeps_them_together(backend: str) -> None:
    # A Responses call and its output are one segment with everything between them, a
    # compaction item too: the call is kept with it, never the output alone.
    messages = [
        {"type": "message", "role": "user", "content": "old " + W},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "compaction", "encrypted_content": "E" * 100},
        {"type": "function_call_output", "call_id": "c1", "output": "result"},
        {"type": "message", "role": "assistant", "content": "reply " + W},
        {"type": "message", "role": "user", "content": "latest"},
    ]
    pack = cf.pack_handoff(messages, target_context_tokens=300)
    assert pack.kept[:3] == [1, 2, 3] and 0 not in pack.kept
    assert cf.pack_request(json.dumps({"input": messages}).encode(), target_context_tokens=300).kept == pack.kept


@pytest.mark.parametrize("responses", [False, True])
def test_a_malformed_message_before_a_compaction_is_never_read(backend: str, responses: bool) -> None:
    # What precedes the compaction goes unread and unlisted, so a malformed message there
    # raises at no budget: the first fold, which sized it where the whole transcript was
    # nearly in budget, raised where a smaller budget packed.
    compaction: dict[str, Any] = (
        {"type": "compaction", "encrypted_content": "E" * 40}
        if responses
        else {"role": "assistant", "content": [{"type": "compaction", "content": "all so far"}]}
    )
    item: dict[str, Any] = {"type": "message"} if responses else {}
    after = [{**item, "role": "assistant", "content": "reply"}, {**item, "role": "user", "content": "latest"}]
    for malformed in ({**item, "role": "user", "content": 5}, {**item, "role": 5, "content": "x"}, "no dict"):
        messages = [malformed, compaction, *after]
        body = json.dumps({"input" if responses else "messages": messages}).encode()
        for budget, cut in ((10_000, "greedy"), (10_000, "chunked"), (40, "greedy")):
            pack = cf.pack_handoff(messages, target_context_tokens=budget, cut=cut)
            assert (pack.kept, pack.note, pack.dropped) == ([1, 2, 3], None, 1), (malformed, budget, cut)
            assert cf.pack_request(body, target_context_tokens=budget, cut=cut).kept == pack.kept
    # One after the compaction is read, and named by its index in the input.
    messages[2] = {**item, "role": "assistant", "content": 5}
    with pytest.raises(cf.MessageTypeError, match="message 2, field 'content'"):
        cf.pack_handoff(messages, target_context_tokens=10_000)


@pytest.mark.parametrize("edits", [(), (cf.ClearToolUses(),)])
@pytest.mark.parametrize("responses", [False, True])
def test_a_message_a_custom_estimator_cannot_size_before_a_compaction_is_never_read(
    backend: str, responses: bool, edits: tuple[Any, ...]
) -> None:
    # For a custom estimator a message's text is written by the contract's helpers,
    # which find a value without a JSON form (bytes) where the native walk finds it for
    # the built-in counts: a MessageError of the caller's side, which natively ended
    # the pack where a malformed message before the compaction is left unread.
    compaction: dict[str, Any] = (
        {"type": "compaction", "encrypted_content": "E" * 40}
        if responses
        else {"role": "assistant", "content": [{"type": "compaction", "content": "all so far"}]}
    )
    item: dict[str, Any] = {"type": "message"} if responses else {}
    messages = [
        {**item, "role": "user", "content": [b"x"]},
        compaction,
        {**item, "role": "assistant", "content": "reply"},
        {**item, "role": "user", "content": "latest"},
    ]

    def estimate(text: str) -> int:
        return len(text) // 4

    pack = cf.pack_handoff(messages, target_context_tokens=10_000, estimate_tokens=estimate, edits=edits)
    assert (pack.kept, pack.note, pack.dropped) == ([1, 2, 3], None, 1)
    messages[2] = {**item, "role": "assistant", "content": [b"x"]}
    with pytest.raises(cf.MessageTypeError, match="message 2, field 'content'"):
        cf.pack_handoff(messages, target_context_tokens=10_000, estimate_tokens=estimate, edits=edits)


@pytest.mark.parametrize("responses", [False, True])
def test_a_system_message_after_a_compaction_is_folded_like_any_other(backend: str, responses: bool) -> None:
    # Only the leading system messages are never dropped: one that follows the
    # compaction is part of what follows it, folded into the rest of the budget.
    system = "developer" if responses else "system"
    turns = [
        (system, "be brief"),
        ("user", "old " + W),
        ("compaction", ""),
        (system, "mid-run reminder " + W),
        ("user", "more " + W),
        ("assistant", "reply " + W),
        ("user", "latest"),
    ]
    compaction: dict[str, Any] = (
        {"type": "compaction", "encrypted_content": "E" * 40}
        if responses
        else {"role": "assistant", "content": [{"type": "compaction", "content": "all so far"}]}
    )
    item: dict[str, Any] = {"type": "message"} if responses else {}
    messages = [compaction if role == "compaction" else {**item, "role": role, "content": text} for role, text in turns]
    pack = cf.pack_handoff(messages, target_context_tokens=120)
    assert pack.fits and pack.kept[:2] == [0, 2] and 3 not in pack.kept and pack.kept[-1] == 6
    body = json.dumps({"input" if responses else "messages": messages}).encode()
    assert cf.pack_request(body, target_context_tokens=120).kept == pack.kept


class _Storage(dict):  # type: ignore[type-arg]
    """A dict whose own methods lie about its entries."""

    def __iter__(self) -> Any:
        return iter(["role", "content", "tool_call_id", "extra"])

    def keys(self) -> Any:
        return ["role", "content", "tool_call_id", "extra"]

    def __getitem__(self, key: Any) -> Any:
        return "HOOKED"


def test_an_edited_dict_subclass_is_copied_from_its_storage(backend: str) -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    result = _Storage(role="tool", tool_call_id="c1", content="w " * 200)
    pack = cf.pack_handoff(
        [call, result, {"role": "user", "content": "q"}], target_context_tokens=60, edits=[cf.ClearToolUses(keep=0)]
    )
    assert {"role": "tool", "tool_call_id": "c1", "content": "[cleared]"} in pack.messages


def _tool_blocks(uses: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for i in range(uses):
        use = {"type": "tool_use", "id": f"t{i}", "name": "grep", "input": {"q": "x"}}
        messages.append({"role": "assistant", "content": [use]})
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "r" * 400}
        messages.append({"role": "user", "content": [result]})
    return messages


def test_a_message_changed_under_its_planned_edit_does_not_reach_the_result(backend: str) -> None:
    # The estimator turns a tool result's blocks into a string at its fifth call, after
    # the plan found them on both backends. Packing with edits and a custom estimator
    # reads copies of the lists edits index into, taken as the call began: both backends
    # clear what they planned to (they raised "a message changed while it was being packed", each at its own
    # estimator call).
    messages = [*_tool_blocks(4), {"role": "user", "content": "go on"}]
    untouched = copy.deepcopy(messages)
    calls = []

    def estimate(text: str) -> int:
        calls.append(text)
        if len(calls) == 5:
            messages[2]["content"] = "plain text"
        return len(text) // 4

    edits = [cf.ClearToolUses(keep=1, clear_tool_inputs=True)]
    pack = cf.pack_handoff(messages, target_context_tokens=200, estimate_tokens=estimate, edits=edits)
    assert messages[2]["content"] == "plain text"
    want = cf.pack_handoff(untouched, target_context_tokens=200, estimate_tokens=lambda t: len(t) // 4, edits=edits)
    assert pack.applied_edits and pack == want  # the note lists message 2 as the call began


class _ChangingKey(str):
    """A key hashing like "content": each lookup of "content" in its dict runs its
    ``__eq__``, whose ``at``-th call runs ``change``."""

    calls, at = 0, 0
    change: Any = None

    def __hash__(self) -> int:
        return hash("content")

    def __eq__(self, other: object) -> bool:
        _ChangingKey.calls += 1
        if _ChangingKey.calls == _ChangingKey.at:
            _ChangingKey.change()
        return False

    __ne__ = lambda self, other: True  # type: ignore[assignment]  # noqa: E731


def _openai_exchanges(uses: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for i in range(uses):
        arguments = '{"q": "' + "x" * 60 + '"}'
        call = {"id": f"t{i}", "type": "function", "function": {"name": "grep", "arguments": arguments}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"t{i}", "content": "r" * 400},
        ]
    return [*messages, {"role": "user", "content": "go on"}]


CHANGES = {
    "calls popped": (_openai_exchanges, 1, lambda messages: messages[1].pop("tool_calls", None)),
    "calls made ints": (_openai_exchanges, 1, lambda messages: messages[1].__setitem__("tool_calls", [1])),
    "blocks made ints": (_tool_blocks, 2, lambda messages: messages[2].__setitem__("content", [5, 5])),
}


@pytest.mark.parametrize("estimate", [lambda text: len(text) // 4, None], ids=["custom estimator", "chars/4"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_message_changed_at_any_point_of_an_edit_packs_or_says_so(
    backend: str, change: str, estimate: Callable[[str], int] | None
) -> None:
    # Whenever the key's __eq__ changes its message (while it is read, planned for,
    # copied or sized), the call returns a pack or raises the changed-message error:
    # never a panic, a RuntimeError from a dict changing size, or a bare TypeError.
    make, holder, act = CHANGES[change]
    for at in range(1, 40):
        messages = make(3)
        messages[holder] = {_ChangingKey("k"): 0, **messages[holder]}
        _ChangingKey.calls, _ChangingKey.at = 0, at
        _ChangingKey.change = lambda messages=messages: act(messages)
        try:
            cf.pack_handoff(
                messages,
                target_context_tokens=150,
                estimate_tokens=estimate,
                edits=[cf.ClearToolUses(keep=1, clear_tool_inputs=True)],
            )
        except cf.ArgumentError as error:
            assert str(error).startswith("a message changed while it was being packed"), at
        except BaseException as error:  # a PanicException is no Exception
            pytest.fail(f"__eq__ call {at}: {type(error).__name__}: {error}")


def test_edit_subclasses_are_refused_when_the_options_are_built() -> None:
    class Mine(cf.ClearToolUses):
        pass

    with pytest.raises(cf.ArgumentTypeError, match=r"edits\[0\]"):
        cf.PackOptions(target_context_tokens=10, edits=[Mine()])


def test_an_edit_sizes_only_what_it_reads(backend: str) -> None:
    # The trigger is passed by the newest messages alone, so the oldest ones are never
    # sized (as folding alone never sizes what it does not reach).
    seen: list[str] = []

    def estimate(text: str) -> int:
        seen.append(text)
        return len(text) // 4

    calls = [{"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}} for k in range(5)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    messages += [{"role": "assistant", "content": f"old note {i} " + "x" * 400} for i in range(30)]
    messages.append({"role": "assistant", "content": None, "tool_calls": calls})
    messages += [{"role": "tool", "tool_call_id": f"c{k}", "content": "r" * 2_000} for k in range(5)]
    messages.append({"role": "user", "content": "go on"})
    pack = cf.pack_handoff(messages, target_context_tokens=2_000, estimate_tokens=estimate, edits=[cf.ClearToolUses()])
    assert pack.applied_edits and pack.applied_edits[0].cleared_tool_uses == 2
    assert not any(text.startswith("old note 0 ") for text in seen)


def _thinking_cleared_then_unsizable() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Responses items whose older reasoning ClearThinking removes, the newest message
    holding a value with no JSON form, and the packing keywords that read it that way."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": "start " + "x" * 4_000},
        {"type": "reasoning", "id": "r1", "summary": [], "encrypted_content": "e" * 2_000},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a" * 4_000}]},
        {"type": "message", "role": "user", "content": "again"},
        {"type": "reasoning", "id": "r2", "summary": [], "encrypted_content": "e" * 200},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b", "x": {1, 2}}]},
    ]
    return items, {"target_context_tokens": 1_500, "edits": [cf.ClearThinking()]}


def _compaction_then_unsizable() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Responses items over budget with a compaction, the newest item after it holding a
    value with no JSON form."""
    items = _responses_with_compaction()
    items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "n", "x": {1}}]})
    return items, {"target_context_tokens": 1_000}


@pytest.mark.parametrize("make", [_thinking_cleared_then_unsizable, _compaction_then_unsizable])
@pytest.mark.parametrize("estimate", [None, "custom"])
def test_what_sizing_raises_names_the_callers_message(backend: str, make: Any, estimate: Any) -> None:
    # Packing reads an edited transcript, or the part after a compaction, as a view of its
    # own: what sizing one of its messages raises still names the caller's index.
    items, keywords = make()
    custom = {"estimate_tokens": lambda text: len(text) // 4} if estimate else {}
    with pytest.raises(cf.MessageTypeError, match=rf"message {len(items) - 1}, field 'content'"):
        cf.pack_handoff(items, **keywords, **custom)


def _unsizable_values() -> list[tuple[list[dict[str, Any]], bool, str]]:
    """(messages, clear_tool_inputs, field): an older tool result, or a call's input, that
    holds a value with no JSON form, which an edit reads before anything sizes it."""
    call = {"type": "function_call", "call_id": "a", "name": "t", "arguments": "{}"}
    custom = {"type": "custom_tool_call", "call_id": "a", "name": "t", "input": "x"}
    after = {"type": "message", "role": "user", "content": "next"}
    bad_text = [{"type": "text", "text": b"x"}]
    use = {"type": "tool_use", "id": "a", "name": "t", "input": {}}
    output = {"type": "function_call_output", "call_id": "a", "output": "r" * 40}
    custom_output = {**output, "type": "custom_tool_call_output"}
    openai_call = {"id": "a", "type": "function", "function": {"name": "t", "arguments": ("t",)}}
    return [
        ([call, {**output, "output": b"x"}, after], False, "output"),
        ([custom, {**custom_output, "output": b"x"}, after], False, "output"),
        ([{**call, "arguments": b"x"}, output, after], True, "input"),
        ([{**custom, "input": b"x"}, custom_output, after], True, "input"),
        (
            [
                {"role": "assistant", "tool_calls": [openai_call]},
                {"role": "tool", "tool_call_id": "a", "content": "r" * 40},
                {"role": "user", "content": "next"},
            ],
            True,
            "input",
        ),
        (
            [
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": bad_text}]},
                {"role": "user", "content": "next"},
            ],
            False,
            "content",
        ),
        (
            [
                {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "t"}}]},
                {"role": "tool", "tool_call_id": "a", "content": bad_text},
                {"role": "user", "content": "next"},
            ],
            False,
            "content",
        ),
        (
            [
                {"role": "assistant", "content": [{**use, "input": ("t",)}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r" * 40}]},
                {"role": "user", "content": "next"},
            ],
            True,
            "input",
        ),
    ]


@pytest.mark.parametrize("case", range(len(_unsizable_values())))
def test_a_value_an_edit_reads_first_is_named_with_its_message(backend: str, case: int) -> None:
    # trigger=0: only the newest message is sized before the edit reads the older ones.
    messages, inputs, field = _unsizable_values()[case]
    edits = [cf.ClearToolUses(trigger=0, keep=0, clear_tool_inputs=inputs)]
    with pytest.raises(cf.MessageTypeError, match=rf"^message {1 - int(inputs)}, field '{field}'") as raised:
        cf.pack_handoff(messages, target_context_tokens=10**6, edits=edits)
    assert (raised.value.index, raised.value.field) == (1 - int(inputs), field)


@pytest.mark.usefixtures("offline_tiktoken")
def test_a_result_shorter_by_length_is_cleared_under_an_exact_encoding(backend: str) -> None:
    # Replacement is judged by JSON length: forty dashes (2 tokens in o200k_base) are
    # cleared for "[cleared]" (4), which costs the message more; the edit as a whole is
    # what must free something, or it does nothing.
    def run(results: list[str]) -> cf.HandoffPack:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        for k, text in enumerate(results):
            call = {"id": f"c{k}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            messages += [
                {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": text},
            ]
        messages.append({"role": "user", "content": "next"})
        edits = [cf.ClearToolUses(trigger=0, keep=0)]
        return cf.pack_handoff(
            messages,
            target_context_tokens=10**6,
            estimate_tokens="o200k_base",
            edits=edits,
            cut="chunked",
            chunk_tokens=1,
        )

    alone = run(["-" * 40])
    assert not alone.applied_edits and alone.messages[2]["content"] == "-" * 40
    both = run(["-" * 40, "word " * 200])
    before = cf.message_tokens(
        {"role": "tool", "tool_call_id": "c0", "content": "-" * 40}, estimate_tokens="o200k_base"
    )
    assert [m.get("content") for m in both.messages[2:5:2]] == ["[cleared]", "[cleared]"]
    assert cf.message_tokens(both.messages[2], estimate_tokens="o200k_base") == before + 2
    assert both.applied_edits[0].cleared_tool_uses == 2 and both.applied_edits[0].cleared_input_tokens > 0


@pytest.mark.parametrize("make", COMPACTED)
def test_pins_hold_after_the_compaction_only(backend: str, make: Any) -> None:
    # What precedes the newest compaction is dropped (or held in it) by the provider, so
    # a pin there goes with it (docs/editing.md); one after the compaction holds.
    messages = make()
    at = next(i for i, m in enumerate(messages) if "compaction" in json.dumps(m))
    before, after = at - 2, at + 3
    total = sum(cf.message_tokens(m) for m in messages)
    pack = cf.pack_handoff(messages, target_context_tokens=total // 3, pinned=[before, after])
    assert at in pack.kept and after in pack.kept and before not in pack.kept
    assert pack.kept == sorted(pack.kept)


def test_an_edited_message_holds_none_of_the_callers_lists(backend: str) -> None:
    """An edited message's `content` and `tool_calls` lists are new whichever the edit
    reached, on both backends and whichever way the edits planned (in place, or on copies
    when a custom estimator runs): natively a list no edit reached was the caller's own,
    the reference's a copy (found by helper-64's differential fuzzing)."""
    content = [{"type": "text", "text": "calling"}]
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "x" * 200}}]
    cleared = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": content, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "r" * 200},
        {"role": "user", "content": "next"},
    ]
    thinking = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "t"}],
            "tool_calls": calls,
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm2", "signature": "s"}]},
    ]
    # Each case's edit reaches one of the two lists and leaves the other (`untouched`).
    cases = [
        (cleared, cf.ClearToolUses(trigger=0, keep=0, clear_tool_inputs=True), {"chunk_tokens": 1}, "content"),
        (thinking, cf.ClearThinking(keep=1), {}, "tool_calls"),
    ]
    for messages, edit, keywords, untouched in cases:
        for estimate in (None, lambda text: len(text) // 4):
            pack = cf.pack_handoff(
                messages, target_context_tokens=10**6, edits=[edit], estimate_tokens=estimate, **keywords
            )
            assert pack.applied_edits
            edited = pack.messages[1]
            assert edited is not messages[1]
            for key in ("content", "tool_calls"):
                assert isinstance(edited[key], list) and edited[key] is not messages[1][key]
            # What the list no edit reached holds is the caller's own.
            assert all(a is b for a, b in zip(edited[untouched], messages[1][untouched], strict=True))


def test_an_estimators_error_after_a_removed_reasoning_item_names_the_callers_index(backend: str) -> None:
    """ClearThinking removes a Responses reasoning item; an estimator's error on a later
    item names the caller's index (the reference named the edited view's, one less; found
    by helper-64's differential fuzzing)."""

    def estimate(text: str) -> int:
        return -1 if "BAD" in text else len(text) // 4

    items = [
        {"type": "message", "role": "user", "content": "first question"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "old reasoning " * 20}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "BAD " * 10},
        {"type": "message", "role": "user", "content": "second question"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "new reasoning"}]},
        {"type": "message", "role": "assistant", "content": "answer"},
    ]
    with pytest.raises(cf.EstimatorError, match=r"^message 3: estimate_tokens must return") as raised:
        cf.pack_handoff(
            items,
            target_context_tokens=10**6,
            shape="responses",
            estimate_tokens=estimate,
            edits=[cf.ClearThinking(keep=1)],
        )
    assert raised.value.index == 3
