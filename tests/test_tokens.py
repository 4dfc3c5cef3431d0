"""Token estimation (SPEC §3) and bad input (SPEC §10), on both backends."""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from typing import Any

import contextfold as cf
import numpy as np
import pytest
from contextfold import _backend
from contextfold._js import compact_json
from hypothesis import given
from hypothesis import strategies as st

from .conftest import IMPLS, examples
from .hostile_types import LyingStr
from .offline_tiktoken import tiktoken_encoding
from .strategies import transcripts


def test_estimate_counts_utf16_units(backend: str) -> None:
    assert cf.estimate_tokens("") == 0
    assert cf.estimate_tokens("abcd") == 1
    assert cf.estimate_tokens("abcde") == 2
    assert cf.estimate_tokens("😀😀") == 1  # 4 UTF-16 units
    assert cf.estimate_tokens("😀😀a") == 2
    assert cf.estimate_tokens("\ud83d") == 1  # a lone surrogate is one unit


@pytest.mark.parametrize(
    ("message", "chars"),
    [
        ({"role": "user", "content": "hello"}, 5),
        ({"role": "user", "content": None}, 2),  # JSON.stringify('') is ""
        ({"role": "user"}, 2),
        ({"role": "assistant", "content": "", "tool_calls": []}, 2),  # [] is truthy
        ({"role": "user", "content": [1.0]}, 3),  # [1]
        ({"role": "user", "content": [1e21, 1e-7]}, len("[1e+21,1e-7]")),
        ({"role": "user", "content": [float("nan"), float("inf")]}, len("[null,null]")),
        ({"role": "user", "content": [2**53 + 1]}, len("[9007199254740992]")),
        ({"role": "user", "content": [10**400]}, len("[null]")),
        ({"role": "user", "content": ["\ud83d"]}, len('["\\ud83d"]')),
        ({"role": "user", "content": ["\ud83d\ude00"]}, 6),
        ({"role": "user", "content": ["é\n\x01"]}, len('["é\\n\\u0001"]')),
        ({"role": "user", "content": [{"a": True, "b": None}]}, len('[{"a":true,"b":null}]')),
    ],
)
def test_message_text_length(backend: str, message: dict[str, Any], chars: int) -> None:
    assert cf.message_tokens(message) == math.ceil(chars / 4) + 4


def test_compact_json_matches_javascript() -> None:
    assert (
        compact_json({"b": 1, "2": [1.5, None], "1": "x", "01": False}) == '{"1":"x","2":[1.5,null],"b":1,"01":false}'
    )
    assert compact_json(["\ud800", "😀", 1e21, -0.0, 1e16]) == '["\\ud800","😀",1e+21,0,10000000000000000]'


def test_tokens_of_sums_and_array_matches(backend: str) -> None:
    convo = [{"role": "user", "content": "x" * n} for n in (1, 4, 5, 100)]
    assert cf.tokens_of(convo) == cf.transcript_tokens(convo) == 1 + 1 + 2 + 25 + 16
    array = cf.message_tokens_array(convo)
    assert array.dtype == np.int64
    assert array.tolist() == [cf.message_tokens(m) for m in convo]
    assert cf.message_tokens_array([]).tolist() == []


def test_custom_estimator_sees_content_then_tool_calls(backend: str) -> None:
    seen: list[str] = []

    def words(text: str) -> int:
        seen.append(text)
        return len(text.split())

    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": "two words", "tool_calls": [call]}
    assert cf.message_tokens(message, estimate_tokens=words) == 2 + 4
    assert seen == ['two words[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]']
    assert cf.tokens_of([message, {"role": "user", "content": None}], estimate_tokens=len) == len(seen[0]) + 4 + 2 + 4


def test_deep_nesting_is_handled_without_crash(backend: str) -> None:
    nested: Any = "x"
    for _ in range(10_000):
        nested = [nested]
    assert cf.message_tokens({"role": "user", "content": nested}) == math.ceil((3 + 20_000) / 4) + 4


