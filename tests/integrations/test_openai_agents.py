"""OpenAI Agents SDK input filter on corpus runs as the SDK's own input items, and in a real run."""

# ruff: noqa: E402  (the framework imports follow the check that it is installed)

from __future__ import annotations

import asyncio
import copy
import json
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import contextfold as cf
import pytest

from ..conftest import openai_corpus
from . import adapter_reports, expected_report, need
from .pairing import content_text, kept_positions

oa = need("contextfold.integrations.openai_agents", "openai-agents")

from agents import (
    Agent,
    ItemHelpers,
    MessageOutputItem,
    ModelResponse,
    ModelSettings,
    ReasoningItem,
    RunConfig,
    Runner,
    ToolCallItem,
    ToolCallOutputItem,
    Usage,
    function_tool,
    handoff,
)
from agents.models.interface import Model
from agents.run import CallModelData, ModelInputData
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_reasoning_item import ResponseReasoningItem, Summary


@function_tool
def read_file(path: str) -> str:
    """Reads a file of the repository."""
    return f"contents of {path}"


AGENT: Agent[Any] = Agent(name="coder", instructions="unused: the filter gets the instructions", tools=[read_file])


def to_sdk_items(messages: list[dict[str, Any]]) -> tuple[str | None, list[Any]]:
    """A corpus transcript as the SDK builds a model call: the leading system message as the
    instructions; each turn as the input item of the run item the SDK makes of it (an
    assistant's text before its tool calls as a reasoning item, as a reasoning model's)."""
    instructions = content_text(messages[0]["content"]) if messages and messages[0]["role"] == "system" else None
    items: list[Any] = []
    calls: dict[str, ResponseFunctionToolCall] = {}
    for n, m in enumerate(messages[1:] if instructions is not None else messages):
        text, tool_calls = content_text(m["content"]), m.get("tool_calls") or []
        if m["role"] in ("system", "user"):
            role = "developer" if m["role"] == "system" else "user"
            items.extend(ItemHelpers.input_to_new_input_list([{"role": role, "content": text}]))
        elif m["role"] == "assistant" and tool_calls:
            if text:
                summary = [Summary(text=text, type="summary_text")]
                reasoning = ResponseReasoningItem(id=f"rs_{n}", summary=summary, type="reasoning")
                items.append(ReasoningItem(agent=AGENT, raw_item=reasoning).to_input_item())
            for c in tool_calls:
                call = ResponseFunctionToolCall(
                    arguments=c["function"]["arguments"],
                    call_id=c["id"],
                    name=c["function"]["name"],
                    type="function_call",
                )
                calls[c["id"]] = call
                items.append(ToolCallItem(agent=AGENT, raw_item=call).to_input_item())
        elif m["role"] == "assistant":
            part = ResponseOutputText(annotations=[], text=text, type="output_text")
            message = ResponseOutputMessage(
                id=f"msg_{n}", content=[part], role="assistant", status="completed", type="message"
            )
            items.append(MessageOutputItem(agent=AGENT, raw_item=message).to_input_item())
        else:
            call = calls.get(m.get("tool_call_id") or "") or ResponseFunctionToolCall(
                arguments="", call_id=m.get("tool_call_id") or "", name="tool", type="function_call"
            )
            output = ItemHelpers.tool_call_output_item(call, text)
            items.append(ToolCallOutputItem(agent=AGENT, raw_item=output, output=text).to_input_item())
    return instructions, items


def corpus() -> list[tuple[str | None, list[Any]]]:
    return [to_sdk_items(messages) for messages in openai_corpus()]


def call_data(items: list[Any], instructions: str | None, agent: Agent[Any] = AGENT) -> CallModelData[Any]:
    return CallModelData(model_data=ModelInputData(input=items, instructions=instructions), agent=agent, context=None)


def kind(item: Any) -> str:
    return str(item.get("type") if isinstance(item, dict) else item.type)


def together(items: list[Any]) -> list[list[int]]:
    """Index groups that must be kept or dropped whole: a call, its reasoning before it, and
    everything up to its output (the first output after it with its ``call_id``)."""
    groups: list[list[int]] = []
    for k, item in enumerate(items):
        if kind(item) != "function_call":
            continue
        start = k
        while start > 0 and kind(items[start - 1]) == "reasoning":
            start -= 1
        end = next(
            (
                o
                for o in range(k + 1, len(items))
                if kind(items[o]) == "function_call_output" and items[o]["call_id"] == item["call_id"]
            ),
            k,
        )
        groups.append(list(range(start, end + 1)))
    return groups


