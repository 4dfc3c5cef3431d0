"""contextfold's ClearToolUsesEdit against LangChain's: the same fields, the same results on
generated and corpus transcripts, and token counts linear in the transcript where
LangChain's recount is quadratic."""

# ruff: noqa: E402  (the framework imports follow the check that it is installed)

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, event, given
from hypothesis import strategies as st

from ..conftest import examples
from . import need

edits = need("contextfold.integrations.langchain_edits", "langchain")
lc = need("contextfold.integrations.langchain", "langchain")

from langchain.agents.middleware.context_editing import ClearToolUsesEdit as LangChainEdit
from langchain.agents.middleware.context_editing import ContextEditingMiddleware
from langchain_core.language_models.fake_chat_models import FakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.tools import tool

from .lc_corpus import RecordingChatModel, langchain_corpus

OursEdit = edits.ClearToolUsesEdit
Counter = Callable[[Sequence[BaseMessage]], int]


def _chars(messages: Sequence[BaseMessage]) -> int:
    """A counter summing per message plus a constant (a system prompt sent with every count)."""
    return 7 + sum(len(str(m.content)) + len(getattr(m, "tool_calls", None) or ()) for m in messages)


def _pooled(messages: Sequence[BaseMessage]) -> int:
    """A counter that does not sum per message: the characters are rounded once, for all."""
    return math.ceil(sum(len(str(m.content)) for m in messages) / 7)


ADDITIVE: dict[str, Counter] = {
    "approximate": count_tokens_approximately,
    # BaseChatModel's own count, as token_count_method="model" calls it (words as tokens)
    "model": FakeChatModel(custom_get_token_ids=str.split).get_num_tokens_from_messages,
    "chars": _chars,
}


class Recorder:
    """A counter that records the size of every list it is asked to count."""

    def __init__(self, count: Counter) -> None:
        self.count = count
        self.sizes: list[int] = []

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        self.sizes.append(len(messages))
        return self.count(messages)


def _run(edit: Any, messages: list[BaseMessage], count: Counter) -> list[BaseMessage]:
    """``messages`` edited by ``edit``, on a copy of the list."""
    out = list(messages)
    edit.apply(out, count_tokens=count)
    return out


def _assert_same(original: list[BaseMessage], theirs: list[BaseMessage], ours: list[BaseMessage]) -> None:
    assert len(ours) == len(theirs) == len(original)
    for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        assert type(b) is type(a), i
        assert b == a, i  # pydantic: every field, response_metadata and artifact included
        assert b.model_dump() == a.model_dump(), i
        assert (b is original[i]) == (a is original[i]), i  # the same messages left untouched


def _changed(original: list[BaseMessage], out: list[BaseMessage]) -> int:
    """Tool results an edit cleared (replaced)."""
    return sum(isinstance(b, ToolMessage) and b is not a for a, b in zip(original, out, strict=True))


class Compared(NamedTuple):
    theirs: Recorder
    """LangChain's edit's counter."""
    ours: Recorder
    """This edit's counter."""
    cleared: int
    """Tool results the edits cleared."""


def _compare(kwargs: dict[str, Any], messages: list[BaseMessage], count: Counter) -> Compared:
    """Both edits on ``messages`` (each on its own list), their results the same."""
    before = [m.model_dump() for m in messages]
    theirs_count, ours_count = Recorder(count), Recorder(count)
    theirs = _run(LangChainEdit(**kwargs), messages, theirs_count)
    ours = _run(OursEdit(**kwargs), messages, ours_count)
    _assert_same(messages, theirs, ours)
    assert [m.model_dump() for m in messages] == before, "an input message was changed in place"
    return Compared(theirs_count, ours_count, _changed(messages, ours))


# Generated transcripts ------------------------------------------------------------------

