"""LiteLLM hook and drop-ins, in process, on corpus transcripts."""

from __future__ import annotations

import asyncio
import copy
import json
import os
from typing import Any

import contextfold as cf
import pytest

from ..conftest import anthropic_corpus, openai_corpus
from ..hostile_types import claiming
from . import need
from .pairing import assert_segments_whole, kept_positions, openai_segments

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM's bundled map: no network
litellm = need("litellm", "litellm")
cfl = need("contextfold.integrations.litellm", "litellm")


def tool_definitions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A definition for each tool a transcript calls (the corpus keeps no schemas)."""
    names = sorted({c["function"]["name"] for m in messages for c in m.get("tool_calls") or []})
    return [
        {"type": "function", "function": {"name": n, "description": f"Runs {n}.", "parameters": {"type": "object"}}}
        for n in names
    ]


def segments(messages: list[dict[str, Any]]) -> list[list[int]]:
    return openai_segments([m["role"] for m in messages], [bool(m.get("tool_calls")) for m in messages])


def hook_call(hook: Any, data: dict[str, Any], call_type: str = "acompletion") -> dict[str, Any]:
    return asyncio.run(hook.async_pre_call_hook(None, None, data, call_type))  # type: ignore[no-any-return]


@pytest.mark.parametrize("window", [2_000, 6_000])
def test_hook_packs_chat_requests_with_reserve_and_tools_counted(window: int) -> None:
    hook = cfl.ContextfoldHook(windows={"gpt-4o": window})
    folded = 0
    for messages in openai_corpus():
        tools = tool_definitions(messages)
        data = {"model": "gpt-4o", "messages": messages, "max_tokens": 300, "tools": tools}
        out = hook_call(hook, data)
        assert out is data
        kept, others = kept_positions(messages, out["messages"])
        assert_segments_whole(segments(messages), kept)
        assert len(others) <= 1  # the note
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if users:
            assert users[-1] in kept
        reserve = 300 + (cf.message_tokens({"role": "system", "content": tools}) if tools else 0)
        if cf.tokens_of(messages) <= window - reserve:
            assert out["messages"] is messages  # a request that fits is left as it came
        elif cf.tokens_of(out["messages"]) <= window - reserve:
            folded += 1
        else:  # only when the must-keep core alone is over
            assert cf.pack_handoff(messages, target_context_tokens=window, reserve_output_tokens=reserve).fits is False
    assert folded >= 10


def test_hook_packs_with_the_requests_tools_and_tool_choice() -> None:
    messages = max(openai_corpus(), key=lambda m: len(tool_definitions(m)))
    tools = tool_definitions(messages)
    choice = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
    data = {"model": "gpt-4o", "messages": messages, "max_tokens": 300, "tools": tools, "tool_choice": choice}
    pack = cfl.ContextfoldHook(window=3_000).pack_request(data)
    assert pack is not None and pack.dropped > 0 and pack.fits
    reserve = 300 + cf.estimate_tokens(cfl.compact_json(choice))
    direct = cf.pack_handoff(
        messages,
        target_context_tokens=3_000,
        reserve_output_tokens=reserve,
        shape="openai",
        tools=tools,
        sizing="provider",
    )
    assert (pack.kept, pack.tokens, pack.budget) == (direct.kept, direct.tokens, direct.budget)
    tools_cost = cf.message_tokens({"role": "system", "content": tools})
    assert pack.tokens == cf.tokens_of(data["messages"]) + tools_cost <= 3_000 - reserve
    assert data["tools"] is tools and data["tool_choice"] is choice
    malformed = {"model": "gpt-4o", "messages": messages, "tools": "all of them"}
    assert hook_call(cfl.ContextfoldHook(window=3_000), malformed)["messages"] is messages  # forwarded as it came


def test_hook_leaves_other_calls_and_unknown_models_alone() -> None:
    messages = max(openai_corpus(), key=cf.tokens_of)
    hook = cfl.ContextfoldHook(window=2_000)
    for call_type in ("aembedding", "atext_completion", "aimage_generation", "pass_through_endpoint"):
        data = {"model": "gpt-4o", "messages": messages, "input": "x"}
        assert hook_call(hook, data, call_type)["messages"] is messages
    unknown = {"model": "no-such-model", "messages": messages}
    assert hook_call(cfl.ContextfoldHook(), unknown)["messages"] is messages
    fallback = {"model": "no-such-model", "messages": messages}
    assert hook_call(cfl.ContextfoldHook(fallback_window=3_000), fallback)["messages"] is not messages
    squeezed = {"model": "gpt-4o", "messages": messages, "max_tokens": 5_000}
    assert hook_call(cfl.ContextfoldHook(window=2_000), squeezed)["messages"] is messages  # no room: untouched


def test_malformed_messages_are_forwarded_unpacked(caplog: pytest.LogCaptureFixture) -> None:
    messages = [*max(openai_corpus(), key=cf.tokens_of), {"role": "user", "content": 7}]
    data = {"model": "gpt-4o", "messages": messages}
    assert hook_call(cfl.ContextfoldHook(window=2_000), data)["messages"] is messages
    assert "forwarded unpacked" in caplog.text and "content" in caplog.text


def test_window_comes_from_litellms_model_map() -> None:
    messages = max(openai_corpus(), key=cf.tokens_of)
    assert cfl.model_window("gpt-4") == litellm.get_model_info("gpt-4")["max_input_tokens"] == 8192
    data = {"model": "gpt-4", "messages": messages, "max_completion_tokens": 1_000}
    packed = hook_call(cfl.ContextfoldHook(), data)["messages"]
    assert 7_000 < cf.tokens_of(packed) <= 8192 - 1_000


def test_settings_from_the_proxy_config(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = max(openai_corpus(), key=cf.tokens_of)
    settings = {"contextfold": {"cut": "chunked", "fallback_window": 4_000, "windows": {"small": 2_000}}}
    monkeypatch.setattr(litellm, "callback_settings", settings)
    hook = cfl.ContextfoldHook(default_reserve=100)
    assert hook.settings()["cut"] == "chunked" and hook.settings()["default_reserve"] == 100
    small = hook_call(hook, {"model": "small", "messages": messages})["messages"]
    other = hook_call(hook, {"model": "unmapped", "messages": messages})["messages"]
    chunked = cf.pack_handoff(messages, target_context_tokens=2_000, reserve_output_tokens=100, cut="chunked")
    assert small == chunked.messages
    assert 2_000 < cf.tokens_of(other) <= 3_900
    monkeypatch.setattr(litellm, "callback_settings", {"contextfold": {"windw": 5}})
    with pytest.raises(cf.ArgumentError, match=r"unknown keys \['windw'\]"):
        cfl.ContextfoldHook()  # when it is built: at the proxy's start-up


def test_tokenizer_setting_counts_with_tiktoken() -> None:
    from litellm.litellm_core_utils.default_encoding import encoding  # puts LiteLLM's tiktoken cache in place

    messages = max(openai_corpus(), key=cf.tokens_of)
    hook = cfl.ContextfoldHook(window=3_000, tokenizer="cl100k_base")
    packed = hook_call(hook, {"model": "gpt-4o", "messages": messages})["messages"]

    def exact(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    assert cf.tokens_of(packed, estimate_tokens=exact) <= 3_000 < cf.tokens_of(messages, estimate_tokens=exact)


def test_hook_packs_anthropic_messages_with_system() -> None:
    hook = cfl.ContextfoldHook(window=1_500)
    folded = 0
    for row in anthropic_corpus():
        messages = row["messages"]
        data = {"model": "claude", "messages": messages, "system": row.get("system"), "max_tokens": 200}
        packed = hook_call(hook, data, "anthropic_messages")["messages"]
        expected = cf.pack_handoff(
            messages,
            target_context_tokens=1_500,
            reserve_output_tokens=200,
            system=row.get("system"),
            shape="anthropic",
            sizing="provider",  # the hook's default: a gateway sees images
        )
        assert kept_positions(messages, packed)[0] == expected.kept
        folded += expected.dropped > 0
    assert folded >= 5


def responses_request(window: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A ``/v1/responses`` body over ``window`` tokens: the longest tool-using corpus run as items."""
    from contextfold.synthetic import responses_items

    messages = max((m for m in openai_corpus() if any(x["role"] == "tool" for x in m)), key=cf.tokens_of)
    items = responses_items(messages)
    tools = [{"type": "function", "name": "run", "description": "Runs.", "parameters": {"type": "object"}}]
    data = {"model": "gpt-4o", "input": items, "instructions": "Be brief.", "tools": tools, "max_output_tokens": 300}
    assert cf.tokens_of(items) > window
    return data, items