def sent_tokens(items: list[Any], instructions: str | None, tools: list[dict[str, Any]]) -> int:
    """What the model call costs, counted apart from the packer: items, instructions, tools."""
    total = cf.tokens_of(items)
    if instructions is not None:
        total += cf.message_tokens({"role": "system", "content": instructions})
    return total + (cf.message_tokens({"role": "system", "content": tools}) if tools else 0)


def check(items: list[Any], instructions: str | None, out: list[Any], pack: cf.HandoffPack, budget: int) -> None:
    kept, others = kept_positions(items, out)
    assert kept == pack.kept == sorted(kept)
    chosen = set(kept)
    for group in together(items):
        assert all(i in chosen for i in group) or not any(i in chosen for i in group), f"exchange {group} split"
    users = [i for i, item in enumerate(items) if item.get("role") == "user"]
    if users:
        assert users[-1] in chosen, "the latest user message was dropped"
    assert len(others) == (pack.note is not None)
    if pack.note is not None:
        (note,) = others
        assert note == {"type": "message", "role": note["role"], "content": pack.note}
    if pack.fits:
        assert sent_tokens(out, instructions, oa.agent_tools(AGENT)) == pack.tokens <= budget


@pytest.mark.parametrize("budget", [1_500, 4_000])
def test_filter_returns_the_sdks_own_items_with_exchanges_whole(budget: int) -> None:
    folded = 0
    for instructions, items in corpus():
        before = copy.deepcopy(items)
        given = list(items)
        result = oa.InputFilter(target_context_tokens=budget)(call_data(given, instructions))
        assert isinstance(result, ModelInputData) and result.instructions == instructions
        assert given == items == before, "the filter changed the SDK's list or an item"
        packed = oa.InputFilter(target_context_tokens=budget).pack(items, instructions=instructions, agent=AGENT)
        check(items, instructions, result.input, packed.pack, budget)
        assert result.input == packed.messages and kept_positions(items, result.input)[0] == packed.pack.kept
        folded += packed.pack.dropped > 0
    assert folded >= 10


def test_each_pack_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="contextfold.adapter")
    instructions, items = max(corpus(), key=lambda run: len(run[1]))
    result = oa.InputFilter(target_context_tokens=1_500)(call_data(list(items), instructions))
    packed = oa.InputFilter(target_context_tokens=1_500).pack(items, instructions=instructions, agent=AGENT)
    assert packed.pack.dropped > 0
    expected = expected_report(packed.pack, "openai-agents", "call_model_input_filter", len(result.input))
    assert adapter_reports(caplog) == [expected, expected]


def test_instructions_and_the_agents_tools_count_against_the_window() -> None:
    instructions, items = max(corpus(), key=lambda run: len(run[1]))
    bare = oa.InputFilter(target_context_tokens=3_000, tools=None).pack(items)
    full = oa.InputFilter(target_context_tokens=3_000).pack(items, instructions=instructions, agent=AGENT)
    (tool,) = oa.agent_tools(AGENT)
    assert tool["name"] == "read_file" and tool["type"] == "function" and "path" in json.dumps(tool["parameters"])
    assert full.pack.fits and full.pack.tokens <= 3_000
    room = cf.message_tokens({"role": "system", "content": instructions}) + cf.message_tokens(
        {"role": "system", "content": [tool]}
    )
    assert cf.tokens_of(full.messages) + room == full.pack.tokens
    assert cf.tokens_of(bare.messages) == bare.pack.tokens > 3_000 - room, "the room was needed"
    listed = oa.InputFilter(target_context_tokens=3_000, tools=[tool]).pack(items, instructions=instructions)
    assert listed.pack.kept == full.pack.kept


def test_handoffs_count_as_the_function_tools_the_model_sees() -> None:
    triage: Agent[Any] = Agent(name="triage", tools=[read_file], handoffs=[AGENT, handoff(Agent(name="billing"))])
    names = [t["name"] for t in oa.agent_tools(triage)]
    assert names == ["read_file", "transfer_to_coder", "transfer_to_billing"]
    assert all(t["type"] == "function" and isinstance(t["parameters"], dict) for t in oa.agent_tools(triage))


def test_the_agents_max_tokens_is_the_default_reserve() -> None:
    _, items = max(corpus(), key=lambda run: len(run[1]))
    capped = Agent(name="capped", model_settings=ModelSettings(max_tokens=1_000))
    by_agent = oa.InputFilter(target_context_tokens=4_000).pack(items, agent=capped)
    given = oa.InputFilter(target_context_tokens=4_000, reserve_output_tokens=1_000, tools=None).pack(items)
    assert by_agent.pack.budget == given.pack.budget == 3_000
    assert by_agent.pack.kept == given.pack.kept
    assert (
        oa.InputFilter(target_context_tokens=4_000, reserve_output_tokens=0).pack(items, agent=capped).pack.budget
        == 4_000
    )