def test_circular_content_is_an_error_not_a_hang(backend: str) -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(cf.MessageValueError, match="message 0, field 'content'"):
        cf.tokens_of([{"role": "user", "content": loop}])


def test_large_and_odd_strings(backend: str) -> None:
    big = "a" * 10_000_000 + "😀"
    assert cf.message_tokens({"role": "user", "content": big}) == math.ceil(10_000_002 / 4) + 4
    assert cf.message_tokens({"role": "user", "content": "\x00\ud800"}) == 1 + 4


CONTENT = "message 0, field 'content'"
JSON_TYPES = "(None, bool, int, float, str, list or dict)"
BAD: list[tuple[Any, type[Exception], str]] = [
    ("not a list", cf.MessageTypeError, "messages: expected a list, got str"),
    ([1], cf.MessageTypeError, "message 0: expected a dict, got int"),
    ([{"role": "user"}, {"content": "x"}], cf.MessageTypeError, "message 1, field 'role': missing"),
    ([{"role": 3}], cf.MessageTypeError, "message 0, field 'role': expected str, got int"),
    (
        [{"role": "user", "content": 3}],
        cf.MessageTypeError,
        "message 0, field 'content': expected str, list or None, got int",
    ),
    (
        [{"role": "user", "content": {"a": 1}}],
        cf.MessageTypeError,
        "message 0, field 'content': expected str, list or None, got dict",
    ),
    (
        [{"role": "user", "tool_calls": {}}],
        cf.MessageTypeError,
        "message 0, field 'tool_calls': expected list or None, got dict",
    ),
    ([{"role": "user", "content": [{1: "x"}]}], cf.MessageTypeError, f"{CONTENT}: expected str object keys, got int"),
    # A key that is no JSON value at all is still named as a key.
    (
        [{"role": "user", "content": [{(1, 2): "x"}]}],
        cf.MessageTypeError,
        f"{CONTENT}: expected str object keys, got tuple",
    ),
    (
        [{"role": "user", "content": [{b"k": "x"}]}],
        cf.MessageTypeError,
        f"{CONTENT}: expected str object keys, got bytes",
    ),
    (
        [{"role": "user", "content": [{frozenset(): "x"}]}],
        cf.MessageTypeError,
        f"{CONTENT}: expected str object keys, got frozenset",
    ),
    (
        [{"role": "user", "content": [{"a": {1, 2}}]}],
        cf.MessageTypeError,
        f"{CONTENT}: expected a JSON value {JSON_TYPES}, got set",
    ),
]


@pytest.mark.parametrize(("messages", "error", "text"), BAD)
def test_bad_input_names_index_and_field(backend: str, messages: Any, error: type[Exception], text: str) -> None:
    pattern = f"^{re.escape(text)}$"
    with pytest.raises(error, match=pattern) as info:
        cf.tokens_of(messages)
    assert isinstance(info.value, TypeError)
    if "object keys" in text or "got set" in text:
        # Nested values are checked when their message is sized; window_start never sizes
        # a lone user turn, so it has nothing to reject.
        assert cf.window_start(messages) == 0
    else:
        with pytest.raises(error, match=pattern):
            cf.window_start(messages)


def test_error_carries_index_and_field(backend: str) -> None:
    with pytest.raises(cf.MessageTypeError) as info:
        cf.tokens_of([{"role": "user", "content": "ok"}, {"role": "user", "content": 5}])
    assert (info.value.index, info.value.field) == (1, "content")
    with pytest.raises(cf.MessageTypeError, match=r"^message, field 'content'") as one:
        cf.message_tokens({"role": "user", "content": 5})
    assert one.value.index is None


@pytest.mark.parametrize("result", [-1, 1.5, "3", None, True])
def test_custom_estimator_must_return_a_non_negative_int(backend: str, result: Any) -> None:
    wanted = "a non-negative int, got -1" if result == -1 else f"an int, got {type(result).__name__}"
    with pytest.raises(cf.EstimatorError, match=rf"^message 0: estimate_tokens must return {wanted}$"):
        cf.tokens_of([{"role": "user", "content": "x"}], estimate_tokens=lambda _text: result)


