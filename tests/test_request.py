"""pack_request / pack_requests: request bodies packed as bytes equal the object path
(``json.loads`` + ``pack_handoff``) on every field, kept messages and the envelope are
copied byte for byte, and bad bodies raise the documented errors, on both backends.

Bodies come in every format that exists: chat (OpenAI, Anthropic with ``system``) and
Responses (``input`` items from ``synthetic.responses_items``, ``instructions``), with
and without ``tools``, sized by chars/4, by the provider rule or by an embedded encoding
(the reference counting through tiktoken, loaded offline from the crate's vocabulary)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import contextfold as cf
import pytest
from contextfold import _backend, reference
from contextfold.synthetic import responses_items
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from .conftest import IMPLS, anthropic_corpus, examples, native_required, openai_corpus
from .offline_tiktoken import ENCODINGS
from .strategies import item_transcripts, transcripts

# Rendering bodies ------------------------------------------------------------------------


@dataclass(frozen=True)
class Style:
    """How a request is written as JSON."""

    indent: int | None = None
    ensure_ascii: bool = False
    reverse_keys: bool = False
    escape_solidus: bool = False
    escape_ordinary: bool = False
    exponent_floats: bool = False
    extra_fields: bool = False
    duplicate_keys: bool = False


STYLES = [
    Style(),
    Style(indent=2, ensure_ascii=True),
    Style(reverse_keys=True, extra_fields=True, duplicate_keys=True),
    Style(indent=1, escape_solidus=True, escape_ordinary=True, exponent_floats=True, extra_fields=True),
]
_LONE = re.compile("[\ud800-\udfff]")


@dataclass
class Body:
    data: bytes
    open: int
    """Byte offset of the packed array's ``[``."""
    close: int
    """Byte offset of its ``]``."""
    messages: list[bytes]
    """Each message (item) exactly as written."""


class _Writer:
    def __init__(self, style: Style) -> None:
        self.style = style
        self.parts: list[str] = []

    def string(self, s: str) -> str:
        token = json.dumps(s, ensure_ascii=self.style.ensure_ascii)
        if not self.style.ensure_ascii:
            token = _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", token)
        if self.style.escape_solidus:
            token = token.replace("/", "\\/")
        if self.style.escape_ordinary:  # letters no escape sequence uses
            token = token.replace("o", "\\u006f").replace("s", "\\u0073")
        return token

    def number(self, x: int | float) -> str:
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, int) or math.isnan(x) or math.isinf(x):
            return json.dumps(x)
        if self.style.exponent_floats and x.is_integer() and abs(x) < 1e15:
            return f"{int(x)}e0"
        return repr(x)

    def value(self, v: Any, depth: int) -> str:
        if v is None or isinstance(v, bool):
            return json.dumps(v)
        if isinstance(v, (int, float)):
            return self.number(v)
        if isinstance(v, str):
            return self.string(v)
        if isinstance(v, list):
            return self.container("[", "]", [self.value(x, depth + 1) for x in v], depth)
        keys = list(v)[::-1] if self.style.reverse_keys else list(v)
        items = [f"{self.string(k)}{self.colon()}{self.value(v[k], depth + 1)}" for k in keys]
        return self.container("{", "}", items, depth)

    def colon(self) -> str:
        return ": " if self.style.indent is not None else ":"

    def container(self, open_: str, close: str, items: list[str], depth: int) -> str:
        if not items:
            return open_ + close
        if self.style.indent is None:
            return open_ + ",".join(items) + close
        pad = "\n" + " " * (self.style.indent * (depth + 1))
        return open_ + pad + ("," + pad).join(items) + "\n" + " " * (self.style.indent * depth) + close


def packed_key(request: dict[str, Any]) -> str:
    """The member pack_request packs: ``messages``, else a Responses body's ``input``."""
    return "messages" if "messages" in request else "input"