def test_pydantic_items_are_sized_as_dumped_and_returned_as_they_are() -> None:
    _, items = max(corpus(), key=lambda run: len(run[1]))
    objects = [
        ResponseFunctionToolCall.model_validate(item) if kind(item) == "function_call" else item for item in items
    ]
    assert any(not isinstance(x, dict) for x in objects)
    as_objects = oa.InputFilter(target_context_tokens=2_500).pack(objects)
    as_dicts = oa.InputFilter(target_context_tokens=2_500).pack(items)
    assert as_objects.pack.kept == as_dicts.pack.kept and as_objects.pack.tokens == as_dicts.pack.tokens
    kept, others = kept_positions(objects, as_objects.messages)
    assert kept == as_objects.pack.kept and len(others) == 1


def test_pinned_items_stay_with_their_exchange() -> None:
    _, items = max(corpus(), key=lambda run: len(run[1]))
    group = together(items)[0]  # the run's first call: its reasoning, the call, its output
    plain = oa.InputFilter(target_context_tokens=3_000).pack(items)
    assert not set(group) & set(plain.pack.kept)

    def first_call(xs: list[Any]) -> list[int]:
        return [next(i for i, x in enumerate(xs) if kind(x) == "function_call")]

    pinned = oa.InputFilter(target_context_tokens=3_000, pinned=first_call).pack(items)
    assert set(group) <= set(pinned.pack.kept) and pinned.pack.fits
    at = pinned.messages.index(items[group[0]])
    assert pinned.messages[at : at + len(group)] == [items[i] for i in group]


def test_pydantic_items_an_edit_leaves_alone_are_returned_as_they_are() -> None:
    _, items = max(corpus(), key=lambda run: len(run[1]))
    objects = [
        ResponseFunctionToolCall.model_validate(item) if kind(item) == "function_call" else item for item in items
    ]
    edits = [cf.ClearToolUses(keep=1, clear_tool_inputs=True)]
    as_objects = oa.InputFilter(target_context_tokens=5_000, edits=edits).pack(objects)
    as_dicts = oa.InputFilter(target_context_tokens=5_000, edits=edits).pack(items)
    assert as_objects.pack == as_dicts.pack
    assert [oa._as_dict(x) for x in as_objects.messages] == as_dicts.messages
    # The SDK's own objects where no edit changed them; an edited one comes back as the
    # dict that is sent.
    pack = as_dicts.pack
    kept = [m for m in as_dicts.messages if m.get("content") is not pack.note]
    changed = {k for k, m in zip(pack.kept, kept, strict=True) if m is not items[k]}
    assert len(changed) > 10
    assert kept_positions(objects, as_objects.messages)[0] == [k for k in pack.kept if k not in changed]


def test_every_pack_option_is_taken() -> None:
    instructions, items = max(corpus(), key=lambda run: len(run[1]))
    options: dict[str, Any] = {
        "summary": "So far: the bug was found.",
        "edits": [cf.ClearToolUses(keep=1)],
        "sizing": "provider",
        "image_tokens": 900,
        "cut": "chunked",
    }
    packed = oa.InputFilter(target_context_tokens=3_000, tools=None, **options).pack(items, instructions=instructions)
    direct = cf.pack_handoff(items, target_context_tokens=3_000, system=instructions, shape="responses", **options)
    assert packed.pack.applied_edits and packed.pack == direct
    assert "the bug was found" in (packed.pack.note or "")
    with pytest.raises(cf.ArgumentError, match="summary"):
        oa.InputFilter(target_context_tokens=100, summary=5)  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentError, match="edits"):
        oa.InputFilter(target_context_tokens=100, edits=["clear"])  # type: ignore[list-item]
    with pytest.raises(cf.ArgumentError, match="sizing"):
        oa.InputFilter(target_context_tokens=100, sizing="exact")  # type: ignore[arg-type]


def test_over_the_window_sends_the_core_or_raises() -> None:
    _, items = max(corpus(), key=lambda run: len(run[1]))
    huge = "x" * 40_000
    sent = oa.InputFilter(target_context_tokens=2_000).pack(items, instructions=huge)
    assert not sent.pack.fits and sent.pack.note is None and len(sent.messages) < len(items)
    with pytest.raises(oa.ContextOverflowError, match="over the 2000-token budget") as raised:
        oa.InputFilter(target_context_tokens=2_000, on_overflow="raise")(call_data(items, huge))
    assert raised.value.pack.kept == sent.pack.kept and isinstance(raised.value, cf.ContextfoldError)