def test_estimator_exceptions_propagate_unchanged(backend: str) -> None:
    class Boom(Exception):
        pass

    def fail(_text: str) -> int:
        raise Boom

    with pytest.raises(Boom):
        cf.window_start([{"role": "assistant", "content": "x"}], estimate_tokens=fail)


HI = {"role": "user", "content": "hi"}

# Each path that sizes messages with a custom estimator (``estimate`` stands for it).
SIZING_CALLS: dict[str, Callable[[list[Any], Any], Any]] = {
    "tokens_of": lambda m, estimate: cf.tokens_of(m, estimate_tokens=estimate),
    "message_tokens": lambda m, estimate: [cf.message_tokens(x, estimate_tokens=estimate) for x in m],
    "message_tokens_array": lambda m, estimate: cf.message_tokens_array(m, estimate_tokens=estimate),
    # (a user turn first, so the window has a choice to make and sizes the rest)
    "window_start": lambda m, estimate: cf.window_start([HI, *m], token_budget=4, estimate_tokens=estimate),
    "windowed": lambda m, estimate: cf.windowed([HI, *m], token_budget=4, estimate_tokens=estimate),
    "compact_tail_start_for_budget": lambda m, estimate: cf.compact_tail_start_for_budget(
        m, 10, estimate_tokens=estimate
    ),
    "pack_handoff": lambda m, estimate: cf.pack_handoff(m, target_context_tokens=10, estimate_tokens=estimate),
    "pack_handoff chunked": lambda m, estimate: cf.pack_handoff(
        m, target_context_tokens=10, estimate_tokens=estimate, cut="chunked"
    ),
    "pack_handoff with edits": lambda m, estimate: cf.pack_handoff(
        m, target_context_tokens=10, estimate_tokens=estimate, edits=[cf.ClearToolUses(trigger=0)]
    ),
    "pack_many": lambda m, estimate: cf.pack_many([m, m], target_context_tokens=10, estimate_tokens=estimate),
}


@pytest.mark.parametrize("call", list(SIZING_CALLS))
@pytest.mark.parametrize("raised", [StopIteration, LookupError])
def test_an_estimators_exception_comes_out_as_it_was_raised(backend: str, call: str, raised: type[Exception]) -> None:
    # StopIteration too: a generator the estimator is called from made it a RuntimeError
    # (PEP 479), and map() took it for the end of the sizes (a short sum, no error).
    # The estimator raises on the second message of the first, on the first of the second.
    transcripts = [
        [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": "a long question " * 20},
            {"role": "assistant", "content": "a second answer " * 20},
            {"role": "user", "content": "next"},
        ],
        [{"role": "user", "content": "another question"}, {"role": "assistant", "content": "an answer"}],
    ]
    error = raised("from the estimator")

    def estimate(text: str) -> int:  # raises for every message but the first
        if text not in ("first question", "hi"):
            raise error
        return len(text)

    for messages in transcripts:
        with pytest.raises(raised) as info:
            SIZING_CALLS[call](messages, estimate)
        assert info.value is error


@pytest.mark.parametrize("cut", ["greedy", "chunked"])
def test_an_estimator_stopping_on_the_directive_stops_the_pack(backend: str, cut: str) -> None:
    # The reference summed the directive's segment through map(), which took the
    # StopIteration for the end of the sizes: a pack of the directive at 0 tokens.
    error = StopIteration("from the estimator")

    def estimate(text: str) -> int:
        if "MAGIC" in text:
            raise error
        return len(text)

    core = [{"role": "user", "content": "MAGIC question"}, {"role": "assistant", "content": "an answer"}]
    with pytest.raises(StopIteration) as info:
        cf.pack_handoff(core, target_context_tokens=0, estimate_tokens=estimate, cut=cut)
    assert info.value is error


def test_messages_are_never_mutated(backend: str) -> None:
    convo = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": "yo"}]
    snapshot = repr(convo)
    cf.tokens_of(convo)
    cf.windowed(convo)
    assert repr(convo) == snapshot