def render(request: dict[str, Any], style: Style) -> Body:
    """The request as a body in ``style``, with the packed array's byte positions."""
    w = _Writer(style)
    key = packed_key(request)
    fields = {k: v for k, v in request.items() if k != key}
    if style.extra_fields:
        fields = {"model": "gpt-x", "temperature": 0.5, "meta": {"tags": ["a/b", None]}, **fields, "stream": True}
    keys = list(fields)[::-1] if style.reverse_keys else list(fields)
    sep = "," + ("\n " if style.indent is not None else "")
    head = "{"
    if style.duplicate_keys:  # earlier values json.loads overrides
        head += f'"{key}"{w.colon()}{{"stale": 1}}{sep}"model"{w.colon()}"old"{sep}'
        if "tools" in request:
            head += f'"tools"{w.colon()}3{sep}'
    if style.extra_fields:  # numbers as people write them
        head += f'"seed"{w.colon()}-0{sep}"scale"{w.colon()}1e2{sep}"top_p"{w.colon()}1.0{sep}'
    members = [f"{w.string(k)}{w.colon()}{w.value(fields[k], 1)}" for k in keys[: len(keys) // 2]]
    text = head + sep.join(members) + (sep if members else "") + f'"{key}"{w.colon()}['
    open_at = len(text.encode("utf-8")) - 1
    pieces = [w.value(m, 2) for m in request[key]]
    inner = "\n  " if style.indent is not None else ""
    data = text.encode("utf-8")
    written: list[bytes] = []
    for k, piece in enumerate(pieces):
        data += ((inner if k == 0 else "," + inner) + piece).encode("utf-8")
        written.append(piece.encode("utf-8"))
    data += ("\n " if style.indent is not None and pieces else "").encode("utf-8")
    close_at = len(data)
    rest = [f"{w.string(k)}{w.colon()}{w.value(fields[k], 1)}" for k in keys[len(keys) // 2 :]]
    data += ("]" + "".join(sep + m for m in rest) + "}").encode("utf-8")
    return Body(data, open_at, close_at, written)


# The oracle ---------------------------------------------------------------------------------


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def handoff(request: dict[str, Any], **options: Any) -> cf.HandoffPack:
    """The object path: a chat body's ``messages`` with its ``system``, or a Responses
    body's ``input`` (a string: one user message) with its ``instructions``, both with
    their ``tools``."""
    tools = request.get("tools")
    if "messages" in request:
        return cf.pack_handoff(request["messages"], system=request.get("system"), tools=tools, **options)
    items = request["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    shape = options.pop("shape", "auto")
    shape = "responses" if shape == "auto" else shape
    return cf.pack_handoff(items, system=request.get("instructions"), tools=tools, shape=shape, **options)


def object_path(data: bytes, **options: Any) -> tuple[dict[str, Any], cf.HandoffPack]:
    request = json.loads(data)
    return request, handoff(request, **options)


def packed_request(request: dict[str, Any], pack: cf.HandoffPack) -> dict[str, Any]:
    """The request the object path sends: its packed member replaced by the pack's
    messages (a string ``input`` is sent as it is)."""
    key = packed_key(request)
    return request if isinstance(request[key], str) else {**request, key: pack.messages}


def check(body: Body, **options: Any) -> cf.PackedRequest:
    """pack_request equals the object path on every field, and copies bytes exactly."""
    request, pack = object_path(body.data, **options)
    key = packed_key(request)
    packed = cf.pack_request(body.data, **options)
    assert (packed.fits, packed.tokens, packed.budget, packed.dropped, packed.note, packed.kept) == (
        pack.fits,
        pack.tokens,
        pack.budget,
        pack.dropped,
        pack.note,
        pack.kept,
    )
    assert canonical(json.loads(packed.body)) == canonical(packed_request(request, pack))
    if pack.note is None and pack.kept == list(range(len(request[key]))):
        assert packed.body is body.data
    # The envelope and every kept message, byte for byte, in order.
    out = packed.body
    assert out[: body.open + 1] == body.data[: body.open + 1]
    assert out.endswith(body.data[body.close :])
    at = body.open
    for i in pack.kept:
        found = out.find(body.messages[i], at)
        assert found >= 0, i
        at = found + len(body.messages[i])
    return packed


# Differential: corpus and generated transcripts -------------------------------------------


@pytest.mark.parametrize("style", STYLES, ids=range(len(STYLES)))
def test_corpus_bodies_equal_the_object_path(backend: str, style: Style) -> None:
    """Chat, Anthropic and Responses bodies (the corpus converted to items, with
    ``instructions`` and tools)."""
    requests = [{"model": "m", "messages": m} for m in openai_corpus()] + anthropic_corpus()
    requests += [responses_request(m) for m in openai_corpus()]
    for request in requests:
        body = render(request, style)
        key = packed_key(request)
        n = len(request[key])
        for budget in (600, 3_000, 8_000):
            for cut in ("greedy", "chunked"):
                check(body, target_context_tokens=budget, reserve_output_tokens=100, cut=cut)
        check(body, target_context_tokens=2_000, pinned=[n // 2, 1] if n > 1 else [], summary="Done: a, b; next c.")
        if key == "input":  # the note is a message item
            out = json.loads(cf.pack_request(body.data, target_context_tokens=600).body)
            assert all(item.get("type") for item in out["input"])


def test_backends_write_identical_bytes() -> None:
    native, python = IMPLS["native"], IMPLS["python"]
    if native is None:
        pytest.skip("the native extension is not built")
    requests = [{"messages": m} for m in openai_corpus()] + anthropic_corpus()
    for k, request in enumerate(requests):
        data = render(request, STYLES[k % len(STYLES)]).data
        for budget in (700, 4_000):
            with _backend.using(native):
                ours = cf.pack_request(data, target_context_tokens=budget)
            with _backend.using(python):
                theirs = cf.pack_request(data, target_context_tokens=budget)
            assert ours == theirs


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file — returns its text.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {"type": "function", "function": {"name": "grep", "parameters": {"type": "object", "minimum": 1.0}}},
]
"""Tool definitions as a chat body carries them (non-ASCII, a float printed ``1``)."""
RESPONSES_TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}, "strict": True}]


def responses_request(messages: list[dict[str, Any]], tools: bool = True) -> dict[str, Any]:
    """A chat transcript as a Responses body: its items, an ``instructions`` and tools."""
    request: dict[str, Any] = {"model": "m", "instructions": "Answer in English.", "input": responses_items(messages)}
    if tools:
        request["tools"] = RESPONSES_TOOLS
    return request


@pytest.mark.parametrize("style", STYLES, ids=range(len(STYLES)))
def test_corpus_bodies_with_tools_equal_the_object_path(backend: str, style: Style) -> None:
    requests = [{"model": "m", "tools": TOOLS, "messages": m} for m in openai_corpus()]
    requests += [{**r, "tools": TOOLS} for r in anthropic_corpus()]
    for request in requests:
        body = render(request, style)
        for budget in (600, 8_000):
            check(body, target_context_tokens=budget, cut="greedy" if budget > 600 else "chunked")
        # The tools count: the same body without them packs into less.
        bare = render({k: v for k, v in request.items() if k != "tools"}, style)
        with_tools = cf.pack_request(body.data, target_context_tokens=10**9).tokens
        assert cf.pack_request(bare.data, target_context_tokens=10**9).tokens < with_tools


def test_responses_bodies_with_another_shape_use_it(backend: str) -> None:
    request = responses_request(openai_corpus()[0], tools=False)
    request["input"] = [m for m in openai_corpus()[0] if m["role"] != "tool" and not m.get("tool_calls")]
    for shape in ("openai", "auto"):
        check(render(request, STYLES[0]), target_context_tokens=500, shape=shape)


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize("estimate", [None, "o200k_base"])
@pytest.mark.parametrize(
    "text",
    ["hello", "héllo <|endoftext|> 😀 " * 300, "<run-state>\nstep 3\n</run-state>"],
    ids=["short", "long", "volatile"],
)
def test_a_string_input_is_counted_and_passed_through(backend: str, text: str, estimate: str | None) -> None:
    request = {"model": "m", "instructions": "Be brief.", "input": text, "tools": RESPONSES_TOOLS}
    data = json.dumps(request).encode()
    options: dict[str, Any] = {"system": "Be brief.", "tools": RESPONSES_TOOLS, "estimate_tokens": estimate}
    for budget in (10, 100, 10_000):
        result = cf.pack_request(data, target_context_tokens=budget, estimate_tokens=estimate)  # type: ignore[arg-type]
        one = cf.pack_handoff([{"role": "user", "content": text}], target_context_tokens=10**9, **options)
        assert result == cf.PackedRequest(data, one.tokens <= budget, one.tokens, budget, 0, None, [0], ())
        assert result.body is data
        if not text.startswith("<run-state>"):  # pack_handoff would drop a lone volatile tail
            p = cf.pack_handoff([{"role": "user", "content": text}], target_context_tokens=budget, **options)
            assert (result.fits, result.tokens, result.dropped, result.note, result.kept) == (
                p.fits,
                p.tokens,
                p.dropped,
                p.note,
                p.kept,
            )


def _with(request: dict[str, Any], prompt_key: str, prompt: Any, tools: bool) -> dict[str, Any]:
    if prompt is not None:
        request[prompt_key] = prompt
    if tools:
        request["tools"] = TOOLS if prompt_key == "system" else RESPONSES_TOOLS
    return request


_systems = st.one_of(
    st.none(), st.text(max_size=20), st.lists(st.fixed_dictionaries({"type": st.just("text")}), max_size=2)
)
generated_requests = st.one_of(
    st.builds(
        lambda m, p, t: _with({"messages": m}, "system", p, t), transcripts(max_turns=14), _systems, st.booleans()
    ),
    st.builds(
        lambda m, p, t: _with({"input": m}, "instructions", p, t),
        item_transcripts(max_turns=10),
        st.one_of(st.none(), st.text(max_size=20)),
        st.booleans(),
    ),
)
"""Chat bodies (with a ``system``) and Responses bodies (with ``instructions``), with
and without tools."""


@pytest.mark.long
@examples(300, suppress_health_check=[HealthCheck.too_slow])
@given(
    generated_requests,
    st.sampled_from(STYLES),
    st.integers(0, 2_500),
    st.sampled_from(["greedy", "chunked"]),
    st.one_of(st.none(), st.text(max_size=30)),
)
def test_generated_bodies_equal_the_object_path(
    request: dict[str, Any], style: Style, budget: int, cut: str, summary: str | None
) -> None:
    for impl in ("native", "python"):
        if IMPLS[impl] is None:
            continue
        with _backend.using(impl):
            check(render(request, style), target_context_tokens=budget, cut=cut, summary=summary)


IMAGE = "iVBORw0KGgo" * 4_000
IMAGE_BODIES = [
    {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": IMAGE}}],
            },
            {"role": "assistant", "content": "a cat " * 200},
            {"role": "user", "content": "and now?"},
        ]
    },
    {
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": IMAGE}}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s" * 4_000},
                    {"type": "text", "text": "a dog " * 200},
                ],
            },
            {"role": "user", "content": "and now?"},
        ],
    },
    {
        "input": [
            {"role": "user", "content": [{"type": "input_image", "image_url": IMAGE}]},
            {"type": "reasoning", "summary": [], "encrypted_content": "e" * 4_000},
            {"type": "message", "role": "assistant", "content": "a bird " * 200},
            {"role": "user", "content": "and now?"},
        ]
    },
]