@pytest.mark.usefixtures("python_writes_4300_digits")
def test_bad_input_and_options_are_named() -> None:
    with pytest.raises(cf.MessageTypeError, match="message 1: expected a dict, got int"):
        oa.InputFilter(target_context_tokens=100).pack([{"role": "user", "content": "a"}, 7])
    with pytest.raises(cf.MessageTypeError, match="input: expected a list of items, got str"):
        oa.InputFilter(target_context_tokens=100).pack("hello")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reserve"):
        oa.InputFilter(target_context_tokens=100, reserve_output_tokens=200)
    with pytest.raises(cf.ArgumentError, match="on_overflow: expected 'send' or 'raise', got 'drop'"):
        oa.InputFilter(target_context_tokens=100, on_overflow="drop")  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentError, match="on_overflow: expected 'send' or 'raise', got an int of 16610 bits"):
        oa.InputFilter(target_context_tokens=100, on_overflow=10**5000)  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match="tools: expected 'agent'"):
        oa.InputFilter(target_context_tokens=100, tools="all")  # type: ignore[arg-type]


def test_every_call_packs_the_same_and_the_filter_time_is_printed() -> None:
    """Same input, same output, call after call; ``pytest -s`` prints the time per call."""
    instructions, items = max(corpus(), key=lambda run: len(run[1]))
    window = oa.InputFilter(target_context_tokens=8_000)
    data = call_data(items, instructions)
    first = window(data).input
    timings, bare = [], []
    for _ in range(1_000):
        start = time.perf_counter()
        again = window(data).input
        timings.append(time.perf_counter() - start)
        assert again == first and sum(x is y for x, y in zip(again, first, strict=True)) == len(first) - 1  # the note
        start = time.perf_counter()
        cf.pack_handoff(items, target_context_tokens=8_000, system=instructions, shape="responses")
        bare.append(time.perf_counter() - start)
    timings.sort()
    bare.sort()
    print(
        f"\ncontextfold openai-agents filter ({cf.backend}): {len(items)} items / {cf.tokens_of(items)} tokens "
        f"-> {len(first)} items; median {statistics.median(timings) * 1e6:.0f} us, "
        f"p99 {timings[len(timings) * 99 // 100] * 1e6:.0f} us over {len(timings)} calls; "
        f"pack_handoff alone median {statistics.median(bare) * 1e6:.0f} us, "
        f"p99 {bare[len(bare) * 99 // 100] * 1e6:.0f} us"
    )


