"""LangChain / LangGraph adapters on corpus transcripts as real LangChain messages."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import contextfold as cf
import pytest

from . import adapter_reports, expected_report, need
from .lc_corpus import RecordingChatModel, langchain_corpus, to_langchain
from .pairing import assert_segments_whole, kept_positions, openai_segments

lc = need("contextfold.integrations.langchain", "langchain")
need("langgraph", "langgraph")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage  # noqa: E402
from langchain_core.messages.utils import trim_messages  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables import Runnable  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402


def _segments(messages: list[BaseMessage]) -> list[list[int]]:
    roles = ["tool" if isinstance(m, ToolMessage) else m.type for m in messages]
    roles = ["assistant" if r == "ai" else r for r in roles]
    calls = [isinstance(m, AIMessage) and bool(m.tool_calls or m.invalid_tool_calls) for m in messages]
    return openai_segments(roles, calls)


def _check_packed(inputs: list[BaseMessage], outputs: list[BaseMessage], pack: cf.HandoffPack) -> None:
    kept, others = kept_positions(inputs, outputs)
    assert kept == pack.kept
    assert_segments_whole(_segments(inputs), kept)
    if pack.note is None:
        assert others == []
    else:
        assert len(others) == 1 and isinstance(others[0], (HumanMessage, AIMessage))
        assert others[0].content == pack.note
    humans = [i for i, m in enumerate(inputs) if isinstance(m, HumanMessage)]
    if humans:
        assert humans[-1] in kept, "the latest user request was dropped"


@pytest.mark.parametrize("budget", [1_000, 4_000])
def test_pack_returns_the_callers_messages_with_tool_pairs_whole(budget: int) -> None:
    folded = 0
    for messages in langchain_corpus():
        packed = lc.pack(messages, max_tokens=budget)
        _check_packed(messages, packed.messages, packed.pack)
        if packed.pack.fits:
            assert lc.TokenCounter()(packed.messages) == packed.pack.tokens <= budget
        folded += packed.pack.dropped > 0
    assert folded >= 10  # the corpus really was folded, not passed through


@pytest.mark.parametrize("change", ["insert", "delete"])
def test_the_callers_list_is_read_once(change: str) -> None:
    # The kept indices were mapped back by reading the caller's list again: an estimator
    # that changed it meanwhile lost the latest question and sent a tool result without
    # its call (an insert), or raised a bare IndexError (a delete).
    def history() -> list[BaseMessage]:
        out: list[BaseMessage] = [HumanMessage("sys")]
        for i in range(10):
            out += [
                HumanMessage(f"question {i} " + "x" * 200),
                AIMessage("", tool_calls=[{"id": f"c{i}", "name": "read", "args": {}}]),
                ToolMessage(f"result {i} " + "r" * 200, tool_call_id=f"c{i}"),
            ]
        return [*out, HumanMessage("THE LATEST QUESTION")]

    def packed(messages: list[BaseMessage], edit: bool) -> list[Any]:
        def estimator(text: str) -> int:
            if edit and len(messages) == 32:
                messages.insert(1, HumanMessage("inserted")) if change == "insert" else messages.pop(1)
            return len(text) // 4

        return [
            (type(m).__name__, m.content) for m in lc.pack_messages(messages, max_tokens=500, estimate_tokens=estimator)
        ]

    assert packed(history(), True) == packed(history(), False)


def test_dropped_ids_remove_exactly_the_dropped_messages() -> None:
    from langgraph.graph.message import add_messages

    messages = max(langchain_corpus(), key=len)
    packed = lc.pack(messages, max_tokens=4_000)
    kept_ids = {m.id for m in packed.messages if m.id is not None}
    removals = [RemoveMessage(id=m.id) for m in messages if m.id not in kept_ids]
    assert len(removals) == packed.pack.dropped > 0
    remaining = add_messages(messages, removals)
    assert [m.id for m in remaining] == [messages[i].id for i in packed.pack.kept]


EDITS = {
    "results cleared": [cf.ClearToolUses(keep=2)],
    "inputs and thinking cleared": [cf.ClearToolUses(keep=2, clear_tool_inputs=True), cf.ClearThinking(keep=1)],
}


def _check_edited(inputs: list[BaseMessage], packed: Any, direct: cf.HandoffPack) -> int:
    """The adapter's output is what packing the dicts gives, as the caller's messages: each
    kept message the caller's own object when no edit changed it, else an edited copy of
    it (same class, same id). Returns how many kept messages were edited."""
    assert packed.pack == direct
    assert lc.to_dicts(packed.messages) == direct.messages
    outputs = [m for m in packed.messages if direct.note is None or m.content != direct.note]
    assert len(outputs) == len(direct.kept)
    edited = 0
    for k, out in zip(direct.kept, outputs, strict=True):
        same = lc.to_dicts([out]) == lc.to_dicts([inputs[k]])
        assert (out is inputs[k]) == same, f"message {k}: {'copied unchanged' if same else 'edit lost'}"
        assert type(out) is type(inputs[k]) and out.id == inputs[k].id
        edited += out is not inputs[k]
    return edited


@pytest.mark.parametrize("edits", EDITS.values(), ids=list(EDITS))
def test_edits_come_back_as_edited_copies_of_the_callers_messages(edits: list[Any]) -> None:
    edited = 0
    for messages in langchain_corpus():
        packed = lc.pack(messages, max_tokens=4_000, edits=edits)
        direct = cf.pack_handoff(lc.to_dicts(messages), target_context_tokens=4_000, edits=edits)
        edited += _check_edited(messages, packed, direct)
        assert lc.pack_messages(messages, max_tokens=4_000, edits=edits) == packed.messages
    assert edited > 30  # the corpus really was edited, not passed through


def test_thinking_blocks_cleared_come_back_in_a_copy() -> None:
    def thought(i: int) -> list[dict[str, Any]]:
        return [
            {"type": "thinking", "thinking": f"step {i} " * 250, "signature": "sig"},
            {"type": "text", "text": "ok"},
        ]

    messages: list[BaseMessage] = [HumanMessage(content="fix the bug", id="h")]
    for i in range(4):
        call = {"id": f"c{i}", "name": "read_file", "args": {"path": f"f{i}.py"}}
        messages.append(AIMessage(content=thought(i), tool_calls=[call], id=f"a{i}"))
        messages.append(ToolMessage(content="x" * 2_000, tool_call_id=f"c{i}", id=f"t{i}"))
        messages.append(HumanMessage(content="go on", id=f"h{i}"))  # a turn each: thinking is cleared by turn
    edits = [cf.ClearThinking(keep=1), cf.ClearToolUses(trigger=1_000, keep=1, clear_tool_inputs=True)]
    packed = lc.pack(messages, max_tokens=3_000, edits=edits)
    direct = cf.pack_handoff(lc.to_dicts(messages), target_context_tokens=3_000, edits=edits)
    assert {e.type for e in direct.applied_edits} == {"clear_thinking", "clear_tool_uses"} and direct.dropped == 0
    assert _check_edited(messages, packed, direct) >= 4
    first = packed.messages[1]
    assert first.content == [{"type": "text", "text": "ok"}] and first.tool_calls[0]["args"] == {}
    assert packed.messages[2].content == "[cleared]" and packed.messages[2].tool_call_id == "c0"
    assert packed.messages[-2] is messages[-2] and packed.messages[-3] is messages[-3]  # the newest kept whole


def test_pack_messages_is_a_runnable_in_a_chain() -> None:
    messages = max(langchain_corpus(), key=len)
    trimmer = lc.pack_messages(max_tokens=3_000, reserve_output_tokens=500)
    assert isinstance(trimmer, Runnable)
    direct = lc.pack_messages(messages, max_tokens=3_000, reserve_output_tokens=500)
    via_runnable = trimmer.invoke(messages)
    assert kept_positions(messages, via_runnable)[0] == kept_positions(messages, direct)[0]
    assert [m.content for m in via_runnable] == [m.content for m in direct]
    prompt = ChatPromptTemplate.from_messages([("system", "You fix bugs."), MessagesPlaceholder("history")])
    chained = (prompt | trimmer).invoke({"history": messages[1:]})
    assert lc.TokenCounter()(chained) <= 2_500
    assert chained[0].content == "You fix bugs."


def test_token_counter_drives_langchain_trim_messages() -> None:
    counter = lc.TokenCounter()
    for messages in langchain_corpus()[:20]:
        assert counter(messages) == cf.tokens_of(lc.to_dicts(messages))
        trimmed = trim_messages(messages, max_tokens=2_000, token_counter=counter, strategy="last")
        assert counter(trimmed) <= 2_000


def test_bad_input_names_the_index() -> None:
    with pytest.raises(cf.MessageTypeError, match="message 1: expected a langchain BaseMessage, got dict"):
        lc.pack([HumanMessage("hi"), {"role": "user", "content": "x"}], max_tokens=100)  # type: ignore[list-item]
    with pytest.raises(
        cf.ArgumentError, match=r"^reserve_output_tokens \(200\) exceeds target_context_tokens \(100\)$"
    ):
        lc.ContextfoldMiddleware(max_tokens=100, reserve_output_tokens=200)


def _nested(depth: int) -> dict[str, Any]:
    deep: dict[str, Any] = {}
    for _ in range(depth):
        deep = {"a": deep}
    return deep


@pytest.mark.parametrize(
    "args",
    [{"when": datetime.datetime(2024, 1, 1)}, {"b": b"x"}, {"n": 10**5000}, _nested(5_000)],
    ids=["datetime", "bytes", "bigint", "deep"],
)
def test_tool_call_arguments_json_cannot_write_name_the_message(args: dict[str, Any]) -> None:
    # A bare TypeError, ValueError or RecursionError from json, naming nothing.
    call = {"id": "c1", "name": "f", "args": args}
    messages = [HumanMessage("task"), AIMessage("", tool_calls=[call]), ToolMessage("r", tool_call_id="c1")]
    for run in (lambda: lc.pack(messages, max_tokens=100), lambda: lc.TokenCounter()(messages)):
        with pytest.raises(cf.MessageValueError, match="message 1, field 'tool_calls': call 0's args") as caught:
            run()
        assert (caught.value.index, caught.value.field) == (1, "tool_calls")


def _agent_transcripts() -> list[list[BaseMessage]]:
    """Three long corpus runs with tool calls (the agent graphs are slower to run), without
    the final submit call that never got a result (LangGraph's agent refuses such a history)."""
    with_tools = [m for m in langchain_corpus() if any(isinstance(x, ToolMessage) for x in m)]
    runs = sorted(with_tools, key=lambda m: -lc.TokenCounter()(m))[:3]
    return [m[:-1] if isinstance(m[-1], AIMessage) and m[-1].tool_calls else m for m in runs]


def _check_model_input(inputs: list[BaseMessage], seen: list[BaseMessage], budget: int) -> None:
    kept, others = kept_positions(inputs, seen)
    assert_segments_whole(_segments(inputs), kept)
    assert len(kept) < len(inputs)  # folded: these runs are far over the budget
    assert len(others) <= 1 + sum(m.type == "system" for m in others)  # the note (and a prompt)
    assert lc.TokenCounter()(seen) <= budget


@tool
def run_shell(command: str) -> str:
    """Runs a shell command in the repository and returns what it printed."""
    return command


def test_agent_middleware_packs_the_model_input_and_keeps_the_state_whole(caplog: pytest.LogCaptureFixture) -> None:
    from langchain.agents import create_agent

    caplog.set_level("INFO", logger="contextfold.adapter")
    schema = cf.estimate_tokens(json.dumps([convert_to_openai_tool(run_shell)], separators=(",", ":")))
    assert lc.tools_tokens([run_shell]) == schema > 20
    for messages in _agent_transcripts():
        model = RecordingChatModel()
        middleware = lc.ContextfoldMiddleware(max_tokens=4_000, reserve_output_tokens=500)
        agent = create_agent(model=model, tools=[run_shell], system_prompt="You fix bugs.", middleware=[middleware])
        state = agent.invoke({"messages": messages})
        assert all(a is b for a, b in zip(state["messages"], messages, strict=False))
        assert len(state["messages"]) == len(messages) + 1  # nothing removed, the answer added
        (seen,) = model.seen
        assert seen[0].content == "You fix bugs."
        _check_model_input(messages, seen, 3_500 - schema)
        # Reported as a gateway counts: the system prompt and the tools' schemas in (as
        # packing counts ``tools=``: a system message holding them).
        report = adapter_reports(caplog)[-1]
        assert (report["route"], report["budget"]) == ("middleware", 3_500)
        assert report["tokens_out"] == lc.TokenCounter()(seen) + schema + 4


def test_agent_middleware_async(caplog: pytest.LogCaptureFixture) -> None:
    from langchain.agents import create_agent

    caplog.set_level("INFO", logger="contextfold.adapter")
    messages = _agent_transcripts()[0]
    model = RecordingChatModel()
    agent = create_agent(model=model, tools=[], middleware=[lc.ContextfoldMiddleware(max_tokens=4_000)])
    state = asyncio.run(agent.ainvoke({"messages": messages}))
    assert len(state["messages"]) == len(messages) + 1
    _check_model_input(messages, model.seen[0], 4_000)
    (report,) = adapter_reports(caplog)
    assert (report["adapter"], report["route"], report["messages_out"]) == (
        "langchain",
        "middleware",
        len(model.seen[0]),
    )


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_each_pack_is_reported_by_its_entry_point(caplog: pytest.LogCaptureFixture) -> None:
    from contextfold.integrations.langgraph import pre_model_hook

    caplog.set_level("INFO", logger="contextfold.adapter")
    messages = max(langchain_corpus(), key=len)
    packed = lc.pack(messages, max_tokens=2_000)
    assert packed.pack.dropped > 0 and len(packed.messages) < len(messages)
    sent = lc.pack_messages(messages, max_tokens=2_000)
    hooked = pre_model_hook(max_tokens=2_000)({"messages": messages})["llm_input_messages"]
    whole = lc.pack_messages(messages[:2], max_tokens=100_000)
    reports = adapter_reports(caplog)
    assert reports == [
        expected_report(packed.pack, "langchain", "pack", len(packed.messages)),
        expected_report(packed.pack, "langchain", "pack_messages", len(sent)),
        expected_report(packed.pack, "langgraph", "pre_model_hook", len(hooked)),
        expected_report(lc.pack(messages[:2], max_tokens=100_000).pack, "langchain", "pack_messages", len(whole)),
    ]
    assert reports[0]["folded"] and reports[0]["tokens_in"] is None and reports[0]["messages_in"] == len(messages)
    assert not reports[3]["folded"] and reports[3]["tokens_in"] == reports[3]["tokens_out"]


def test_telemetry_never_fails_a_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from contextfold.integrations import _report

    messages = max(langchain_corpus(), key=len)
    expected = lc.pack(messages, max_tokens=2_000).messages

    def broken(record: logging.LogRecord) -> bool:
        raise RuntimeError("a logging filter that fails")

    adapter_log = logging.getLogger("contextfold.adapter")
    monkeypatch.setattr(adapter_log, "level", logging.INFO)
    adapter_log.addFilter(broken)
    try:
        assert lc.pack(messages, max_tokens=2_000).messages == expected
    finally:
        adapter_log.removeFilter(broken)
    # Nobody listening (no record enabled, no span): no report is made at all.
    monkeypatch.setattr(adapter_log, "level", logging.ERROR)
    monkeypatch.setattr(_report.PackReport, "of", None)  # calling it would raise
    assert lc.pack(messages, max_tokens=2_000).messages == expected


def test_a_pack_is_set_on_the_current_span() -> None:
    trace = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is in the integrations extra")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    messages = max(langchain_corpus(), key=len)
    with provider.get_tracer("test").start_as_current_span("agent step"):
        pack = lc.pack(messages, max_tokens=2_000).pack
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes["contextfold.adapter"] == "langchain" and attributes["contextfold.route"] == "pack"
    assert attributes["contextfold.dropped"] == pack.dropped > 0 and attributes["contextfold.tokens_out"] == pack.tokens
    assert "contextfold.model" not in attributes and "contextfold.tokens_in" not in attributes  # None: not set


def test_langgraph_pre_model_hook_sends_llm_input_messages() -> None:
    from contextfold.integrations.langgraph import pre_model_hook
    from langgraph.prebuilt import create_react_agent

    for messages in _agent_transcripts():
        model = RecordingChatModel()
        hook = pre_model_hook(max_tokens=4_000)
        agent = create_react_agent(model, tools=[], pre_model_hook=hook)
        state = agent.invoke({"messages": messages})
        assert all(a is b for a, b in zip(state["messages"], messages, strict=False))
        assert len(state["messages"]) == len(messages) + 1
        _check_model_input(messages, model.seen[0], 4_000)
        assert hook({"messages": messages})["llm_input_messages"] == model.seen[0]


def test_conversion_keeps_calls_whose_arguments_did_not_parse() -> None:
    messages: list[Any] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "not json"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    converted = lc.to_dicts(to_langchain(messages))
    assert converted[1]["tool_calls"][0]["function"] == {"name": "run", "arguments": "not json"}
    assert converted[2] == {"role": "tool", "content": "ok", "tool_call_id": "c1"}


# Review findings ------------------------------------------------------------------------


def test_a_compaction_block_is_kept_and_what_precedes_it_goes_first() -> None:
    # ChatAnthropic returns Anthropic's compaction as a block of an AIMessage's content; the
    # API drops what precedes it, so packing must keep it and drop that first.
    messages: list[BaseMessage] = [
        HumanMessage("task"),
        AIMessage([{"type": "compaction", "content": "SUMMARY of everything so far " * 10}]),
        HumanMessage("more " * 300),
        AIMessage("reply " * 300),
        HumanMessage("now do the thing"),
    ]
    packed = lc.pack(messages, max_tokens=700)
    assert packed.pack.kept == [1, 3, 4] and packed.messages[0] is messages[1]
    assert "SUMMARY" not in (packed.pack.note or "") and "task" not in (packed.pack.note or "")
    assert packed.pack == cf.pack_handoff(lc.to_dicts(messages), target_context_tokens=700, shape="openai")


def test_a_shape_other_than_the_conversions_is_refused() -> None:
    # The messages are converted to the OpenAI pairing: another shape cannot apply.
    with pytest.raises(cf.ArgumentError, match="langchain packs its messages as shape='openai'"):
        lc.pack([HumanMessage("hi")], max_tokens=100, shape="anthropic")
    assert lc.pack([HumanMessage("hi")], max_tokens=100, shape="openai").pack.kept == [0]


def test_inputs_cleared_in_tool_use_blocks_are_cleared_in_the_calls_too() -> None:
    # ChatAnthropic's AIMessage holds a call twice: a tool_use block and a tool_calls entry.
    messages: list[BaseMessage] = [HumanMessage("go")]
    for i in range(4):
        args = {"path": "x" * 300}
        block = {"type": "tool_use", "id": f"c{i}", "name": "read", "input": args}
        messages += [
            AIMessage([block], tool_calls=[{"id": f"c{i}", "name": "read", "args": args}]),
            ToolMessage("r" * 800, tool_call_id=f"c{i}"),
        ]
    edits = [cf.ClearToolUses(trigger=1, keep=1, clear_tool_inputs=True)]
    # Small steps: the cleared boundary moves every 50 tokens.
    packed = lc.pack(messages, max_tokens=100_000, edits=edits, cut="chunked", chunk_tokens=50)
    assert packed.pack.applied_edits[0].cleared_tool_uses == 3
    for k in (1, 3, 5):
        out = packed.messages[k]
        assert out.content[0]["input"] == {} and out.tool_calls[0]["args"] == {}, k
        assert out.tool_calls[0]["id"] == messages[k].tool_calls[0]["id"]  # type: ignore[attr-defined]
    assert packed.messages[7] is messages[7]  # the newest use kept whole


def _model_input(middleware: lc.ContextfoldMiddleware, request: Any) -> list[BaseMessage]:
    seen: list[list[BaseMessage]] = []
    middleware.wrap_model_call(request, lambda given: seen.append(given.messages))
    return seen[0]


def test_middleware_counts_the_system_prompt_and_tools_as_packing_does() -> None:
    # A trigger counts what packing counts: the system prompt and tool schemas included.
    from langchain.agents.middleware.types import ModelRequest
    from langchain_core.messages import SystemMessage

    messages: list[BaseMessage] = [HumanMessage("go")]
    for i in range(4):
        messages += [
            AIMessage("", tool_calls=[{"id": f"c{i}", "name": "run_shell", "args": {}}]),
            ToolMessage("r" * 400, tool_call_id=f"c{i}"),
        ]
    system = SystemMessage("s " * 1_000)
    edits = [cf.ClearToolUses(trigger=600, keep=1)]  # the messages alone are under 600
    assert lc.TokenCounter()(messages) < 600
    steps: dict[str, Any] = {"cut": "chunked", "chunk_tokens": 50}  # the boundary moves every 50 tokens
    middleware = lc.ContextfoldMiddleware(max_tokens=100_000, edits=edits, **steps)
    request = ModelRequest(model=RecordingChatModel(), messages=messages, system_message=system, tools=[run_shell])
    seen = _model_input(middleware, request)
    schemas = [convert_to_openai_tool(run_shell)]
    direct = cf.pack_handoff(
        lc.to_dicts(messages), system=system.content, tools=schemas, target_context_tokens=100_000, edits=edits, **steps
    )
    assert direct.applied_edits[0].cleared_tool_uses == 3
    assert lc.to_dicts(seen) == direct.messages


def test_pins_past_a_short_history_hold_once_it_reaches_them() -> None:
    # An agent's first calls see fewer messages than a pin names: the pin waits for them.
    from contextfold.integrations.langgraph import pre_model_hook
    from langchain.agents.middleware.types import ModelRequest

    short: list[BaseMessage] = [HumanMessage("first task")]
    long = [HumanMessage("pinned " * 200), AIMessage("a " * 600), HumanMessage("b " * 600), HumanMessage("now?")]
    hook = pre_model_hook(max_tokens=700, pinned=[0])
    middleware = lc.ContextfoldMiddleware(max_tokens=700, pinned=[3])
    assert hook({"messages": []})["llm_input_messages"] == []
    assert lc.pack(short, max_tokens=700, pinned=[2]).messages == short
    assert _model_input(middleware, ModelRequest(model=RecordingChatModel(), messages=short)) == short
    assert any(m is long[0] for m in hook({"messages": long})["llm_input_messages"])
    assert 0 not in lc.pack(long, max_tokens=700).pack.kept  # what the pin holds


def test_middleware_takes_a_tool_dict_as_its_json_is_sent() -> None:
    # A hand-written schema holding a tuple is sent as JSON by the provider's client: it is
    # counted as that JSON, not refused.
    from langchain.agents.middleware.types import ModelRequest

    required = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ("path",)}
    tool = {"type": "function", "function": {"name": "read", "parameters": required}}
    middleware = lc.ContextfoldMiddleware(max_tokens=1_000)
    messages: list[BaseMessage] = [HumanMessage("hi")]
    seen = _model_input(middleware, ModelRequest(model=RecordingChatModel(), messages=messages, tools=[tool]))
    assert seen == messages
    sent = json.loads(json.dumps(tool))
    assert lc.tools_tokens([tool]) == cf.estimate_tokens(json.dumps([sent], separators=(",", ":")))