@pytest.mark.parametrize("k", range(len(IMAGE_BODIES)))
@pytest.mark.usefixtures("offline_tiktoken")
def test_provider_sizing_equals_the_object_path(backend: str, k: int) -> None:
    body = render(IMAGE_BODIES[k], STYLES[k])
    for budget in (300, 2_500, 20_000):
        for image_tokens in (0, 1_600):
            for estimate in (None, "o200k_base"):
                options = {"sizing": "provider", "image_tokens": image_tokens, "estimate_tokens": estimate}
                check(body, target_context_tokens=budget, **options)
    seed = cf.pack_request(body.data, target_context_tokens=10**9).tokens
    provider = cf.pack_request(body.data, target_context_tokens=10**9, sizing="provider", image_tokens=1_600).tokens
    assert provider < seed


# Exact counts ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize("name", ENCODINGS)
def test_encodings_equal_the_object_path(backend: str, name: str) -> None:
    requests: list[dict[str, Any]] = [{"model": "m", "tools": TOOLS, "messages": m} for m in openai_corpus()[:12]]
    requests += anthropic_corpus()[:6]
    requests += [responses_request(m) for m in openai_corpus()[:6]]
    for k, request in enumerate(requests):
        body = render(request, STYLES[k % len(STYLES)])
        for budget in (500, 4_000):
            check(body, target_context_tokens=budget, estimate_tokens=name)
        # Exact counts are not chars/4.
        exact = cf.pack_request(body.data, target_context_tokens=10**9, estimate_tokens=name)
        assert exact.tokens != cf.pack_request(body.data, target_context_tokens=10**9).tokens