class RecordingModel(Model):
    """A model with no network: it records each input it is sent, asks once for
    ``read_file`` and then answers, so the second call carries the SDK's own tool items."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []
        self.instructions: list[str | None] = []

    def _reply(self, system_instructions: str | None, input: Any) -> Any:
        self.inputs.append(list(input))
        self.instructions.append(system_instructions)
        if len(self.inputs) == 1:
            return ResponseFunctionToolCall(
                arguments='{"path": "setup.py"}', call_id="call_new", name="read_file", type="function_call"
            )
        part = ResponseOutputText(annotations=[], text="done", type="output_text")
        return ResponseOutputMessage(
            id="msg_done", content=[part], role="assistant", status="completed", type="message"
        )

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        return ModelResponse(output=[self._reply(system_instructions, input)], usage=Usage(), response_id=None)

    async def stream_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        response = Response(
            id=f"resp_{len(self.inputs)}",
            created_at=0,
            model="recording",
            object="response",
            output=[self._reply(system_instructions, input)],
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(type="response.completed", sequence_number=0, response=response)


class CountingFilter:
    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        self.calls += 1
        return self.inner(data)  # type: ignore[no-any-return]


def test_a_run_sends_the_model_the_packed_input() -> None:
    instructions, history = max(corpus(), key=lambda run: len(run[1]))
    history = [*history, {"role": "user", "content": "And now read setup.py and summarise."}]
    model = RecordingModel()
    agent: Agent[Any] = Agent(name="coder", instructions=instructions, tools=[read_file], model=model)
    budget = 3_000
    window = CountingFilter(oa.InputFilter(target_context_tokens=budget))
    result = asyncio.run(
        Runner.run(agent, history, run_config=RunConfig(call_model_input_filter=window, tracing_disabled=True))
    )
    assert result.final_output == "done" and window.calls == 2 == len(model.inputs)
    assert model.instructions == [instructions, instructions]
    first, second = model.inputs
    # The SDK hands the filter copies of the caller's dicts: compare by value.
    kept = [history.index(item) for item in first if item in history]
    assert 0 < len(kept) < len(history) - 1 and kept == sorted(kept)
    assert first[-1] == history[-1] and len(first) == len(kept) + 1  # the new request, and one note
    assert sent_tokens(first, instructions, oa.agent_tools(agent)) <= budget
    # The second call ends with the SDK's own call and output, kept together after the request.
    assert [kind(x) for x in second[-2:]] == ["function_call", "function_call_output"]
    assert second[-2]["call_id"] == second[-1]["call_id"] == "call_new"
    assert "contents of setup.py" in second[-1]["output"]
    assert sent_tokens(second, instructions, oa.agent_tools(agent)) <= budget
    assert len(result.to_input_list()) == len(history) + 3, "the run's own history keeps every item"


def test_run_sync_with_the_filter_in_a_run_config() -> None:
    instructions, history = max(corpus(), key=lambda run: len(run[1]))
    model = RecordingModel()
    agent: Agent[Any] = Agent(name="coder", instructions=instructions, tools=[read_file], model=model)
    window = oa.InputFilter(target_context_tokens=3_000, cut="chunked")
    config = RunConfig(call_model_input_filter=window, tracing_disabled=True)
    assert Runner.run_sync(agent, history, run_config=config).final_output == "done"
    assert all(len(sent) < len(history) for sent in model.inputs)


def test_a_streamed_run_sends_the_model_the_packed_input() -> None:
    instructions, history = max(corpus(), key=lambda run: len(run[1]))
    model = RecordingModel()
    agent: Agent[Any] = Agent(name="coder", instructions=instructions, tools=[read_file], model=model)
    window = CountingFilter(oa.InputFilter(target_context_tokens=3_000))

    async def run() -> Any:
        result = Runner.run_streamed(
            agent, history, run_config=RunConfig(call_model_input_filter=window, tracing_disabled=True)
        )
        async for _ in result.stream_events():
            pass
        return result

    assert asyncio.run(run()).final_output == "done" and window.calls == 2 == len(model.inputs)
    for sent in model.inputs:
        assert len(sent) < len(history) and sent_tokens(sent, instructions, oa.agent_tools(agent)) <= 3_000


@function_tool
def run_tests(path: str) -> str:
    """Runs the tests under a path."""
    return f"tests under {path} pass"


def test_the_readme_example_runs_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Agents SDK example, as written, against the SDK's default OpenAI client
    pointed at an in-process stub of the Responses API (no network, tracing off)."""
    # The stub is an httpx transport: the client's own transport library, when it has one.
    httpx = pytest.importorskip("httpx", reason="the OpenAI client does not use httpx here")
    from agents import set_default_openai_client, set_tracing_disabled
    from agents.models import _openai_shared
    from openai import AsyncOpenAI

    from ..test_readme import readme_examples

    (example,) = [b for b in readme_examples() if "from agents import" in b]
    sent: list[list[Any]] = []

    def responses_api(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content)["input"])
        part = ResponseOutputText(annotations=[], text="done", type="output_text")
        message = ResponseOutputMessage(id="msg", content=[part], role="assistant", status="completed", type="message")
        response = Response(
            id="resp",
            created_at=0,
            model="gpt-4o",
            object="response",
            output=[message],
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        return httpx.Response(200, content=response.model_dump_json(), headers={"content-type": "application/json"})

    client = AsyncOpenAI(api_key="stub", http_client=httpx.AsyncClient(transport=httpx.MockTransport(responses_api)))
    monkeypatch.setattr(_openai_shared, "_default_openai_client", _openai_shared.get_default_openai_client())
    monkeypatch.setattr(_openai_shared, "_use_responses_by_default", _openai_shared.get_use_responses_by_default())
    set_default_openai_client(client, use_for_tracing=False)
    set_tracing_disabled(True)
    try:
        turns = [{"role": role, "content": f"{role} " * 3_000} for role in ("user", "assistant") * 40]
        history = [*turns, {"role": "user", "content": "Fix the failing test."}]  # past the 128,000 tokens
        namespace: dict[str, Any] = {"read_file": read_file, "run_tests": run_tests, "history": history}
        exec(example, namespace)
    finally:
        set_tracing_disabled(False)
    assert namespace["result"].final_output == "done"
    (items,) = sent
    assert 3 < len(items) < len(history) and items[-1]["content"] == "Fix the failing test."