@examples(300)
@given(transcripts(), st.integers(-2, 40), st.integers(1, 3_000))
def test_compaction_helpers_never_mutate_their_input(
    convo: list[dict[str, Any]], covered_end: int, budget: int
) -> None:
    # SPEC §2: outputs are new lists holding the caller's own messages; input is never mutated.
    before, members = copy.deepcopy(convo), list(convo)
    for impl in IMPLS.values():
        if impl is None:
            continue  # the extension is not built: the reference alone
        with _backend.using(impl):
            out = cf.assemble_compacted("sys", convo, "note", covered_end)
            assert out is not convo and all(any(m is c for c in convo) for m in out[2:])
            chunks = cf.summary_chunks(convo, budget)
            assert all(chunk is not convo for chunk in chunks)
            assert all(a is b for a, b in zip((m for c in chunks for m in c), convo, strict=True))
    cf.render_for_summary(convo)
    assert convo == before and all(a is b for a, b in zip(convo, members, strict=True))


@pytest.mark.usefixtures("offline_tiktoken")
def test_tiktoken_estimator_is_exact_or_says_why() -> None:
    # SPEC §3: an exact tokenizer (tiktoken, its encoding available offline) is a named estimator.
    from contextfold.estimators import tiktoken_estimator

    estimate = tiktoken_estimator("cl100k_base")
    assert estimate("hello world") == 2  # "hello", " world"
    assert cf.message_tokens({"role": "user", "content": "hello world"}, estimate_tokens=estimate) == 6
    special = "<|endoftext|> naïve 😀"  # special-token text is plain text (SPEC §13: disallowed_special=())
    assert estimate(special) == len(tiktoken_encoding("cl100k_base").encode(special, disallowed_special=())) > 1
    with pytest.raises(cf.ArgumentError, match="tiktoken encoding 'no_such_encoding' is not available offline"):
        tiktoken_estimator("no_such_encoding")


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_a_str_subclass_is_counted_by_the_text_it_holds(backend: str, encoding: str) -> None:
    # Its own len, isascii and encode never run (helper-78 found the reference reading
    # them, and caching the count tiktoken took through its encode for the plain text).
    text = "a lone \ud800 surrogate, naïve 😀 and <|endoftext|>"
    cf.set_count_cache(cf.DEFAULT_COUNT_CACHE_BYTES)  # empty: the lie would be counted first
    assert cf.count_tokens(LyingStr(text), encoding) == cf.count_tokens(text, encoding)
    plain = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")  # as tiktoken reads it
    assert cf.count_tokens(text, encoding) == len(tiktoken_encoding(encoding).encode(plain, disallowed_special=()))
    units = len(text.encode("utf-16-le", "surrogatepass")) // 2
    assert cf.estimate_tokens(LyingStr(text)) == cf.estimate_tokens(text) == -(-units // 4)


def test_million_message_transcripts(backend: str) -> None:
    convo = [{"role": "user", "content": "question"}, {"role": "assistant", "content": "answer " * 10}] * 500_000
    assert cf.tokens_of(convo) == 500_000 * (6 + 22)
    assert len(cf.windowed(convo)) <= 80
    pack = cf.pack_handoff(convo, target_context_tokens=8_000)
    assert pack.fits and pack.tokens <= 8_000 and pack.dropped > 999_000


# sizing="provider" ---------------------------------------------------------------------

PIXELS = "iVBORw0KGgo" * 36_000  # about 400 KB of base64
IMAGES = [
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXELS}"}},  # OpenAI chat
    {"type": "file", "file": {"file_data": PIXELS, "filename": "a.pdf"}},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXELS}},  # Anthropic
    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PIXELS}},
    {"type": "input_image", "image_url": f"data:image/png;base64,{PIXELS}"},  # Responses
    {"type": "input_file", "file_data": PIXELS},
]


@pytest.mark.parametrize("block", IMAGES, ids=lambda b: b["type"])
def test_provider_sizing_counts_an_image_flat(backend: str, block: dict[str, Any]) -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, block]}
    # [{"type":"text","text":"what is this?"},] is 41 units: 11 tokens, + 4.
    assert cf.message_tokens(message, sizing="provider") == 11 + 4 + 1_600
    assert cf.message_tokens(message, sizing="provider", image_tokens=85) == 11 + 4 + 85
    assert cf.message_tokens(message) == math.ceil(len(compact_json(message["content"])) / 4) + 4 > 90_000