@pytest.mark.usefixtures("offline_tiktoken")
def test_batches_with_an_encoding_equal_one_by_one(backend: str) -> None:
    bodies: list[Any] = [render(responses_request(m), STYLES[k % 4]).data for k, m in enumerate(openai_corpus())]
    bodies.insert(2, b'{"input": [], "tools": {}}')
    options: dict[str, Any] = {"target_context_tokens": 3_000, "estimate_tokens": "o200k_base"}
    for threads in (1, 2):
        batch = cf.pack_requests(bodies, threads=threads, **options)
        for body, result in zip(bodies, batch, strict=True):
            try:
                alone: Any = cf.pack_request(body, **options)
            except cf.ContextfoldError as exc:
                alone = exc
            assert _same(result, alone)


def test_estimators_and_sizing_options_are_checked(backend: str) -> None:
    data = b'{"messages": [{"role": "user", "content": "hi"}]}'
    with pytest.raises(
        cf.ArgumentError, match=r"an encoding name .*, not builtin_function_or_method: a custom estimator"
    ):
        cf.pack_request(data, target_context_tokens=100, estimate_tokens=len)  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentError, match="unknown encoding 'p50k_base'"):
        cf.pack_request(data, target_context_tokens=100, estimate_tokens="p50k_base")  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentError, match="sizing must be"):
        cf.pack_requests([data], target_context_tokens=100, sizing="exact")  # type: ignore[arg-type]


# Bad bodies -------------------------------------------------------------------------------


def outcome(data: bytes, **options: Any) -> tuple[Any, ...]:
    """What pack_request does: its result's fields, or its error's class and text."""
    try:
        p = cf.pack_request(data, **options)
    except cf.ContextfoldError as exc:
        return (type(exc), str(exc) if not isinstance(exc, cf.RequestError) else "")
    return ("ok", p.fits, p.tokens, p.dropped, p.note, p.kept, canonical(json.loads(p.body)))


def expected(data: bytes, **options: Any) -> tuple[Any, ...]:
    """What the object path does with the same body."""
    try:
        text = data.decode("utf-8")
        request = json.loads(text[1:] if text.startswith("\ufeff") else text)
    except (ValueError, RecursionError):
        return (cf.RequestError, "")
    if not isinstance(request, dict) or not ("messages" in request or "input" in request):
        return (cf.RequestError, "")
    key = packed_key(request)
    instructions = request.get("instructions")
    if key == "input" and instructions is not None and not isinstance(instructions, (str, list)):
        # Named as the body names it (pack_handoff would say 'system').
        return (cf.MessageTypeError, f"instructions: expected str, list or None, got {type(instructions).__name__}")
    try:
        p = handoff(request, **options)
    except cf.ContextfoldError as exc:
        if key == "input" and str(exc).startswith("messages: expected a list"):
            return (type(exc), f"input: expected a list or str, got {type(request['input']).__name__}")
        return (type(exc), str(exc))
    return ("ok", p.fits, p.tokens, p.dropped, p.note, p.kept, canonical(packed_request(request, p)))