CALL_IDS = ["c0", "c1", "c2", "c3", "c4", "c5"]
TOOLS = ["search", "calc", "read"]
sizes = st.one_of(st.integers(min_value=0, max_value=240), st.integers(min_value=200, max_value=800))
call_ids = st.sampled_from(CALL_IDS)
tool_names = st.sampled_from(TOOLS)


def _text(n: int) -> str:
    return ("lorem ipsum " * (n // 12 + 1))[:n]


@st.composite
def ai_messages(draw: st.DrawFn) -> AIMessage:
    some = st.lists(call_ids, min_size=1, max_size=3, unique=True)
    ids: list[str | None] = draw(st.one_of(some, some, st.lists(call_ids, max_size=3, unique=True)))
    if ids and draw(st.integers(0, 9)) == 0:
        ids[-1] = None
    calls = [{"id": i, "name": draw(tool_names), "args": {"q": _text(draw(sizes) // 4)}} for i in ids]
    content: Any = _text(draw(sizes) // 4)
    if draw(st.booleans()) and calls:  # Anthropic-style: the calls in the content too
        content = [{"type": "text", "text": content}] + [
            {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in calls
        ]
    metadata = draw(
        st.sampled_from([{}, {"model_provider": "x"}, {"context_editing": {"cleared_tool_inputs": ["c1"]}}])
    )
    return AIMessage(
        content=content, tool_calls=calls, id=draw(st.sampled_from([None, "a0", "a1"])), response_metadata=metadata
    )


@st.composite
def tool_messages(draw: st.DrawFn, answering: str | None = None) -> ToolMessage:
    content: Any = _text(draw(sizes))
    if draw(st.integers(0, 4)) == 0:
        content = [{"type": "text", "text": content}]
    metadata = draw(
        st.sampled_from(
            [
                {},
                {},
                {},
                {"context_editing": {"cleared": True, "strategy": "clear_tool_uses"}},
                {"context_editing": {"cleared": False}},
                {"context_editing": {}},
                {"other": 1},
            ]
        )
    )
    return ToolMessage(
        content=content,
        tool_call_id=answering or draw(call_ids),
        name=draw(st.one_of(st.none(), st.none(), tool_names)),
        artifact=draw(st.sampled_from([None, {"rows": 3}])),
        response_metadata=metadata,
    )


@st.composite
def transcripts(draw: st.DrawFn) -> list[BaseMessage]:
    """Turns of an AIMessage and the ToolMessages answering its calls (in any order, some
    missing), among user and system messages, stray results, and AIMessages again (the same
    object, or an equal copy: ``list.index`` finds the first)."""
    out: list[BaseMessage] = []
    for _ in range(draw(st.one_of(st.integers(2, 8), st.integers(2, 8), st.integers(0, 3)))):
        kind = draw(st.sampled_from(["turn", "turn", "turn", "turn", "system", "human", "stray", "again", "equal"]))
        if kind == "turn":
            ai = draw(ai_messages())
            out.append(ai)
            answers = [draw(tool_messages(c["id"])) for c in ai.tool_calls if draw(st.integers(0, 5))]
            out.extend(draw(st.permutations(answers)))
        elif kind == "system":
            out.append(SystemMessage(content=_text(draw(sizes) // 4)))
        elif kind == "human":
            out.append(HumanMessage(content=_text(draw(sizes) // 4)))
        elif kind == "stray":
            out.append(draw(tool_messages()))
        else:
            earlier = [m for m in out if isinstance(m, AIMessage)]
            if earlier:
                again = draw(st.sampled_from(earlier))
                out.append(again if kind == "again" else again.model_copy())
                out.extend(draw(tool_messages(c["id"])) for c in again.tool_calls[:1])
    return out


@st.composite
def edit_kwargs(draw: st.DrawFn, messages: list[BaseMessage]) -> dict[str, Any]:
    """The edit's fields, ``trigger`` and ``clear_at_least`` on the scale of ``messages``."""
    total = count_tokens_approximately(messages)
    return {
        "trigger": draw(st.one_of(st.just(0), st.integers(0, total), st.integers(0, 2 * total + 10))),
        "clear_at_least": draw(
            st.one_of(st.just(0), st.integers(1, max(total // 2, 1)), st.integers(1, 10 * total + 10))
        ),
        "keep": draw(st.one_of(st.sampled_from([0, 0, 1, 3]), st.integers(-1, 4))),
        "clear_tool_inputs": draw(st.booleans()),
        "exclude_tools": tuple(draw(st.lists(tool_names, max_size=2))),
        "placeholder": draw(st.sampled_from(["[cleared]", "", "[removed to save context]"])),
    }


cases = transcripts().flatmap(lambda messages: st.tuples(edit_kwargs(messages), st.just(messages)))


@given(case=cases, counter=st.sampled_from(sorted(ADDITIVE)))
@examples(500, suppress_health_check=[HealthCheck.too_slow])
def test_generated_transcripts_come_out_as_langchains(
    case: tuple[dict[str, Any], list[BaseMessage]], counter: str
) -> None:
    kwargs, messages = case
    theirs, ours, cleared = _compare(kwargs, messages, ADDITIVE[counter])
    event(f"cleared {min(cleared, 3)}{'+' if cleared > 3 else ''}")
    if cleared and kwargs["clear_at_least"]:
        every = _run(OursEdit(**{**kwargs, "clear_at_least": 0}), messages, ADDITIVE[counter])
        event("stopped at clear_at_least" if _changed(messages, every) > cleared else "cleared all it could")
    assert ours.sizes[:1] == theirs.sizes[:1] == [len(messages)]  # the whole transcript, once
    assert set(ours.sizes[1:]) <= {1, 2}  # then what each cleared result changed, before and after
    assert len(ours.sizes) - 1 == (2 * cleared if kwargs["clear_at_least"] else 0)


@given(case=cases)
@examples(150, suppress_health_check=[HealthCheck.too_slow])
def test_any_counter_without_clear_at_least_comes_out_as_langchains(
    case: tuple[dict[str, Any], list[BaseMessage]],
) -> None:
    """Without ``clear_at_least`` the count only decides the trigger: any counter agrees."""
    kwargs, messages = case
    theirs, ours, _ = _compare({**kwargs, "clear_at_least": 0}, messages, _pooled)
    assert ours.sizes == theirs.sizes == [len(messages)]


def test_the_quirks_of_langchains_edit_are_kept() -> None:
    """What LangChain's edit does that a reading by call id would not."""
    first = AIMessage(content="", tool_calls=[{"id": "c1", "name": "search", "args": {"q": "x" * 50}}])
    marked = {"context_editing": {"cleared": True}}
    messages: list[BaseMessage] = [
        first,
        ToolMessage(content="a" * 300, tool_call_id="c1", response_metadata=marked),  # marked cleared: skipped
        first,  # the same object again
        ToolMessage(content="b" * 300, tool_call_id="c1"),  # its call is cleared at 0 (list.index), not at 2
        AIMessage(content="thinking", tool_calls=[]),
        ToolMessage(content="c" * 300, tool_call_id="c1"),  # its nearest AIMessage has no c1: kept
        first.model_copy(),  # equal to the first
        ToolMessage(content="d" * 300, tool_call_id="c1"),  # its call is cleared at 2 (equal, and now first)
    ]
    for clear_at_least in (0, 100, 10**6):
        kwargs = {"trigger": 0, "keep": 0, "clear_tool_inputs": True, "clear_at_least": clear_at_least}
        _compare(kwargs, messages, count_tokens_approximately)
    out = _run(OursEdit(trigger=0, keep=0, clear_tool_inputs=True), messages, count_tokens_approximately)
    assert [m.content[:1] for m in out if isinstance(m, ToolMessage)] == ["a", "[", "c", "["]
    assert [i for i, (a, b) in enumerate(zip(messages, out, strict=True)) if a is not b] == [0, 2, 3, 7]


# Corpus transcripts ---------------------------------------------------------------------


@pytest.mark.parametrize("clear_tool_inputs", [False, True])
@pytest.mark.parametrize("clear_at_least", [0, 500, 5_000])
def test_corpus_transcripts_come_out_as_langchains(clear_at_least: int, clear_tool_inputs: bool) -> None:
    edited = 0
    for messages in langchain_corpus():
        for keep in (0, 3):
            kwargs = {
                "trigger": 1_000,
                "keep": keep,
                "clear_at_least": clear_at_least,
                "clear_tool_inputs": clear_tool_inputs,
            }
            edited += _compare(kwargs, messages, count_tokens_approximately).cleared > 0
    assert edited >= 20  # the corpus really was edited, not passed through


def test_count_tokens_approximately_sums_per_message() -> None:
    """Why differences equal a recount for LangChain's default counter (see the docstring)."""
    for messages in langchain_corpus():
        assert count_tokens_approximately(messages) == sum(count_tokens_approximately([m]) for m in messages)
    messages = max(langchain_corpus(), key=len)
    scaled = count_tokens_approximately(messages, extra_tokens_per_message=2.5)
    assert scaled != sum(count_tokens_approximately([m], extra_tokens_per_message=2.5) for m in messages)


# Cost -----------------------------------------------------------------------------------


def _tool_uses(n: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [HumanMessage(content="fix the failing test")]
    for i in range(n):
        out.append(AIMessage(content="", tool_calls=[{"id": f"c{i}", "name": "read", "args": {"path": f"f{i}.py"}}]))
        out.append(ToolMessage(content="x" * 400, tool_call_id=f"c{i}"))
    return out


@pytest.mark.parametrize("clear_tool_inputs", [False, True])
def test_counting_is_linear_where_langchains_is_quadratic(clear_tool_inputs: bool) -> None:
    """Messages handed to ``count_tokens`` (calls, not time): LangChain's edit recounts the
    whole transcript after each result it clears, so its work grows with ``clear_at_least``
    times the transcript; this edit counts the transcript once, then each changed message."""
    work: dict[tuple[int, float], tuple[int, int]] = {}  # (tool uses, share) -> (theirs, ours)
    for n in (50, 100, 200):
        messages = _tool_uses(n)
        everything = _run(
            OursEdit(trigger=0, clear_tool_inputs=clear_tool_inputs), messages, count_tokens_approximately
        )
        freed = count_tokens_approximately(messages) - count_tokens_approximately(everything)
        for share in (0.0, 0.25, 0.5, 1.0):  # of what clearing every result but the newest 3 frees
            clear_at_least = math.ceil(share * freed)
            kwargs = {"trigger": 0, "clear_at_least": clear_at_least, "clear_tool_inputs": clear_tool_inputs}
            theirs, ours, cleared = _compare(kwargs, messages, count_tokens_approximately)
            if share in (0.0, 1.0):
                assert cleared == n - 3
            if clear_at_least:
                assert theirs.sizes == [len(messages)] * (1 + cleared)  # a recount per result
            else:
                assert theirs.sizes == [len(messages)]
            changed = 2 if clear_tool_inputs else 1  # messages a cleared result changes
            assert ours.sizes == [len(messages)] + [changed] * (2 * cleared if clear_at_least else 0)
            work[n, share] = (sum(theirs.sizes), sum(ours.sizes))
    for n in (50, 100):
        # clearing everything in twice the transcript: about 4x LangChain's work, 2x this one's
        assert work[2 * n, 1.0][0] / work[n, 1.0][0] > 3.8
        assert work[2 * n, 1.0][1] / work[n, 1.0][1] < 2.1
    for n in (50, 100, 200):
        # the same transcript, a larger clear_at_least: LangChain's work grows with it
        assert work[n, 0.25][0] < work[n, 0.5][0] < work[n, 1.0][0]
        assert work[n, 1.0][1] - work[n, 0.25][1] <= 4 * n
    assert work[200, 1.0][0] > 50 * work[200, 1.0][1]


# The value ------------------------------------------------------------------------------


def test_fields_defaults_and_types_are_langchains() -> None:
    def shape(cls: Any) -> list[tuple[str, Any, str]]:
        return [(f.name, f.default, str(f.type)) for f in dataclasses.fields(cls)]

    assert shape(OursEdit) == shape(LangChainEdit)
    positional = (10, 5, 1, True, ("search",), "[gone]")
    assert dataclasses.astuple(OursEdit(*positional)) == dataclasses.astuple(LangChainEdit(*positional))
    assert dataclasses.astuple(OursEdit()) == dataclasses.astuple(LangChainEdit())


def test_langchains_middleware_takes_it_in_place_of_its_own() -> None:
    assert lc.ClearToolUsesEdit is OursEdit  # re-exported
    messages = _tool_uses(6)
    middleware = ContextEditingMiddleware(edits=[lc.ClearToolUsesEdit(trigger=100, keep=2, clear_at_least=150)])
    control = ContextEditingMiddleware(edits=[LangChainEdit(trigger=100, keep=2, clear_at_least=150)])
    seen: list[list[BaseMessage]] = []

    class Request:
        def __init__(self, messages: list[BaseMessage]) -> None:
            self.messages = messages
            self.system_message = None
            self.tools: list[Any] = []

        def override(self, **changes: Any) -> Any:
            return Request(changes["messages"])

    for m in (middleware, control):
        m.wrap_model_call(Request(copy.copy(messages)), lambda request: seen.append(request.messages))
    _assert_same(messages, seen[1], seen[0])
    assert [m.content for m in seen[0] if isinstance(m, ToolMessage)].count("[cleared]") == 2


@tool
def run_shell(command: str) -> str:
    """Runs a shell command in the repository and returns what it printed."""
    return command


def test_an_agent_with_it_and_contextfolds_packing_sees_what_it_would_with_langchains() -> None:
    """``create_agent`` with LangChain's context editing (this edit in it) and then
    contextfold's packing: the model sees what it sees with LangChain's own edit."""
    from langchain.agents import create_agent

    with_tools = [m for m in langchain_corpus() if sum(isinstance(x, ToolMessage) for x in m) >= 6]
    messages = min(with_tools, key=count_tokens_approximately)
    if isinstance(messages[-1], AIMessage) and messages[-1].tool_calls:
        messages = messages[:-1]  # LangGraph's agent refuses a history ending on an unanswered call
    total = count_tokens_approximately(messages)
    fields = {"trigger": total // 2, "keep": 2, "clear_at_least": total // 4, "clear_tool_inputs": True}
    seen = []
    for edit in (OursEdit(**fields), LangChainEdit(**fields)):
        model = RecordingChatModel()
        packing = lc.ContextfoldMiddleware(max_tokens=lc.TokenCounter()(messages) * 2 // 3)
        middleware = [ContextEditingMiddleware(edits=[edit]), packing]
        agent = create_agent(model=model, tools=[run_shell], system_prompt="You fix bugs.", middleware=middleware)
        state = agent.invoke({"messages": messages})
        assert all(a is b for a, b in zip(state["messages"], messages, strict=False))  # the state is whole
        (request,) = model.seen
        seen.append(request)
    ours, theirs = seen
    assert ours == theirs
    assert any(isinstance(m, ToolMessage) and m.content == "[cleared]" for m in ours)
    assert len(ours) < len(messages)  # and folded


@pytest.mark.parametrize("keep", [-1, 0, 3])
def test_an_empty_transcript_is_left_alone(keep: int) -> None:
    _compare({"trigger": 0, "keep": keep, "clear_at_least": 5}, [], count_tokens_approximately)