@pytest.mark.parametrize("call_type", ["aresponses", "responses"])
def test_hook_packs_responses_requests(call_type: str) -> None:
    data, items = responses_request(3_000)
    before = copy.deepcopy(items)
    out = hook_call(cfl.ContextfoldHook(window=3_000), data, call_type)
    expected = cf.pack_handoff(
        items,
        target_context_tokens=3_000,
        reserve_output_tokens=300,
        shape="responses",
        system="Be brief.",
        tools=data["tools"],
        sizing="provider",
    )
    assert expected.dropped > 0 and expected.fits
    assert out["input"] == expected.messages
    kept, others = kept_positions(items, out["input"])
    assert kept == expected.kept and len(others) == 1  # the caller's own items, and the note
    assert items == before  # the caller's list and items are not changed
    text = {"model": "gpt-4o", "input": "just a question", "max_output_tokens": 300}
    assert hook_call(cfl.ContextfoldHook(window=3_000), text, call_type)["input"] == "just a question"


def test_a_request_only_edited_is_forwarded_edited() -> None:
    messages = max((m for m in openai_corpus() if any(x["role"] == "tool" for x in m)), key=cf.tokens_of)
    window = cf.tokens_of(messages, sizing="provider") - 1  # one token over: clearing old results is enough
    hook = cfl.ContextfoldHook(window=window, edits=[cf.ClearToolUses(keep=1)])
    data = {"model": "gpt-4o", "messages": messages}
    pack = hook.pack_request(data)
    assert pack is not None and pack.dropped == 0 and pack.applied_edits  # edited, nothing folded
    assert data["messages"] is not messages and len(data["messages"]) == len(messages)
    assert any(m.get("content") == "[cleared]" for m in data["messages"])
    assert data["metadata"]["contextfold"]["folded"] is True