BAD = {
    "empty": b"",
    "blank": b" \n\t ",
    "not JSON": b"{messages: []}",
    "trailing garbage": b'{"messages": []} x',
    "two values": b'{"messages": []}{}',
    "not UTF-8": b'{"messages": [{"role": "user", "content": "\xff"}]}',
    "unterminated": b'{"messages": [{"role": "user", "content": "abc',
    "a surrogate pair that ends the text": b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00',
    "control character": b'{"messages": [{"role": "user", "content": "a\x01b"}]}',
    "bad escape": b'{"messages": [{"role": "user", "content": "a\\qb"}]}',
    "not an object": b'[{"role": "user", "content": "hi"}]',
    "a string": b'"messages"',
    "no messages": b'{"model": "m"}',
    "huge integer": b'{"messages": [], "n": ' + b"7" * 4301 + b"}",
    "negative huge integer": b'{"max_tokens": -' + b"9" * 5000 + b', "messages": []}',
    "huge integer after digits in a string": b'{"\xc3\xa9": "\\"' + b"9" * 5000 + b'", "n": ' + b"9" * 5000 + b"}",
    "huge integer after a long fraction": b'{"a": 0.' + b"9" * 5000 + b', "messages": [], "n": ' + b"9" * 5000 + b"}",
    "huge integer after a long exponent": b'{"a": 1e' + b"9" * 5000 + b', "messages": [], "n": ' + b"9" * 5000 + b"}",
    "deep": b'{"messages": [], "x": ' + b"[" * 100_001 + b"]" * 100_001 + b"}",
    "a sign before part of Infinity": b'{"messages": [], "x": -Inf}',
    "a sign before I": b'{"messages": [], "x": -I}',
}
LOADABLE = {
    "messages not a list": b'{"messages": {"role": "user"}}',
    "messages null": b'{"messages": null}',
    "message not an object": b'{"messages": [{"role": "user", "content": "a"}, 3]}',
    "role missing": b'{"messages": [{"content": "a"}]}',
    "content a number": b'{"messages": [{"role": "user", "content": 1.5}]}',
    "tool_calls a dict": b'{"messages": [{"role": "assistant", "content": null, "tool_calls": {}}]}',
    "system a number": b'{"system": 3, "messages": []}',
    "system a number, messages bad": b'{"system": {}, "messages": 1}',
    "tools a dict": b'{"messages": [], "tools": {"name": "f"}}',
    "tools a dict, messages bad": b'{"tools": {}, "messages": 1}',
    "system bad, tools bad": b'{"tools": 1, "system": 2, "messages": []}',
    "a tool not an object": b'{"messages": [], "tools": [{"name": "f"}, "g"]}',
    "tools null": b'{"messages": [{"role": "user", "content": "hi"}], "tools": null}',
    "input a number": b'{"input": 4}',
    "input null": b'{"input": null, "tools": []}',
    "instructions a number": b'{"instructions": 1, "input": []}',
    "instructions a dict, tools bad": b'{"instructions": {}, "tools": 3, "input": 4}',
    "item not an object": b'{"input": [{"role": "user", "content": "a"}, 3]}',
    "call_id not a string": b'{"input": [{"type": "function_call", "call_id": 5, "name": "f", "arguments": ""}]}',
    "item without a role": b'{"input": [{"type": "message", "content": "a"}]}',
    "messages wins over input": b'{"input": [], "messages": [{"content": "a"}]}',
    "a chat body's instructions": b'{"instructions": 1, "messages": []}',
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_bodies_raise_request_errors(backend: str, name: str) -> None:
    with pytest.raises(cf.RequestError) as caught:
        cf.pack_request(BAD[name], target_context_tokens=100)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value)


@pytest.mark.parametrize("name", [n for n in BAD if n != "deep"])
def test_bad_bodies_are_worded_alike_by_both_backends(name: str) -> None:
    # (Deep nesting meets Python's recursion limit in the reference, where json does not
    # say where; the native scanner names the byte. An integer past Python's digit limit
    # was worded by json too, with no byte.)
    said = {}
    for impl in (reference, native_required()):
        with pytest.raises(cf.RequestError) as caught:
            impl.pack_request(BAD[name], cf.PackOptions(target_context_tokens=100), {})
        said[impl] = (str(caught.value), caught.value.offset)
    assert len(set(said.values())) == 1, said


@pytest.mark.parametrize(("limit", "digits"), [(0, 5_000), (1_000, 1_000), (1_000, 1_001), (5_000, 4_301)])
def test_integers_are_held_to_pythons_digit_limit_at_the_call(limit: int, digits: int) -> None:
    # json.loads reads integers as far as sys.set_int_max_str_digits allows when it is
    # called (0: no limit); a body packs, and a gateway reads its head, exactly then.
    body = b'{"messages": [{"role": "user", "content": "hi"}], "n": -' + b"7" * digits + b"}"
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        loads = json.loads(body) if 0 < digits <= limit or limit == 0 else None
        outcomes = {}
        for impl in (reference, native_required()):
            options = cf.PackOptions(target_context_tokens=100)
            batch = impl.pack_requests([body] * 3, options, 2) if impl is not reference else None
            try:
                packed = impl.pack_request(body, options, {})
            except cf.RequestError as error:
                outcomes[impl] = (str(error), error.offset)
                assert batch is None or all(str(e) == str(error) for e in batch)
            else:
                assert json.loads(packed.body) == loads
                outcomes[impl] = packed.body
                assert batch is None or all(p == packed for p in batch)
            outcomes[impl, "head"] = impl.request_head(body)
        assert outcomes[reference] == outcomes[native_required()]
        assert outcomes[reference, "head"] == outcomes[native_required(), "head"]
        if loads is None:
            at = body.index(b"-")
            assert outcomes[reference] == (f"not JSON: an integer of more than {limit} digits at byte {at}", at)
            assert outcomes[reference, "head"] == (None, (None, None, None), None, None)
    finally:
        sys.set_int_max_str_digits(previous)


