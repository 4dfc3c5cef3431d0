"""Pydantic AI history processor on corpus transcripts as real ModelMessage objects."""

# ruff: noqa: E402  (the framework imports follow the check that it is installed)

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import re
from typing import Any

import contextfold as cf
import pytest

from ..conftest import openai_corpus
from . import adapter_reports, expected_report, need
from .pairing import content_text, kept_positions

pai = need("contextfold.integrations.pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


def to_pydantic_ai(messages: list[dict[str, Any]]) -> list[ModelMessage]:
    """Corpus dicts as Pydantic AI messages: a run of tool results is one ModelRequest."""
    out: list[ModelMessage] = []
    names: dict[str, str] = {}
    for m in messages:
        if m["role"] == "system":
            out.append(ModelRequest(parts=[SystemPromptPart(content=content_text(m["content"]))]))
        elif m["role"] == "user":
            out.append(ModelRequest(parts=[UserPromptPart(content=content_text(m["content"]))]))
        elif m["role"] == "assistant":
            parts: list[Any] = [TextPart(content=content_text(m["content"]))] if content_text(m["content"]) else []
            for c in m.get("tool_calls") or []:
                names[c["id"]] = c["function"]["name"]
                parts.append(ToolCallPart(c["function"]["name"], c["function"]["arguments"], tool_call_id=c["id"]))
            out.append(ModelResponse(parts=parts or [TextPart(content="")]))
        else:
            call = m.get("tool_call_id") or ""
            part = ToolReturnPart(names.get(call, "tool"), content_text(m["content"]), tool_call_id=call)
            previous = out[-1] if out else None
            if isinstance(previous, ModelRequest) and all(isinstance(p, ToolReturnPart) for p in previous.parts):
                out[-1] = ModelRequest(parts=[*previous.parts, part])
            else:
                out.append(ModelRequest(parts=[part]))
    return out


def corpus() -> list[list[ModelMessage]]:
    return [to_pydantic_ai(messages) for messages in openai_corpus()]


def calls(message: ModelMessage) -> bool:
    return isinstance(message, ModelResponse) and any(isinstance(p, ToolCallPart) for p in message.parts)


def returns(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in message.parts)


def check(inputs: list[ModelMessage], outputs: list[ModelMessage], pack: cf.HandoffPack) -> None:
    kept, others = kept_positions(inputs, outputs)
    assert kept == pack.kept == sorted(kept)
    chosen = set(kept)
    for i, message in enumerate(inputs):  # a call and the request answering it: both or neither
        if calls(message) and i + 1 < len(inputs) and returns(inputs[i + 1]):
            assert (i in chosen) == (i + 1 in chosen), f"tool pair {i}, {i + 1} split"
    assert len(others) == (pack.note is not None)
    prompts = [
        i for i, m in enumerate(inputs) if isinstance(m, ModelRequest) and isinstance(m.parts[-1], UserPromptPart)
    ]
    if prompts:
        assert prompts[-1] in chosen
    if inputs and isinstance(inputs[0].parts[0], SystemPromptPart):
        assert outputs[0] is inputs[0]


@pytest.mark.parametrize("budget", [800, 3_000])
def test_history_processor_returns_the_original_objects_with_pairs_whole(budget: int) -> None:
    folded = 0
    for messages in corpus():
        packed = pai.pack(messages, max_tokens=budget)
        check(messages, packed.messages, packed.pack)
        if packed.pack.fits:
            assert cf.tokens_of(pai.to_dicts(packed.messages)) <= budget
        folded += packed.pack.dropped > 0
        processed = pai.history_processor(max_tokens=budget)(messages)
        assert kept_positions(messages, processed)[0] == packed.pack.kept
    assert folded >= 10


@pytest.mark.parametrize(
    "edits",
    [[cf.ClearToolUses(keep=1)], [cf.ClearThinking(keep=1), cf.ClearToolUses(keep=1, clear_tool_inputs=True)]],
    ids=["results cleared", "inputs and thinking cleared"],
)
def test_edits_come_back_as_edited_copies_of_the_callers_messages(edits: list[Any]) -> None:
    """What the processor returns is what packing the dicts gives, as the caller's messages:
    a kept message no edit changed is the caller's object, an edited one a copy with the
    edited parts replaced (a thinking part removed, a result's content or a call's
    arguments cleared)."""
    thoughtful: list[ModelMessage] = []  # four turns, each thinking before a call
    for i in range(4):
        thoughtful.append(ModelRequest(parts=[UserPromptPart(content=f"step {i}")]))
        call = ToolCallPart("read_file", {"path": f"f{i}.py"}, tool_call_id=f"c{i}")
        thoughtful.append(ModelResponse(parts=[ThinkingPart(content="hmm " * 500), TextPart(content="ok"), call]))
        thoughtful.append(ModelRequest(parts=[ToolReturnPart("read_file", "x" * 2_000, tool_call_id=f"c{i}")]))
    # A retry, as each major version writes it: sent with an instruction to fix the call,
    # or as an error; cleared, each was sent otherwise than it was sized.
    retried = ToolCallPart("read_file", {"path": "gone.py"}, tool_call_id="r0")
    thoughtful[3:3] = [
        ModelResponse(parts=[retried]),
        ModelRequest(parts=[_retry("read_file", "no such file " * 50, "r0")]),
    ]
    corpus_runs = [*corpus(), thoughtful]
    edited = 0
    for messages in corpus_runs:
        packed = pai.pack(messages, max_tokens=4_000, edits=edits)
        direct = cf.pack_handoff(pai.to_dicts(messages), target_context_tokens=4_000, shape="anthropic", edits=edits)
        assert packed.pack == direct
        sent = pai.to_dicts(packed.messages)
        assert sent == direct.messages
        outputs = [
            m for m, d in zip(packed.messages, sent, strict=True) if direct.note is None or d["content"] != direct.note
        ]
        assert len(outputs) == len(direct.kept)
        for k, out in zip(direct.kept, outputs, strict=True):
            same = pai.to_dicts([out]) == pai.to_dicts([messages[k]])
            assert (out is messages[k]) == same, f"message {k}: {'copied unchanged' if same else 'edit lost'}"
            assert type(out) is type(messages[k])
            edited += out is not messages[k]
    assert edited > 30  # the corpus really was edited, not passed through
    assert any(e.type == "clear_thinking" for e in direct.applied_edits) == (len(edits) == 2)


def _retry(tool_name: str, content: str, tool_call_id: str) -> Any:
    """A tool call's retry: a ToolReturnPart whose outcome says so (pydantic-ai 2), else the
    RetryPromptPart pydantic-ai 1 has (deprecated in 2)."""
    if "outcome" in {f.name for f in dataclasses.fields(ToolReturnPart)}:
        return ToolReturnPart(tool_name, content, tool_call_id=tool_call_id, outcome="retried")
    from pydantic_ai.messages import RetryPromptPart

    return RetryPromptPart(content, tool_name=tool_name, tool_call_id=tool_call_id)


def test_each_pack_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="contextfold.adapter")
    messages = max(corpus(), key=len)
    packed = pai.pack(messages, max_tokens=800)
    processed = pai.history_processor(max_tokens=800)(messages)
    assert packed.pack.dropped > 0
    assert adapter_reports(caplog) == [
        expected_report(packed.pack, "pydantic-ai", "pack", len(packed.messages)),
        expected_report(packed.pack, "pydantic-ai", "history_processor", len(processed)),
    ]