def test_a_shape_other_than_the_conversions_fails_when_the_adapter_is_built() -> None:
    from contextfold.integrations.langgraph import pre_model_hook

    with pytest.raises(cf.ArgumentError, match="langchain packs its messages as shape='openai'"):
        lc.ContextfoldMiddleware(max_tokens=100, shape="responses")
    with pytest.raises(cf.ArgumentError, match="langchain packs its messages"):
        lc.pack_messages(max_tokens=100, shape="anthropic")
    with pytest.raises(cf.ArgumentError, match="langgraph packs its messages as shape='openai'"):
        pre_model_hook(max_tokens=100, shape="anthropic")


def test_streamed_chunks_pack_as_the_messages_they_are() -> None:
    # Every *MessageChunk was refused ("cannot pack a 'AIMessageChunk' message"), where
    # LangChain's own trim_messages and converters take them: streaming produces them.
    from langchain_core.messages import (
        AIMessageChunk,
        ChatMessage,
        ChatMessageChunk,
        HumanMessageChunk,
        SystemMessage,
        SystemMessageChunk,
        ToolMessageChunk,
    )

    call = {"name": "read_file", "args": {"path": "a.py"}, "id": "c1", "type": "tool_call"}
    plain = [
        SystemMessage("be brief"),
        HumanMessage("read a.py"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("x" * 2_000, tool_call_id="c1"),
        ChatMessage("and now?", role="user"),
    ]
    chunks = [
        SystemMessageChunk("be brief"),
        HumanMessageChunk("read a.py"),
        AIMessageChunk("") + AIMessageChunk("", tool_calls=[call]),
        ToolMessageChunk("x" * 2_000, tool_call_id="c1"),
        ChatMessageChunk("and now?", role="user"),
    ]
    assert lc.to_dicts(chunks) == lc.to_dicts(plain)
    packed, expected = lc.pack(chunks, max_tokens=300), lc.pack(plain, max_tokens=300)
    assert packed.pack == expected.pack and packed.pack.dropped > 0
    assert [m for m in packed.messages if m in chunks] == [chunks[k] for k in packed.pack.kept]


def test_an_iterator_of_messages_is_read_once() -> None:
    # It was read to convert it, then again, empty, to map the pack back: a raw IndexError.
    messages = max(langchain_corpus(), key=len)
    expected = lc.pack(messages, max_tokens=2_000)
    packed = lc.pack(iter(messages), max_tokens=2_000)
    assert packed.pack == expected.pack and packed.messages == expected.messages
    assert lc.pack_messages((m for m in messages), max_tokens=2_000) == expected.messages
    with pytest.raises(cf.ArgumentTypeError, match="messages must be an iterable of messages, not a str"):
        lc.pack("hello", max_tokens=2_000)  # type: ignore[arg-type]


def test_a_tracer_that_raises_fails_no_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    # The current span was looked up outside the guard that keeps telemetry from failing a pack.
    from contextfold.integrations import _report

    class Broken:
        def get_current_span(self) -> Any:
            raise RuntimeError("a tracer that fails")

    messages = max(langchain_corpus(), key=len)
    expected = lc.pack(messages, max_tokens=2_000).messages
    monkeypatch.setattr(_report, "_opentelemetry_trace", lambda: Broken())
    assert lc.pack(messages, max_tokens=2_000).messages == expected


def test_langgraph_pre_model_hook_reads_a_pydantic_state() -> None:
    # A state_schema of a pydantic model (AgentStatePydantic) failed: 'not subscriptable'.
    from contextfold.integrations.langgraph import pre_model_hook
    from pydantic import BaseModel

    class State(BaseModel):
        messages: list[Any]

    messages = max(langchain_corpus(), key=len)
    hook = pre_model_hook(max_tokens=2_000)
    assert hook(State(messages=messages))["llm_input_messages"] == hook({"messages": messages})["llm_input_messages"]  # type: ignore[arg-type]


def test_an_edited_streamed_call_stays_emptied_when_rebuilt() -> None:
    # A chunk's calls are made again from its tool_call_chunks (validating a dump, adding
    # chunks): the copy emptied tool_calls and kept the chunks' arguments, which came back.
    from langchain_core.messages import AIMessageChunk, ToolMessageChunk

    messages: list[BaseMessage] = [HumanMessage("go")]
    for i in range(3):
        arguments = json.dumps({"path": f"a{i}.py" * 50})
        chunk = {"name": "read", "args": arguments, "id": f"c{i}", "index": 0, "type": "tool_call_chunk"}
        messages += [
            AIMessageChunk(content="", tool_call_chunks=[chunk]),
            ToolMessageChunk("x" * 500, tool_call_id=f"c{i}"),
        ]
    edits = [cf.ClearToolUses(trigger=1, keep=1, clear_tool_inputs=True)]
    packed = lc.pack(messages, max_tokens=100_000, edits=edits, chunk_tokens=50)  # clears in steps of 50
    emptied = [m for m in packed.messages if isinstance(m, AIMessageChunk) and m is not messages[5]]
    assert len(emptied) == 2 and all(m.tool_calls[0]["args"] == {} for m in emptied)
    for m in emptied:
        assert type(m).model_validate(m.model_dump()).tool_calls[0]["args"] == {}
        assert (m + AIMessageChunk(content="")).tool_calls[0]["args"] == {}


def test_what_is_no_list_of_messages_is_refused_by_name() -> None:
    # A dict iterated as its keys ("message 0: ... got str"), one message as its fields
    # ("got tuple"), and a state without messages raised a raw KeyError or AttributeError.
    from contextfold.integrations.langgraph import pre_model_hook

    for given, words in (
        ({"role": "user", "content": "hi"}, "not a dict"),
        (HumanMessage("hi"), "not one HumanMessage"),
    ):
        with pytest.raises(cf.ArgumentTypeError, match=f"^messages must be an iterable of messages, {words}$"):
            lc.pack(given, max_tokens=100)  # type: ignore[arg-type]
    hook = pre_model_hook(max_tokens=100)
    for state in ({"other": []}, object()):
        with pytest.raises(cf.ArgumentError, match=r"^pre_model_hook: the state \(\w+\) holds no messages$"):
            hook(state)