def test_one_options_value_follows_the_digit_limit_from_call_to_call(backend: str) -> None:
    # The limit is Python's at each call, not at the options' making; a batch and a
    # block of JSONL lines read it as a single body does.
    from contextfold.integrations.dask import pack_lines

    body = b'{"messages": [{"role": "user", "content": "hi"}], "n": ' + b"7" * 5_000 + b"}"
    options = cf.PackOptions(target_context_tokens=100)
    previous = sys.get_int_max_str_digits()
    try:
        for limit, loads in ((4_300, False), (0, True), (6_000, True), (4_300, False)):
            sys.set_int_max_str_digits(limit)
            if loads:
                assert json.loads(cf.pack_request(body, options=options).body) == json.loads(body)
                batch = cf.pack_requests([body] * 3, options=options, threads=2)
                assert all(not isinstance(p, Exception) for p in batch)
                assert json.loads(pack_lines([body], options=options)[0]) == json.loads(body)
            else:
                with pytest.raises(cf.RequestError, match="more than 4300 digits"):
                    cf.pack_request(body, options=options)
                assert all(isinstance(p, cf.RequestError) for p in cf.pack_requests([body] * 3, options=options))
                assert "more than 4300 digits" in pack_lines([body], options=options)[0]
    finally:
        sys.set_int_max_str_digits(previous)


def test_a_python_without_a_digit_limit_reads_any_integer() -> None:
    # Python 3.10.0 to 3.10.6 have no limit, nor sys.get_int_max_str_digits: the native
    # bytes path then reads every integer (it raised AttributeError on every call).
    native_required()
    script = (
        "import sys; del sys.get_int_max_str_digits\n"
        "from contextfold import _backend, _native\n"
        "import contextfold as cf\n"
        "body = b'{\"messages\": [], \"n\": ' + b'7' * 5000 + b'}'\n"
        "with _backend.using(_native):\n"
        "    packed = cf.pack_request(body, target_context_tokens=10)\n"
        "print(packed.body == body, _native.request_head(b'{}') is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_request_errors_name_the_byte(backend: str) -> None:
    with pytest.raises(cf.RequestError, match="byte 16") as caught:
        cf.pack_request(b'{"messages": [1,]}', target_context_tokens=100)
    assert caught.value.offset == 16
    with pytest.raises(cf.RequestError, match="not UTF-8") as caught:
        cf.pack_request(BAD["not UTF-8"], target_context_tokens=100)
    assert caught.value.offset == BAD["not UTF-8"].index(b"\xff")


def _wide_object(n: int) -> str:
    """The members of an object of ``n`` keys whose first key comes again last."""
    return ",".join(f'"k{i}":{i}' for i in range(n)) + ',"k0":"last"'


WIDE = _wide_object(64_000)
HOSTILE_KEYS = {
    "a content part": '{"messages":[%s{"role":"user","content":[{"type":"text","text":"hi",%s}]}]}',
    "a tool": '{"tools":[{%s}],"messages":[%s{"role":"user","content":"hi"}]}',
    "a Responses item": '{"input":[%s{"type":"message","role":"user","content":"hi",%s}]}',
}


@pytest.mark.parametrize("name", list(HOSTILE_KEYS))
def test_a_repeated_key_among_many_packs_as_json_loads_reads_it(backend: str, name: str) -> None:
    # One repeated key in a 64,000-key object made the scanner quadratic (35 s a body);
    # the work it does now is held linear by the core's tests, and the result is the
    # object path's, repeat resolved as json.loads resolves it.
    history = '{"role":"user","content":"%s"},{"role":"assistant","content":"ok"},' % ("w " * 300)
    template = HOSTILE_KEYS[name]
    text = template % (WIDE, history * 3) if name == "a tool" else template % (history * 3, WIDE)
    data = text.encode()
    for budget, dropped in ((10**6, 0), (100, 5)):
        request, pack = object_path(data, target_context_tokens=budget)
        packed = cf.pack_request(data, target_context_tokens=budget)
        assert (packed.fits, packed.tokens, packed.dropped, packed.kept) == (
            pack.fits,
            pack.tokens,
            pack.dropped,
            pack.kept,
        )
        assert canonical(json.loads(packed.body)) == canonical(packed_request(request, pack))
        assert packed.dropped >= dropped


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize("estimate", [None, "o200k_base"])
def test_a_repeated_key_is_read_where_json_loads_keeps_it(backend: str, estimate: str | None) -> None:
    # json.loads keeps a repeated key where it first appears, with its last value; an
    # exact count reads the keys in order (the bytes path read it where it last appeared,
    # and counted other tokens than the object path: a message folded that fits).
    block = '{"type":"a","zz":"hello world","cache_control":1.5,"type":"b"}'
    call = '{"id":"!!","type":"function","function":{"name":"f","arguments":"{}"},"id":"??"}'
    messages = [
        f'{{"role":"user","content":[{block}]}}',
        f'{{"role":"assistant","content":null,"tool_calls":[{call}]}}',
        f'{{"role":"tool","tool_call_id":"??","content":"{"result line " * 40}"}}',
        '{"role":"user","content":"go on"}',
    ]
    data = f'{{"messages":[{",".join(messages)}]}}'.encode()
    whole = cf.pack_handoff(json.loads(data)["messages"], target_context_tokens=10**6, estimate_tokens=estimate)
    for budget in (10**6, whole.tokens, whole.tokens - 1):
        request, pack = object_path(data, target_context_tokens=budget, estimate_tokens=estimate)
        packed = cf.pack_request(data, target_context_tokens=budget, estimate_tokens=estimate)  # type: ignore[arg-type]
        assert (packed.fits, packed.tokens, packed.kept) == (pack.fits, pack.tokens, pack.kept)
        assert canonical(json.loads(packed.body)) == canonical(packed_request(request, pack))


@pytest.mark.parametrize("name", list(LOADABLE))
def test_loadable_bodies_raise_what_pack_handoff_raises(backend: str, name: str) -> None:
    data = LOADABLE[name]
    assert outcome(data, target_context_tokens=100) == expected(data, target_context_tokens=100)
    assert outcome(data, target_context_tokens=100)[0] is not cf.RequestError


def test_bad_tools_and_items_name_the_index_and_field(backend: str) -> None:
    cases = [
        (LOADABLE["tools a dict"], "tools: expected a list or None, got dict", None, "tools"),
        (LOADABLE["a tool not an object"], "tools[1]: expected a dict, got str", 1, "tools"),
        (LOADABLE["instructions a number"], "instructions: expected str, list or None, got int", None, "instructions"),
        (LOADABLE["input a number"], "input: expected a list or str, got int", None, ""),
        (LOADABLE["item not an object"], "message 1: expected a dict, got int", 1, ""),
        (LOADABLE["call_id not a string"], "message 0, field 'call_id'", 0, "call_id"),
    ]
    for data, text, index, field in cases:
        with pytest.raises(cf.MessageTypeError, match=re.escape(text)) as caught:
            cf.pack_request(data, target_context_tokens=100)
        assert (caught.value.index, caught.value.field) == (index, field)


def test_pinned_out_of_range_and_bad_options(backend: str) -> None:
    data = b'{"messages": [{"role": "user", "content": "hi"}]}'
    with pytest.raises(cf.ArgumentError, match="pinned index 3 is out of range for 1 messages"):
        cf.pack_request(data, target_context_tokens=100, pinned=[3])
    with pytest.raises(cf.ArgumentError, match="reserve_output_tokens"):
        cf.pack_request(data, target_context_tokens=100, reserve_output_tokens=200)
    with pytest.raises(cf.ArgumentError, match="shape"):
        cf.pack_request(data, target_context_tokens=100, shape="gemini")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="body must be bytes"):
        cf.pack_request(42, target_context_tokens=100)  # type: ignore[arg-type]