def gateway_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The reports logged by the ``contextfold.gateway`` logger, oldest first."""
    return [r.contextfold for r in caplog.records if r.name == "contextfold.gateway"]  # type: ignore[attr-defined]


def test_each_packed_request_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="contextfold.gateway")
    messages = max(openai_corpus(), key=cf.tokens_of)
    hook = cfl.ContextfoldHook(window=3_000)
    data = {"model": "gpt-4o", "messages": messages, "max_tokens": 300, "metadata": {"user": "u1"}}
    hook_call(hook, data)
    tokens_in = cf.tokens_of(messages, sizing="provider")
    expected = {
        "adapter": "litellm",
        "model": "gpt-4o",
        "route": "acompletion",
        "messages_in": len(messages),
        "messages_out": len(data["messages"]),
        "tokens_in": tokens_in,
        "tokens_out": cf.tokens_of(data["messages"], sizing="provider"),
        "budget": 2_700,
        "folded": True,
        "fits": True,
        "dropped": len(messages) - len(data["messages"]) + 1,
        "cleared_tool_uses": 0,
        "cleared_thinking_turns": 0,
    }
    assert data["metadata"] == {"user": "u1", "contextfold": expected}  # where LiteLLM's loggers read it
    assert gateway_records(caplog) == [expected]
    small = {"model": "gpt-4o", "messages": messages[:2]}
    hook_call(hook, small)
    assert small["metadata"]["contextfold"]["folded"] is False
    assert small["metadata"]["contextfold"]["tokens_in"] == small["metadata"]["contextfold"]["tokens_out"]
    core = {"model": "gpt-4o", "messages": [messages[0], {"role": "user", "content": "x" * 20_000}]}
    hook_call(hook, core)
    assert [r.levelname for r in caplog.records if r.name == "contextfold.gateway"] == ["INFO", "INFO", "WARNING"]
    assert hook.counters.snapshot() == {
        "requests": 3,
        "folded": 1,
        "not_fitting": 1,
        "tokens_dropped": tokens_in - expected["tokens_out"],
    }
    uncounted = cfl.ContextfoldHook(window=3_000, count_tokens_in=False)  # spares a pass over the request
    quick = {"model": "gpt-4o", "messages": messages, "max_tokens": 300}
    hook_call(uncounted, quick)
    assert quick["metadata"]["contextfold"] == {**expected, "tokens_in": None}
    assert uncounted.counters.snapshot() == {"requests": 1, "folded": 1, "not_fitting": 0, "tokens_dropped": 0}
    responses, _ = responses_request(3_000)
    responses["litellm_metadata"] = {}  # where the proxy keeps a Responses request's metadata
    hook_call(hook, responses, "aresponses")
    assert responses["litellm_metadata"]["contextfold"]["route"] == "aresponses"
    assert "metadata" not in responses


def test_trim_messages_drop_in() -> None:
    messages = max(openai_corpus(), key=cf.tokens_of)
    before = copy.deepcopy(messages)
    trimmed = cfl.trim_messages(messages, max_tokens=3_000)
    assert messages == before  # the input is not mutated
    kept, others = kept_positions(messages, trimmed)
    assert_segments_whole(segments(messages), kept)
    assert len(others) == 1 and cf.tokens_of(trimmed) <= 3_000
    packed, room = cfl.trim_messages(messages, model="gpt-4", return_response_tokens=True)
    limit = int(8192 * 0.75)
    assert room == limit - cfl.token_counter(model="gpt-4", messages=packed) >= 0  # cl100k_base, as LiteLLM
    assert cfl.trim_messages(messages, model="no-such-model") is messages  # as LiteLLM: unknown model, no change
    # LiteLLM's own function on the same call keeps the shape: a list, or (list, int)
    assert isinstance(litellm.utils.trim_messages(before, max_tokens=3_000), list)


@pytest.mark.parametrize(
    ("keywords", "error", "words"),
    [
        ({"max_tokens": "100"}, cf.ArgumentError, "max_tokens must be an int, got str"),
        ({"max_tokens": 100.5}, cf.ArgumentError, "max_tokens must be an int, got float"),
        ({"max_tokens": True}, cf.ArgumentError, "max_tokens must be an int, got bool"),
        ({"model": "gpt-4o", "trim_ratio": float("nan")}, cf.ArgumentError, "trim_ratio must be a number from 0"),
        ({"model": "gpt-4o", "trim_ratio": "0.5"}, cf.ArgumentError, "trim_ratio must be a number from 0"),
        ({"model": "gpt-4o", "trim_ratio": -0.5}, cf.ArgumentError, "trim_ratio must be a number from 0"),
        ({"model": 5}, cf.ArgumentTypeError, "model must be a str or None, got int"),
        ({"max_tokens": 2**64}, cf.ArgumentError, "max_tokens must be at most"),
        ({"model": "gpt-4o", "trim_ratio": 1e300}, cf.ArgumentError, "trim_ratio 1e\\+300 of gpt-4o's"),
        # An int too long to write is named by its size (its repr raised a ValueError).
        ({"model": "gpt-4o", "trim_ratio": -(10**5000)}, cf.ArgumentError, "got a negative int of 16610 bits"),
        ({"model": "gpt-4o", "trim_ratio": 10**5000}, cf.ArgumentError, "trim_ratio an int of 16610 bits of gpt-4o's"),
    ],
)
@pytest.mark.usefixtures("python_writes_4300_digits")
def test_drop_in_arguments_are_checked_by_name(keywords: dict[str, Any], error: type, words: str) -> None:
    # Each raised a bare TypeError, ValueError or AttributeError, or was taken as it was
    # (a max_tokens of 2.5 packed into nothing).
    messages = [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": "y"}]
    with pytest.raises(error, match=words):
        cfl.trim_messages(messages, **keywords)
    if "model" in keywords and "trim_ratio" not in keywords:
        with pytest.raises(error, match=words):
            cfl.token_counter(messages=messages, **keywords)


def test_token_counter_drop_in() -> None:
    from litellm.litellm_core_utils.default_encoding import encoding

    messages = openai_corpus()[0]
    tools = tool_definitions(max(openai_corpus(), key=lambda m: len(tool_definitions(m))))
    assert cfl.token_counter(messages=messages) == cf.tokens_of(messages) + 3  # the reply's priming, as LiteLLM
    assert cfl.token_counter(messages=messages, count_response_tokens=True) == cf.tokens_of(messages)
    assert cfl.token_counter(messages=messages, count_response_tokens=None) == cf.tokens_of(messages)  # as LiteLLM
    assert cfl.token_counter(model="claude-sonnet-4", text="hello world") == cf.estimate_tokens("hello world")
    assert cfl.token_counter(text=["ab", "cdefg"]) == 1 + 2
    with_tools = cfl.token_counter(messages=messages, tools=tools, tool_choice="auto")
    assert with_tools == cf.tokens_of(messages) + 3 + cf.estimate_tokens(cfl.compact_json(tools))
    plain = [m for m in messages if isinstance(m.get("content"), str) and not m.get("tool_calls")]
    exact = cfl.token_counter(messages=plain, custom_tokenizer={"type": "openai_tokenizer", "tokenizer": encoding})
    assert exact == sum(len(encoding.encode(m["content"], disallowed_special=())) + 4 for m in plain) + 3
    with pytest.raises(ValueError, match="text and messages cannot both be None"):
        cfl.token_counter(model="gpt-4o")
    with pytest.raises(cf.ArgumentError, match="custom_tokenizer"):
        cfl.token_counter(text="x", custom_tokenizer={"type": "sentencepiece"})


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_token_counter_equals_litellms_on_text_messages(model: str) -> None:
    from ..offline_tiktoken import tiktoken_encoding

    tiktoken_encoding("o200k_base" if model == "gpt-4o" else "cl100k_base")
    # Text-only messages (a role and a text) up to 1,024 characters: LiteLLM counts a longer
    # text in 1,024-character pieces (off by about a token a piece), contextfold counts it
    # whole, as tiktoken does; and LiteLLM counts every other string field too (a tool
    # message's tool_call_id, a name), contextfold what packing counts.
    texts = [
        [
            m
            for m in run
            if m.keys() == {"role", "content"} and isinstance(m["content"], str) and len(m["content"]) <= 1_024
        ]
        for run in openai_corpus()
    ]
    runs = [run for run in texts if run]
    assert sum(map(len, runs)) > 200
    for run in runs:
        assert cfl.token_counter(model=model, messages=run) == litellm.token_counter(model=model, messages=run)


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("openai/gpt-4o-mini", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("azure/gpt-5.1-codex", "o200k_base"),
        ("o1-preview", "o200k_base"),
        ("o3", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo-2024-04-09", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-sonnet-4", None),
        ("o3x", None),
        ("", None),
    ],
)
def test_token_counter_counts_in_the_models_encoding(model: str, encoding: str | None) -> None:
    from ..offline_tiktoken import tiktoken_encoding

    messages = [
        m for m in max(openai_corpus(), key=len) if isinstance(m.get("content"), str) and not m.get("tool_calls")
    ]
    if encoding is None:  # a model outside OpenAI's families: ⌈UTF-16 length / 4⌉, as before
        assert cfl.token_counter(model=model, messages=messages) == cf.tokens_of(messages) + 3
        return
    exact = tiktoken_encoding(encoding)
    expected = sum(len(exact.encode(m["content"], disallowed_special=())) + 4 for m in messages) + 3
    assert cfl.token_counter(model=model, messages=messages) == expected != cf.tokens_of(messages) + 3
    assert cfl.token_counter(model=model, text="hello world") == len(exact.encode("hello world"))


def test_token_counter_sizes_images_as_the_provider_bills() -> None:
    from ..offline_tiktoken import tiktoken_encoding

    _, messages = screenshot_request()
    before = copy.deepcopy(messages)
    assert cfl.token_counter(messages=messages) == cf.tokens_of(messages, sizing="provider") + 3
    o200k = tiktoken_encoding("o200k_base")
    *texts, last = messages
    # The image written as nothing, its comma kept: the text chars/4 measures.
    question = json.dumps(last["content"][:1], separators=(",", ":"), ensure_ascii=False)[:-1] + ",]"
    expected = sum(len(o200k.encode(m["content"])) + 4 for m in texts) + len(o200k.encode(question)) + 4 + 1_600 + 3
    assert cfl.token_counter(model="gpt-4o", messages=messages) == expected
    assert cfl.token_counter(model="gpt-4o", messages=messages, image_tokens=85) == expected - 1_600 + 85
    assert messages == before  # the caller's messages are not changed


def test_looked_up_windows_are_reused_for_window_cache_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[str] = []
    real = litellm.get_model_info

    def counting(model: str, *args: Any, **kwargs: Any) -> Any:
        lookups.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(litellm, "get_model_info", counting)
    messages = openai_corpus()[0]
    cached, uncached = cfl.ContextfoldHook(), cfl.ContextfoldHook(window_cache_seconds=0)
    for _ in range(3):
        hook_call(cached, {"model": "gpt-4", "messages": messages})
    assert lookups == ["gpt-4"]
    for _ in range(3):
        hook_call(uncached, {"model": "gpt-4", "messages": messages})
    assert lookups == ["gpt-4"] * 4


@pytest.mark.parametrize(
    ("choice", "error"),
    [
        ({"type": "function", "function": {"name": object()}}, cf.MessageTypeError),
        ({"type": "function", "function": {"name": "run", "strict": {1, 2}}}, cf.MessageTypeError),
        ({(1, 2): "function"}, cf.MessageTypeError),
        ([[[]] * 2] * 2 + [None], None),  # JSON: counted
    ],
)
def test_a_tool_choice_is_counted_as_json_or_named(
    choice: Any, error: type[Exception] | None, caplog: pytest.LogCaptureFixture
) -> None:
    messages = max(openai_corpus(), key=cf.tokens_of)
    data = {"model": "gpt-4o", "messages": messages, "tool_choice": choice}
    if error is None:
        assert hook_call(cfl.ContextfoldHook(window=3_000), data)["messages"] is not messages
        assert cfl.token_counter(text="", tool_choice=choice) == cf.estimate_tokens("[[[],[]],[[],[]],null]")
        return
    assert hook_call(cfl.ContextfoldHook(window=3_000), data)["messages"] is messages  # forwarded as it came
    assert "forwarded unpacked" in caplog.text and "tool_choice" in caplog.text
    with pytest.raises(error, match="tool_choice"):
        cfl.token_counter(messages=messages, tool_choice=choice)


def test_a_circular_tool_choice_is_named() -> None:
    choice: dict[str, Any] = {"type": "function"}
    choice["function"] = choice
    with pytest.raises(cf.MessageValueError, match="tool_choice"):
        cfl.token_counter(text="x", tool_choice=choice)


def screenshot_request() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A short run whose latest user turn carries one 600 KB base64 screenshot."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0K" * 75_000}}
    messages = [
        {"role": "system", "content": "You look at screens."},
        *[{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: " + "x" * 400} for i in range(16)],
        {"role": "user", "content": [{"type": "text", "text": "What is wrong here?"}, image]},
    ]
    return {"model": "gpt-4o", "messages": messages, "max_tokens": 500}, messages


def test_the_hook_sizes_images_as_providers_bill_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    data, messages = screenshot_request()
    provider = cf.tokens_of(messages, sizing="provider")
    assert provider <= 6_000 - 500 < cf.tokens_of(messages)  # fits as billed, not by its length
    pack = cfl.ContextfoldHook(window=6_000).pack_request(data)
    assert pack is not None and pack.fits and pack.dropped == 0 and pack.tokens == provider
    assert data["messages"] is messages
    monkeypatch.setattr(litellm, "callback_settings", {"contextfold": {"sizing": "seed", "window": 6_000}})
    seed = cfl.ContextfoldHook().pack_request(dict(data))  # the seeds' sizing, as configured
    assert seed is not None and seed.dropped > 0
    monkeypatch.setattr(litellm, "callback_settings", {"contextfold": {"sizing": "provider", "image_tokens": 5_000}})
    costly = cfl.ContextfoldHook(window=6_000).pack_request(dict(data))
    assert costly is not None and costly.tokens < provider + 5_000 - 1_600 and costly.dropped > 0
    monkeypatch.setattr(litellm, "callback_settings", {})
    exact = cfl.ContextfoldHook(window=6_000, tokenizer="o200k_base")  # exact counts, images as billed
    assert exact.settings()["sizing"] == "provider"
    counted = exact.pack_request(dict(data))
    assert counted is not None and counted.fits and counted.dropped == 0
    assert counted.tokens == cf.tokens_of(messages, sizing="provider", estimate_tokens="o200k_base")


def test_the_hook_takes_every_pack_option_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = max((m for m in openai_corpus() if any(x["role"] == "tool" for x in m)), key=cf.tokens_of)
    settings = {
        "window": 3_000,
        "summary": "The run so far: tests fixed.",
        "pinned": [1],
        "edits": [{"clear_tool_uses": {"keep": 2}}, {"clear_thinking": {}}],
        "image_tokens": 1_000,
    }
    monkeypatch.setattr(litellm, "callback_settings", {"contextfold": settings})
    data = {"model": "gpt-4o", "messages": messages}
    pack = cfl.ContextfoldHook().pack_request(data)
    expected = cf.pack_handoff(
        messages,
        target_context_tokens=3_000,
        summary="The run so far: tests fixed.",
        pinned=[1],
        edits=[cf.ClearToolUses(keep=2), cf.ClearThinking()],
        sizing="provider",
        image_tokens=1_000,
        shape="openai",
    )
    assert pack is not None and pack.applied_edits and pack.applied_edits == expected.applied_edits
    assert (pack.kept, pack.note, pack.tokens) == (expected.kept, expected.note, expected.tokens)
    assert 1 in pack.kept and "tests fixed" in (pack.note or "")
    edits = [cf.ClearToolUses(keep=2)]
    assert cfl.ContextfoldHook(edits=edits).settings()["edits"] == tuple(edits)  # objects, from Python


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"sizing": "exact"}, "sizing"),
        ({"image_tokens": -5}, "image_tokens"),
        ({"pinned": ["first"]}, "pinned"),
        ({"summary": 5}, "summary"),
        ({"edits": [{"clear_everything": {}}]}, "edits"),
        ({"edits": [{"clear_tool_uses": {"keep": "two"}}]}, "keep"),
        ({"edits": "clear_tool_uses"}, "edits"),
        ({"cut": "chunky"}, "cut"),
        ({"cut": "chunked", "chunk_tokens": 0}, "chunk_tokens"),
        ({"tokenizer": "no_such_encoding"}, "no_such_encoding"),
        ({"window": "8k"}, "window"),
        ({"fallback_window": 0}, "fallback_window"),
        ({"windows": ["gpt-4o"]}, "windows"),
        ({"windows": {"gpt-4o": 8_000.5}}, "gpt-4o"),
        ({"default_reserve": -1}, "default_reserve"),
        ({"window_cache_seconds": "a minute"}, "window_cache_seconds"),
        ({"window_cache_seconds": -1}, "window_cache_seconds"),
        ({"count_tokens_in": "yes"}, "count_tokens_in"),
        # Values whose __class__ claims the type asked for (isinstance believes them):
        ({"windows": {claiming(str): 8_000}}, "windows"),
        ({"windows": claiming(dict)}, "windows"),
        ({"edits": [claiming(dict)]}, "edits"),
        ({"edits": claiming(list)}, "edits"),
        ({"window_cache_seconds": claiming(int)}, "window_cache_seconds"),
        ({"count_tokens_in": claiming(bool)}, "count_tokens_in"),
        ({"summary": claiming(str)}, "summary"),
    ],
)
def test_bad_settings_fail_when_the_hook_is_built(
    settings: dict[str, Any], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(litellm, "callback_settings", {"contextfold": settings})
    with pytest.raises(cf.ArgumentError, match=named):
        cfl.ContextfoldHook()
    monkeypatch.setattr(litellm, "callback_settings", {})
    with pytest.raises(cf.ArgumentError, match=named):
        cfl.ContextfoldHook(**settings)


def test_pins_past_a_short_requests_end_hold_from_the_turn_they_exist_on() -> None:
    # A route pinning message 1 gets one-message requests on the first turn of every
    # conversation: they are packed (and counted), not failed.
    hook = cfl.ContextfoldHook(window=2_000, pinned=[1])
    first = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert hook_call(hook, first)["messages"] == [{"role": "user", "content": "hi"}]
    messages = max(openai_corpus(), key=cf.tokens_of)
    later = {"model": "gpt-4o", "messages": messages}
    pack = hook.pack_request(later)
    assert pack is not None and 1 in pack.kept and pack.dropped > 0
    assert hook.counters.snapshot()["requests"] == 2


def test_trim_messages_sizes_images_as_token_counter_does() -> None:
    _, messages = screenshot_request()
    budget = cfl.token_counter(messages=messages) + 10  # chars/4, the image a flat count
    assert cfl.trim_messages(messages, max_tokens=budget) == messages
    assert len(cfl.trim_messages(messages, max_tokens=budget // 2)) < len(messages)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: cfl.token_counter(model="gpt-4o", text=object()), "text"),
        (lambda: cfl.token_counter(model="gpt-4o", text=claiming(str)), "text"),
        (lambda: cfl.token_counter(text="hi", custom_tokenizer=claiming(dict)), "custom_tokenizer"),
        (lambda: cfl.model_encoding(claiming(str)), "model"),
        (lambda: cfl.trim_messages([{"role": "user", "content": "hi"}], trim_ratio=claiming(float)), "trim_ratio"),
    ],
    ids=["text no str", "text claims str", "tokenizer claims dict", "model claims str", "ratio claims float"],
)
def test_the_drop_ins_refuse_bad_arguments_by_name(call: Any, named: str) -> None:
    """A text that is neither a str nor an iterable of them, and arguments whose
    ``__class__`` claims the type asked for, are contextfold errors naming the argument
    (each was a raw TypeError or AttributeError)."""
    with pytest.raises(cf.ContextfoldError, match=named):
        call()


def test_a_request_whose_dropped_middle_holds_a_bad_message_is_packed_and_reported() -> None:
    """The count of what came in sized every message after the request was rewritten: it
    raised, the hook logged "forwarded unpacked" over a request it had packed, and nothing
    was reported or counted. The count is now unknown (None) and the pack is reported."""
    hook = cfl.ContextfoldHook(window=1_000)
    messages = [{"role": "user", "content": 5}, *[{"role": "user", "content": "x" * 400} for _ in range(50)]]
    data = {"model": "gpt-4o", "messages": [*messages, {"role": "user", "content": "q"}]}
    pack = hook.pack_request(data)
    assert pack is not None and pack.dropped > 0 and data["messages"] == pack.messages
    assert data["metadata"]["contextfold"]["tokens_in"] is None
    assert hook.counters.snapshot()["requests"] == 1


def test_the_windows_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model names come from clients: every distinct one was remembered for good."""
    monkeypatch.setattr(cfl, "model_window", lambda model: 8_000)
    hook = cfl.ContextfoldHook()
    for i in range(3_000):
        hook.window_for(f"model-{i}")
    assert len(hook._windows) <= 1_024


def test_the_drop_ins_take_litellms_message_objects() -> None:
    # A reply's `response.choices[0].message` appended to the history is a litellm Message,
    # which LiteLLM's own token_counter and trim_messages take: the drop-ins refused it
    # ("message 1: expected a dict, got Message"; helper-85).
    reply = litellm.Message(role="assistant", content="hello there " * 10)
    history = [{"role": "user", "content": "hi " * 30}, reply, {"role": "user", "content": "again"}]
    as_dicts = [history[0], reply.model_dump(), history[2]]
    assert cfl.token_counter(model="gpt-4o", messages=history) == cfl.token_counter(model="gpt-4o", messages=as_dicts)
    kept = cfl.trim_messages(history, model="gpt-4o", max_tokens=1_000)
    assert len(kept) == 3 and all(a is b for a, b in zip(kept, history, strict=True))
    trimmed = cfl.trim_messages(history, model="gpt-4o", max_tokens=30)
    assert trimmed[-1] is history[-1] and reply not in trimmed