def test_provider_sizing_counts_a_computer_use_screenshot_flat(backend: str) -> None:
    # The Agents SDK's computer tool answers with this output: sized by its base64, each
    # screenshot cost about 75,000 tokens where a provider bills one image (helper-85).
    item = {
        "type": "computer_call_output",
        "call_id": "c1",
        "output": {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PIXELS}"},
    }
    # {"type":"computer_call_output","call_id":"c1","output":} is 56 units: 14 tokens, + 4.
    assert cf.message_tokens(item, sizing="provider") == 14 + 4 + 1_600
    assert cf.message_tokens(item) > 90_000


def test_provider_sizing_leaves_signatures_and_encrypted_reasoning_out(backend: str) -> None:
    signature = "S" * 4_000
    thinking = {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": signature}]}
    # [{"type":"thinking","thinking":"hm",}] (the signature's entry left out): 38 units.
    assert cf.message_tokens(thinking, sizing="provider") == 10 + 4
    assert cf.message_tokens(thinking) == 1_017
    redacted = {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "D" * 8_000}]}
    assert cf.message_tokens(redacted, sizing="provider") == 8 + 4  # [{"type":"redacted_thinking",}]
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "E" * 8_000}
    # {"type":"reasoning","id":"rs_1","summary":[],}: 46 units.
    assert cf.message_tokens(item, sizing="provider") == 12 + 4
    assert cf.tokens_of([thinking, redacted], sizing="provider") == 14 + 12


SHOTS = [
    msg
    for i in range(4)
    for msg in (
        {"role": "user", "content": [{"type": "text", "text": f"step {i}"}, IMAGES[2]]},
        {"role": "assistant", "content": f"done {i}"},
    )
]


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize("estimate", [None, "o200k_base", len], ids=["chars", "encoding", "custom"])
def test_provider_sizing_packs_what_seed_sizing_folds(backend: str, estimate: Any) -> None:
    options = {"target_context_tokens": 20_000, "estimate_tokens": estimate}
    seed = cf.pack_handoff(SHOTS, **options)
    provider = cf.pack_handoff(SHOTS, sizing="provider", **options)
    assert seed.dropped > 0 and provider.dropped == 0
    assert provider.tokens == cf.tokens_of(SHOTS, sizing="provider", estimate_tokens=estimate)
    assert cf.pack_many([SHOTS], sizing="provider", **options) == [provider]
    assert list(cf.message_tokens_array(SHOTS, sizing="provider", estimate_tokens=estimate)) == [
        cf.message_tokens(m, sizing="provider", estimate_tokens=estimate) for m in SHOTS
    ]
    # The tools are sized as provider sizing sizes a system message holding them.
    tools = [{"type": "function", "name": "look", "parameters": {}}]
    with_tools = cf.tokens_of(SHOTS, sizing="provider", estimate_tokens=estimate, tools=tools)
    tools_alone = cf.message_tokens({"role": "system", "content": tools}, sizing="provider", estimate_tokens=estimate)
    assert with_tools == provider.tokens + tools_alone