def mutations(data: bytes) -> st.SearchStrategy[bytes]:
    def mutate(edits: list[tuple[int, int, int]]) -> bytes:
        out = bytearray(data)
        for kind, where, byte in edits:
            at = where % (len(out) + 1)
            if kind == 0 and out:
                del out[min(at, len(out) - 1)]
            elif kind == 1:
                out.insert(at, byte)
            elif out:
                out[min(at, len(out) - 1)] = byte
        return bytes(out)

    interesting = st.sampled_from(b'{}[]",:\\ 0123456789-eE.tfnNIu\x00\x1f\xc3\xa9\xff')
    edit = st.tuples(st.integers(0, 2), st.integers(0, 10**6), st.one_of(interesting, st.integers(0, 255)))
    return st.lists(edit, min_size=1, max_size=4).map(mutate)


SEED = render(
    {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "first \u00e9 question " * 20},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": [1, 2.5]}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "line\n" * 30},
            {"role": "user", "content": [{"type": "text", "text": "now \ud83d\ude00"}]},
        ],
    },
    STYLES[3],
).data


RESPONSES_SEED = render(
    {
        "instructions": "Be brief.",
        "tools": RESPONSES_TOOLS,
        "input": [
            *responses_items(json.loads(SEED)["messages"]),
            {"type": "reasoning", "summary": [], "encrypted_content": "x"},
        ],
    },
    STYLES[2],
).data


@examples(400)
@given(st.one_of(st.binary(max_size=80), mutations(SEED), mutations(RESPONSES_SEED)), st.integers(0, 200))
def test_arbitrary_and_mutated_bodies_never_crash(data: bytes, budget: int) -> None:
    for impl in ("native", "python"):
        if IMPLS[impl] is None:
            continue
        with _backend.using(impl):
            assert outcome(data, target_context_tokens=budget) == expected(data, target_context_tokens=budget)