def test_async_processor_matches_the_sync_one() -> None:
    messages = max(corpus(), key=len)
    sync = pai.history_processor(max_tokens=2_000)(messages)
    via_async = asyncio.run(pai.async_history_processor(max_tokens=2_000)(messages))
    assert kept_positions(messages, sync)[0] == kept_positions(messages, via_async)[0]


def agent_with(model: FunctionModel, processor: Any) -> Agent[None, str]:
    """An agent running ``processor`` on its history: ``history_processors=`` (Pydantic AI 1.x)
    or the ``ProcessHistory`` capability that replaced it."""
    if "history_processors" in inspect.signature(Agent.__init__).parameters:
        return Agent(model, history_processors=[processor])
    from pydantic_ai.capabilities import ProcessHistory

    return Agent(model, capabilities=[ProcessHistory(processor)])


def test_agent_sends_the_model_the_packed_history() -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart(content="done")])

    history = max((m for m in corpus() if any(returns(x) for x in m)), key=len)
    if isinstance(history[-1], ModelResponse) and calls(history[-1]):
        history = history[:-1]  # the run's final call never got a result
    for processor in (pai.history_processor(max_tokens=3_000), pai.async_history_processor(max_tokens=3_000)):
        seen.clear()
        agent = agent_with(FunctionModel(model), processor)
        result = agent.run_sync("And now summarise what you did.", message_history=history)
        assert result.output == "done"
        (sent,) = seen
        kept, others = kept_positions(history, sent)
        assert 0 < len(kept) < len(history) and kept == sorted(kept)
        assert len(others) == 2  # the note and the new prompt
        assert cf.tokens_of(pai.to_dicts(sent)) <= 3_000


def test_the_packed_history_becomes_the_runs_stored_history() -> None:
    """What docs/integrations.md warns of: Pydantic AI keeps the processor's output as the
    run's history, so ``all_messages()`` after a folded run is the packed list, not the input."""
    history = max((m for m in corpus() if any(returns(x) for x in m)), key=len)
    if isinstance(history[-1], ModelResponse) and calls(history[-1]):
        history = history[:-1]
    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart(content="done")]))
    result = agent_with(model, pai.history_processor(max_tokens=3_000)).run_sync("Go on.", message_history=history)
    stored = result.all_messages()
    assert cf.tokens_of(pai.to_dicts(history)) > 3_000
    assert len(stored) < len(history)  # the run's history is now the packed one, plus the new turn
    assert any(
        str(getattr(p, "content", "")).startswith("Earlier conversation, folded") for m in stored for p in m.parts
    )