# What provider sizing measures, written out: the compact JSON with each opaque block and
# each left-out entry's key and value written as nothing (their commas and colons kept).
BILLED_TEXTS = [
    (
        {"role": "user", "content": [{"type": "text", "text": "what is this?"}, IMAGES[2]]},
        '[{"type":"text","text":"what is this?"},]',
        1,
    ),
    (
        {"role": "user", "content": [IMAGES[0], {"type": "text", "text": "and?"}, IMAGES[4]]},
        '[,{"type":"text","text":"and?"},]',
        2,
    ),
    (
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "S" * 4_000}]},
        '[{"type":"thinking","thinking":"hm",:}]',
        0,
    ),
    (
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "D" * 800}]},
        '[{"type":"redacted_thinking",:}]',
        0,
    ),
    ({"type": "reasoning", "encrypted_content": "E" * 800, "summary": []}, '{"type":"reasoning",:,"summary":[]}', 0),
    ({"role": "user", "content": "plain text"}, "plain text", 0),
]


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize(("message", "billed", "images"), BILLED_TEXTS)
def test_provider_sizing_counts_what_it_measures_with_any_estimator(
    backend: str, message: dict[str, Any], billed: str, images: int
) -> None:
    # chars/4 measures this text; an encoding counts it; a custom estimator is handed it.
    assert cf.message_tokens(message, sizing="provider") == math.ceil(len(billed) / 4) + 4 + images * 1_600
    for name in ("o200k_base", "cl100k_base"):
        exact = cf.message_tokens(message, sizing="provider", image_tokens=85, estimate_tokens=name)
        assert exact == cf.count_tokens(billed, name) + 4 + images * 85
    seen: list[str] = []

    def estimate(text: str) -> int:
        seen.append(text)
        return len(text)

    assert cf.message_tokens(message, sizing="provider", estimate_tokens=estimate) == len(billed) + 4 + images * 1_600
    assert seen == [billed]


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize("estimate", [None, "o200k_base", len], ids=["chars", "encoding", "custom"])
def test_provider_sizing_saturates_at_the_u64_bound(backend: str, estimate: Any) -> None:
    # Two images at 2**63 each cost more than a u64: the message costs the bound, as the core's sums saturate.
    shots = {"role": "user", "content": [{"type": "image"}, {"type": "image"}]}
    options = {"sizing": "provider", "image_tokens": 2**63, "estimate_tokens": estimate}
    assert cf.message_tokens(shots, **options) == 2**64 - 1
    pack = cf.pack_handoff([shots, {"role": "user", "content": "q"}], target_context_tokens=100, **options)
    assert pack.fits and pack.kept == [1]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"sizing": "exact"}, "sizing must be 'seed' or 'provider', not 'exact'"),
        ({"sizing": "provider", "image_tokens": -1}, "image_tokens must be at least 0, got -1"),
        ({"sizing": "provider", "estimate_tokens": "p50k_base"}, "unknown encoding 'p50k_base'"),
    ],
)
def test_bad_sizing_options_are_named(backend: str, kwargs: dict[str, Any], text: str) -> None:
    message = {"role": "user", "content": "x"}
    for call in (
        lambda: cf.message_tokens(message, **kwargs),
        lambda: cf.tokens_of([message], **kwargs),
        lambda: cf.pack_handoff([message], target_context_tokens=10, **kwargs),
        lambda: cf.pack_many([[message]], target_context_tokens=10, **kwargs),
    ):
        with pytest.raises(cf.ArgumentError, match=re.escape(text)):
            call()


@pytest.mark.slow
def test_a_100_mb_content_is_sized_packed_and_read_as_bytes(backend: str) -> None:
    # SPEC §10: 100 MB contents are handled without a crash, on every path.
    big = "a" * 100_000_000
    assert cf.message_tokens({"role": "user", "content": big}) == 25_000_000 + 4
    messages = [
        {"role": "user", "content": big},
        {"role": "assistant", "content": "read it"},
        {"role": "user", "content": "now summarise"},
    ]
    whole = cf.pack_handoff(messages[:1], target_context_tokens=25_000_004)
    assert whole.fits and whole.dropped == 0 and whole.tokens == 25_000_004
    pack = cf.pack_handoff(messages, target_context_tokens=1_000)
    assert pack.fits and pack.kept == [1, 2] and pack.dropped == 1
    assert pack.note is not None and "\n- user: aaaa" in pack.note and len(pack.note) < 1_000
    body = json.dumps({"model": "m", "messages": messages}).encode()
    packed = cf.pack_request(body, target_context_tokens=1_000)
    assert (packed.kept, packed.fits, packed.tokens, packed.dropped, packed.note) == (
        pack.kept,
        pack.fits,
        pack.tokens,
        pack.dropped,
        pack.note,
    )
    assert json.loads(packed.body)["messages"] == pack.messages