# Inputs, batches ---------------------------------------------------------------------------


def test_body_types_and_identity(backend: str) -> None:
    data = render({"messages": openai_corpus()[0]}, STYLES[0]).data
    small = cf.pack_request(data, target_context_tokens=10**7)
    assert small.body is data and small.fits and small.dropped == 0
    packed = cf.pack_request(data, target_context_tokens=800)
    for other in (bytearray(data), memoryview(data), data.decode("utf-8")):
        assert cf.pack_request(other, target_context_tokens=800) == packed
    copied = cf.pack_request(bytearray(data), target_context_tokens=10**7).body
    assert type(copied) is bytes and copied == data
    with pytest.raises(cf.RequestError, match="lone surrogate"):
        cf.pack_request('{"messages": ["\ud800"]}', target_context_tokens=100)


def test_equal_to_json_loads_means_of_the_bodys_utf8_text(backend: str) -> None:
    # What the README means: pack_handoff on json.loads of the body decoded as strict UTF-8
    # (a str as given), a leading byte-order mark skipped. json.loads takes more bytes than
    # that: UTF-16 and UTF-32 bodies, surrogates encoded in UTF-8 (it decodes them with
    # surrogatepass); both backends refuse those as not UTF-8.
    text = '{"messages": [{"role": "user", "content": "a"}]}'
    for body in (text.encode("utf-16"), text.encode("utf-32"), text.encode().replace(b'"a"', b'"\xed\xa0\x80"')):
        assert json.loads(body)["messages"]
        with pytest.raises(cf.RequestError, match=r"^not UTF-8"):
            cf.pack_request(body, target_context_tokens=100)
    for body in (b"\xef\xbb\xbf" + text.encode(), "\ufeff" + text):  # json.loads refuses the str one
        assert cf.pack_request(body, target_context_tokens=100).kept == [0]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Exception) or isinstance(b, Exception):
        return type(a) is type(b) and str(a) == str(b)
    return bool(a == b)


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_batches_equal_one_by_one(backend: str, threads: int) -> None:
    bodies: list[Any] = [render({"messages": m}, STYLES[k % 4]).data for k, m in enumerate(openai_corpus())]
    released = memoryview(bodies[0])
    released.release()  # bytes() of it raises ValueError: that body's outcome, the batch goes on
    bodies[3:3] = [BAD["not JSON"], LOADABLE["role missing"], 17, bytearray(bodies[0]), released]
    options: dict[str, Any] = {"target_context_tokens": 2_000, "cut": "chunked"}
    batch = cf.pack_requests(bodies, threads=threads, **options)
    assert len(batch) == len(bodies)
    for body, result in zip(bodies, batch, strict=True):
        try:
            alone: Any = cf.pack_request(body, **options)
        except (cf.ContextfoldError, TypeError, ValueError) as exc:
            alone = exc
        assert _same(result, alone)
    assert isinstance(batch[7], ValueError) and "released" in str(batch[7])
    with pytest.raises(cf.ArgumentError, match=r"^target_context_tokens must be at least 0, got -1$"):
        cf.pack_requests(bodies, target_context_tokens=-1)
    with pytest.raises(cf.ArgumentError, match=r"^threads must be at least 1, got 0$"):
        cf.pack_requests(bodies, target_context_tokens=100, threads=0)


_HEAD_KEYS = ["model", "max_tokens", "max_completion_tokens", "max_output_tokens", "messages", "input", "other"]
_HEAD_VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.sampled_from(_HEAD_KEYS), st.integers(), max_size=2),
)


@examples(300, deadline=None)
@given(members=st.lists(st.tuples(st.sampled_from(_HEAD_KEYS), _HEAD_VALUES), max_size=8), spaced=st.booleans())
def test_request_head_reads_what_json_loads_reads(members: list[tuple[str, Any]], spaced: bool) -> None:
    """Keys may repeat (the last counts), caps may be any JSON value; natively, None stands
    only for a cap past 2**63 - 1, which the gateway then reads with json.loads."""
    native = native_required()
    separator = ", " if spaced else ","
    body = ("{" + separator.join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in members) + "}").encode()
    expected = reference.request_head(body)
    got = native.request_head(body)
    if got is None:
        assert expected is not None and any(cap is not None and cap > 2**63 - 1 for cap in expected[1])
    else:
        assert got == expected
    assert native.request_head(b"[" + body + b"]") == reference.request_head(b"[" + body + b"]")
    assert native.request_head(body[:-1]) == reference.request_head(body[:-1]) == (None, (None, None, None), None, None)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_request_head_reads_a_body_as_packing_reads_it(encoding: str) -> None:
    # json.loads takes UTF-16 and UTF-32 bytes; packing takes UTF-8 only (a BOM skipped):
    # a head read from a body packing refuses would name a model and caps it never packs.
    body = '{"model": "gpt", "max_tokens": 100, "messages": [1, 2]}'.encode(encoding)
    readable = encoding == "utf-8-sig"
    expected = ("gpt", (None, 100, None), 2, None) if readable else (None, (None, None, None), None, None)
    for impl in (reference, native_required()):
        assert impl.request_head(body) == expected, impl