def test_bad_input_names_the_index() -> None:
    with pytest.raises(cf.MessageTypeError, match="message 1: expected a pydantic_ai ModelRequest"):
        pai.pack([ModelRequest(parts=[UserPromptPart("hi")]), {"role": "user"}], max_tokens=100)  # type: ignore[list-item]


def test_a_part_that_cannot_be_sent_names_its_message() -> None:
    # A text that is no str failed in str.join, content pydantic cannot serialise with
    # its own error: neither named the message.
    class Opaque:
        pass

    hello = ModelRequest(parts=[UserPromptPart("hi")])
    for bad, error, words in (
        (
            ModelResponse(parts=[TextPart(content=None)]),
            cf.MessageTypeError,
            "part 0's text must be a str, got NoneType",
        ),  # type: ignore[arg-type]
        (
            ModelResponse(parts=[TextPart("a"), TextPart(content=5)]),
            cf.MessageTypeError,
            "part 1's text must be a str, got int",
        ),  # type: ignore[arg-type]
        (
            ModelRequest(parts=[ToolReturnPart(tool_name="t", content=Opaque(), tool_call_id="a")]),
            cf.MessageValueError,
            "part 0 cannot be written as it is sent: ",
        ),
    ):
        with pytest.raises(error, match=f"^message 1, field 'content': {re.escape(words)}") as raised:
            pai.pack([hello, bad], max_tokens=100)
        assert (raised.value.index, raised.value.field) == (1, "content")


def test_arguments_are_sized_as_sent() -> None:
    call = ToolCallPart("run", json.dumps({"cmd": "ls"}), tool_call_id="c1")
    (as_dict,) = pai.to_dicts([ModelResponse(parts=[TextPart("Listing."), call])])
    assert as_dict["content"] == [
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "c1", "name": "run", "input": '{"cmd": "ls"}'},
    ]
    (text_only,) = pai.to_dicts([ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("Hi.")])])
    assert text_only == {"role": "system", "content": "Be brief.\n\nHi."}


def test_pins_past_a_short_history_hold_once_it_reaches_them() -> None:
    # A run's first calls see fewer messages than a pin names: the pin waits for them.
    processor = pai.history_processor(max_tokens=700, pinned=[0, 5])
    first = [ModelRequest(parts=[UserPromptPart("first task")])]
    assert processor(first) == first
    assert asyncio.run(pai.async_history_processor(max_tokens=700, pinned=[5])(first)) == first
    longer = [
        ModelRequest(parts=[UserPromptPart("pinned " * 200)]),
        ModelResponse(parts=[TextPart("a " * 600)]),
        ModelRequest(parts=[UserPromptPart("b " * 600)]),
        ModelResponse(parts=[TextPart("c " * 10)]),
        ModelRequest(parts=[UserPromptPart("now?")]),
    ]
    assert any(m is longer[0] for m in processor(longer))
    assert 0 not in pai.pack(longer, max_tokens=700).pack.kept  # what the pin holds


def test_a_shape_other_than_the_conversions_is_refused() -> None:
    with pytest.raises(cf.ArgumentError, match="pydantic-ai packs its messages as shape='anthropic'"):
        pai.pack([ModelRequest(parts=[UserPromptPart("hi")])], max_tokens=100, shape="openai")


def test_a_shape_other_than_the_conversions_fails_when_the_processor_is_built() -> None:
    with pytest.raises(cf.ArgumentError, match="pydantic-ai packs its messages as shape='anthropic'"):
        pai.history_processor(max_tokens=100, shape="openai")
    with pytest.raises(cf.ArgumentError, match="pydantic-ai packs its messages"):
        pai.async_history_processor(max_tokens=100, shape="responses")


def test_a_built_in_tools_call_and_return_are_sized_as_sent() -> None:
    # A provider-run tool (web search, code execution) comes back as a part of its own kind
    # holding a list, and its call holds args: each was sized as an empty text, so a
    # history far over the window was kept whole and reported fitting (helper-85).
    import pydantic_ai.messages as pm

    call_part = getattr(pm, "NativeToolCallPart", None) or pm.BuiltinToolCallPart
    return_part = getattr(pm, "NativeToolReturnPart", None) or pm.BuiltinToolReturnPart
    found = [{"title": f"result {i}", "content": "lorem ipsum " * 500} for i in range(20)]
    response = ModelResponse(
        parts=[
            call_part(tool_name="web_search", args={"query": "ipsum " * 400}, tool_call_id="b1"),
            return_part(tool_name="web_search", content=found, tool_call_id="b1"),
            TextPart("found it"),
        ]
    )
    call, returned = pai.to_dicts([response])[0]["content"][:2]
    assert len(call["text"]) > 2_400 and json.loads(returned["text"]) == found
    history = [ModelRequest(parts=[UserPromptPart("search")]), response, ModelRequest(parts=[UserPromptPart("next")])]
    packed, pack = pai.pack(history, max_tokens=1_000)
    assert response not in packed and pack.dropped == 2 and pack.fits
