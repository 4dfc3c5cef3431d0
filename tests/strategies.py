"""Hypothesis strategies for transcripts: emoji, lone surrogates, control characters,
nested content parts, floats and big ints, tool calls (reused ids, parallel calls,
unanswered final calls) and volatile tails."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

TRICKY = [*'ab "\\\n\t\x01\x1f\x7fé€😀\u2028\ufeff', "\ud83d", "\ude00", "\udfff"]
text = st.one_of(
    st.text(max_size=60),
    st.lists(st.sampled_from([*TRICKY, "\ud83d\ude00"]), max_size=40).map("".join),
    st.text(alphabet="abc de", min_size=20, max_size=400),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1.0, 1e21, 1e-7, 1.5e-7, 123456.789, -0.0, 5e-324, 2.0**60]),
    text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)
parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, text),
        st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, text),
        st.dictionaries(text, json_values, max_size=3),
    ),
    max_size=3,
)
content = st.one_of(text, text, st.none(), parts)
call_ids = st.sampled_from(["call_1", "call_2", "call_3", "toolu_9"])
tool_call = st.builds(
    lambda i, name, args: {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}},
    call_ids,
    st.sampled_from(["read_file", "grep", "edit", "bash"]),
    st.dictionaries(st.sampled_from(["path", "q", "n"]), scalars, max_size=3),
)


@st.composite
def turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One step of a conversation: a user turn, an assistant reply, or a tool exchange."""
    kind = draw(st.sampled_from(["user", "assistant", "exchange", "exchange", "orphan", "volatile"]))
    if kind == "user":
        return [{"role": "user", "content": draw(content)}]
    if kind == "assistant":
        return [{"role": "assistant", "content": draw(content)}]
    if kind == "orphan":
        return [{"role": "tool", "tool_call_id": draw(call_ids), "content": draw(text)}]
    if kind == "volatile":
        return [{"role": "user", "content": "<run-state>\n" + draw(text) + "\n</run-state>"}]
    calls = draw(st.lists(tool_call, min_size=0, max_size=3))
    out: list[dict[str, Any]] = [
        {"role": "assistant", "content": draw(st.one_of(st.none(), text)), "tool_calls": calls}
    ]
    answered = draw(st.integers(min_value=0, max_value=len(calls)))
    out += [{"role": "tool", "tool_call_id": c["id"], "content": draw(text)} for c in calls[:answered]]
    return out


@st.composite
def transcripts(draw: st.DrawFn, max_turns: int = 30) -> list[dict[str, Any]]:
    """A transcript: optional leading system (or developer) messages, then turns."""
    out: list[dict[str, Any]] = [
        {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text)}
        for _ in range(draw(st.integers(0, 2)))
    ]
    for turn in draw(st.lists(turns(), max_size=max_turns)):
        out.extend(turn)
    return out


# OpenAI Responses API items -----------------------------------------------------------

item_call_ids = st.sampled_from(["call_a", "call_b", "call_c", "call_\ud800", "call_😀"])
input_text = st.builds(lambda t: [{"type": "input_text", "text": t}], text)
output_text = st.builds(lambda t: [{"type": "output_text", "text": t, "annotations": []}], text)
reasoning_item = st.builds(
    lambda s, e: {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": s}],
        "encrypted_content": e,
    },
    text,
    text,
)
unknown_item = st.one_of(
    st.builds(lambda i: {"type": "item_reference", "id": i}, text),
    st.builds(lambda d: {**d, "type": "web_search_call", "id": "ws_1"}, st.dictionaries(text, json_values, max_size=2)),
    st.builds(lambda d: {**d, "type": "mcp_list_tools"}, st.dictionaries(text, json_values, max_size=2)),
)


@st.composite
def item_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One step of a Responses run: a user or assistant message item, a tool step
    (reasoning, parallel calls, their outputs in any order, some unanswered), an orphan
    output, an unknown item, or a volatile tail."""
    kind = draw(st.sampled_from(["user", "user", "assistant", "step", "step", "step", "orphan", "unknown", "volatile"]))
    if kind == "user":
        plain = draw(st.booleans())
        body = draw(st.one_of(text, input_text))
        return [{"role": "user", "content": body} if plain else {"type": "message", "role": "user", "content": body}]
    if kind == "assistant":
        return [{"type": "message", "role": "assistant", "content": draw(output_text)}]
    if kind == "orphan":
        return [{"type": "function_call_output", "call_id": draw(item_call_ids), "output": draw(text)}]
    if kind == "unknown":
        return [draw(unknown_item)]
    if kind == "volatile":
        return [{"role": "user", "content": [{"type": "input_text", "text": "<run-state>\n" + draw(text)}]}]
    out: list[dict[str, Any]] = draw(st.lists(reasoning_item, max_size=2))
    call_types = st.sampled_from(["function_call", "function_call", "custom_tool_call", "computer_call"])
    calls = [
        {"type": t, "call_id": c, "name": n, "arguments": draw(text)}
        for t, c, n in draw(
            st.lists(st.tuples(call_types, item_call_ids, st.sampled_from(["grep", "read"])), min_size=1, max_size=3)
        )
    ]
    out += calls
    answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
    for call in answered:
        out.append(
            {"type": call["type"] + "_output", "call_id": call["call_id"], "output": draw(st.one_of(text, input_text))}
        )
    return out


@st.composite
def item_transcripts(draw: st.DrawFn, max_turns: int = 30) -> list[dict[str, Any]]:
    """A Responses transcript: optional leading developer/system message items, then steps."""
    out: list[dict[str, Any]] = [
        {"type": "message", "role": draw(st.sampled_from(["developer", "system"])), "content": draw(text)}
        for _ in range(draw(st.integers(0, 2)))
    ]
    for turn in draw(st.lists(item_turns(), max_size=max_turns)):
        out.extend(turn)
    return out
