"""The ASGI middleware called in process (it needs no framework): what it packs, what it
forwards untouched, and settings refused when it is built."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import contextfold as cf
import pytest
from contextfold.integrations.asgi import PackingMiddleware

MESSAGES = [
    {"role": "user", "content": "x " * 2_000},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "now"},
]
BODY = json.dumps({"model": "m", "messages": MESSAGES}).encode()
JSON = [(b"content-type", b"application/json")]


def forward(
    chunks: list[bytes],
    headers: list[tuple[bytes, bytes]] = JSON,
    middleware: Any = None,
    path: str = "/v1/chat/completions",
    **options: Any,
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The body and headers the app behind the middleware gets for a POST sent in ``chunks``
    (through ``middleware``, a :class:`PackingMiddleware` built around ``app``, when given)."""
    seen: dict[str, Any] = {}
    incoming = [{"type": "http.request", "body": c, "more_body": i + 1 < len(chunks)} for i, c in enumerate(chunks)]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        seen.update(body=body, headers=scope["headers"])

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    if middleware is None:
        middleware = PackingMiddleware(app, **{"target_context_tokens": 300, **options})
    else:
        middleware.app = app
    scope = {"type": "http", "method": "POST", "path": path, "headers": list(headers)}
    asyncio.run(middleware(scope, receive, None))  # type: ignore[arg-type]
    return seen["body"], seen["headers"]


def packed(body: bytes) -> bytes:
    return cf.pack_request(body, target_context_tokens=300, shape="openai").body


def test_a_json_body_is_packed() -> None:
    assert packed(BODY) != BODY
    body, headers = forward([BODY[:100], BODY[100:]])
    assert body == packed(BODY) and (b"content-length", str(len(body)).encode()) in headers


@pytest.mark.parametrize(
    "chunks",
    [[BODY], [BODY[:100], BODY[100:]], [BODY[:-1], BODY[-1:]]],
    ids=["one-chunk", "last-chunk-crosses", "one-byte-over"],
)
def test_a_body_over_max_body_bytes_passes_untouched(chunks: list[bytes]) -> None:
    assert forward(chunks, max_body_bytes=len(BODY) - 1) == (BODY, JSON)
    assert forward(chunks, max_body_bytes=len(BODY))[0] == packed(BODY)  # at the limit: packed


@pytest.mark.parametrize(
    "content_type", [None, b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data; boundary=x"]
)
def test_only_json_content_types_are_packed(content_type: bytes | None) -> None:
    headers = [] if content_type is None else [(b"content-type", content_type)]
    assert forward([BODY], headers) == (BODY, headers)


@pytest.mark.parametrize("content_type", [b"Application/JSON; charset=utf-8", b"application/vnd.api+json"])
def test_json_content_types_with_parameters_or_suffixes_are_packed(content_type: bytes) -> None:
    assert forward([BODY], [(b"content-type", content_type)])[0] == packed(BODY)


SCREENSHOT = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0K" * 10_000}}
IMAGE_BODY = json.dumps(
    {
        "model": "m",
        "messages": [*MESSAGES[:2], {"role": "user", "content": [{"type": "text", "text": "?"}, SCREENSHOT]}],
    }
).encode()


def test_images_are_sized_as_providers_bill_by_default() -> None:
    provider = cf.pack_request(IMAGE_BODY, target_context_tokens=4_000, sizing="provider", shape="openai")
    seed = cf.pack_request(IMAGE_BODY, target_context_tokens=4_000, shape="openai")
    assert provider.body == IMAGE_BODY and provider.fits and not seed.fits  # the image fits as billed
    assert forward([IMAGE_BODY], target_context_tokens=4_000)[0] == provider.body
    assert forward([IMAGE_BODY], target_context_tokens=4_000, sizing="seed")[0] == seed.body
    exact = cf.pack_request(
        IMAGE_BODY, target_context_tokens=4_000, estimate_tokens="o200k_base", sizing="provider", shape="openai"
    )
    assert exact.body == IMAGE_BODY and exact.fits  # exact counts size the image as billed too
    assert forward([IMAGE_BODY], target_context_tokens=4_000, estimate_tokens="o200k_base")[0] == exact.body


def test_every_pack_option_is_taken() -> None:
    options: dict[str, Any] = {
        "summary": "Earlier: setup done.",
        "pinned": [1],
        "edits": [cf.ClearToolUses(keep=1)],
        "image_tokens": 900,
        "cut": "chunked",
        "chunk_tokens": 50,
    }
    body = json.dumps({"model": "m", "messages": [*MESSAGES, *MESSAGES]}).encode()
    expected = cf.pack_request(body, target_context_tokens=300, sizing="provider", shape="openai", **options)
    assert expected.dropped > 0 and b"setup done" in expected.body
    assert forward([body], **options)[0] == expected.body


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"cut": "chunky"}, "cut"),
        ({"cut": "chunked", "chunk_tokens": 0}, "chunk_tokens"),
        ({"estimate_tokens": "p50k_base"}, "encoding"),
        ({"estimate_tokens": len}, "estimate_tokens"),
        ({"reserve_output_tokens": 301}, "reserve_output_tokens"),
        ({"max_body_bytes": -1}, "max_body_bytes"),
        ({"sizing": "exact"}, "sizing"),
        ({"image_tokens": -1}, "image_tokens"),
        ({"summary": 3}, "summary"),
        ({"pinned": [-1]}, "pinned"),
        ({"edits": ["clear"]}, "edits"),
        # A single str was taken letter by letter ("/", "v", "1", ...): nothing was packed.
        ({"chat_paths": "/v1/chat/completions"}, "chat_paths must be an iterable of paths, not a str"),
        ({"messages_paths": b"/v1/messages"}, "messages_paths must be an iterable of paths, not a bytes"),
        ({"responses_paths": 5}, "responses_paths must be an iterable of paths, got int"),
        ({"chat_paths": ["/v1/chat/completions", 7]}, r"chat_paths\[1\] must be a str, got int"),
        ({"chat_paths": [["/a"]]}, r"chat_paths\[0\] must be a str, got list"),
    ],
)
def test_bad_settings_fail_when_the_middleware_is_built(options: dict[str, Any], named: str) -> None:
    with pytest.raises(cf.ArgumentError, match=named):
        PackingMiddleware(lambda *_: None, target_context_tokens=300, **options)  # type: ignore[arg-type]


def test_each_packed_body_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="contextfold.gateway")
    middleware = PackingMiddleware(lambda *_: None, target_context_tokens=300)  # type: ignore[arg-type,return-value]
    out, _ = forward([BODY], middleware=middleware)
    forward([json.dumps({"model": "m", "messages": MESSAGES[1:]}).encode()], middleware=middleware)
    reports = [r.contextfold for r in caplog.records if r.name == "contextfold.gateway"]  # type: ignore[attr-defined]
    tokens_in = cf.tokens_of(MESSAGES, sizing="provider")
    tokens_out = cf.tokens_of(json.loads(out)["messages"], sizing="provider")
    assert reports[0] == {
        "adapter": "asgi",
        "model": "m",
        "route": "/v1/chat/completions",
        "messages_in": 3,
        "messages_out": len(json.loads(out)["messages"]),
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "budget": 300,
        "folded": True,
        "fits": True,
        "dropped": 3 - len(json.loads(out)["messages"]) + 1,
        "cleared_tool_uses": 0,
        "cleared_thinking_turns": 0,
    }
    assert reports[1]["folded"] is False and reports[1]["tokens_in"] == reports[1]["tokens_out"]
    assert middleware.counters.snapshot() == {
        "requests": 2,
        "folded": 1,
        "not_fitting": 0,
        "tokens_dropped": tokens_in - tokens_out,
    }
    uncounted = PackingMiddleware(lambda *_: None, target_context_tokens=300, count_tokens_in=False)  # type: ignore[arg-type,return-value]
    forward([BODY], middleware=uncounted)
    assert [r.contextfold for r in caplog.records if r.name == "contextfold.gateway"][-1]["tokens_in"] is None  # type: ignore[attr-defined]


def respond(body: bytes, **options: Any) -> list[dict[str, Any]]:
    """What the client is sent for a POST of ``body`` through the middleware, in front of an
    app that reads the request and answers ``{}``."""
    sent: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body", False):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    middleware = PackingMiddleware(app, **{"target_context_tokens": 300, **options})
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": list(JSON)}
    asyncio.run(middleware(scope, receive, send))
    return sent


def test_reports_are_response_headers_when_asked() -> None:
    edited = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "look"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "y " * 900},
                *MESSAGES,
            ],
        }
    ).encode()
    start, body = respond(edited, report_headers=True, edits=[cf.ClearToolUses(keep=0)])
    headers = dict(start["headers"])
    pack = cf.pack_request(
        edited, target_context_tokens=300, shape="openai", sizing="provider", edits=[cf.ClearToolUses(keep=0)]
    )
    whole = cf.pack_request(edited, target_context_tokens=10**9, shape="openai", sizing="provider")
    assert headers == {
        b"content-type": b"application/json",  # the app's own, kept
        b"x-contextfold-messages-in": b"6",
        b"x-contextfold-messages-out": str(len(pack.kept) + 1).encode(),
        b"x-contextfold-dropped": str(pack.dropped).encode(),
        b"x-contextfold-tokens-in": str(whole.tokens).encode(),
        b"x-contextfold-tokens-out": str(pack.tokens).encode(),
        b"x-contextfold-budget": b"300",
        b"x-contextfold-folded": b"true",
        b"x-contextfold-fits": b"true",
        b"x-contextfold-cleared-tool-uses": b"1",
        b"x-contextfold-cleared-thinking-turns": b"0",
    }
    assert pack.dropped > 0 and body == {"type": "http.response.body", "body": b"{}"}
    assert respond(edited)[0]["headers"] == [(b"content-type", b"application/json")]  # not asked: none
    counted = dict(respond(BODY, report_headers=True, count_tokens_in=False)[0]["headers"])
    assert b"x-contextfold-tokens-in" not in counted and counted[b"x-contextfold-tokens-out"]


def test_reports_are_span_attributes_when_opentelemetry_is_there() -> None:
    trace = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is in the integrations extra")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("request"):
        respond(BODY)
    respond(BODY)  # no span: nothing recorded, nothing raised
    with provider.get_tracer("test").start_as_current_span("unbounded"):
        respond(BODY, target_context_tokens=2**64 - 1)
    span, unbounded = exporter.get_finished_spans()
    assert dict(unbounded.attributes or {})["contextfold.budget"] == 2**63 - 1  # OpenTelemetry's ints are int64
    attributes = dict(span.attributes or {})
    pack = cf.pack_request(BODY, target_context_tokens=300, shape="openai", sizing="provider")
    assert attributes["contextfold.adapter"] == "asgi" and attributes["contextfold.model"] == "m"
    assert attributes["contextfold.tokens_out"] == pack.tokens and attributes["contextfold.dropped"] == pack.dropped
    assert attributes["contextfold.fits"] is True and attributes["contextfold.folded"] is True


def body_for(model: str | None, **fields: Any) -> bytes:
    """A chat body over 300 tokens, its ``model`` last (as the OpenAI SDK orders a body)."""
    request: dict[str, Any] = {"messages": MESSAGES, **fields}
    if model is not None:
        request["model"] = model
    return json.dumps(request).encode()


@pytest.mark.parametrize(
    ("model", "fields", "window", "reserve"),
    [
        ("small", {}, 300, 0),
        ("large", {}, 900, 0),
        ("unlisted", {}, 600, 0),
        (None, {}, 600, 0),
        ("large", {"max_tokens": 100}, 900, 100),
        ("large", {"max_completion_tokens": 150, "max_tokens": 100}, 900, 150),
        ("large", {"max_output_tokens": 200}, 900, 200),
        ("large", {"max_tokens": True}, 900, 0),  # not a count: the default reserve
        ("reserved", {}, 600, 120),  # the model's own reserve
        ("reserved", {"max_tokens": 100}, 600, 100),  # the body's cap first
    ],
)
def test_the_window_and_reserve_come_from_the_bodys_model_and_max_tokens(
    model: str | None, fields: dict[str, Any], window: int, reserve: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="contextfold.gateway")
    body = body_for(model, **fields)
    options = {"target_context_tokens": 600, "windows": {"small": 300, "large": 900}, "reserves": {"reserved": 120}}
    expected = cf.pack_request(body, target_context_tokens=window, reserve_output_tokens=reserve, sizing="provider")
    assert forward([body], **options)[0] == expected.body
    (report,) = [r.contextfold for r in caplog.records if r.name == "contextfold.gateway"]  # type: ignore[attr-defined]
    assert report["model"] == model and report["budget"] == window - reserve


def test_members_are_read_at_the_top_level_only() -> None:
    nested = {"role": "user", "content": "x", "model": "small", "max_tokens": 250}
    body = json.dumps(
        {"messages": [*MESSAGES, nested], "metadata": {"model": "small"}, "model": 'la\\rge"', "stop": ["\\", "]"]}
    ).encode()
    options = {"target_context_tokens": 600, "windows": {"small": 300, 'la\\rge"': 900}}
    expected = cf.pack_request(body, target_context_tokens=900, sizing="provider")
    assert forward([body], **options)[0] == expected.body


def test_windows_can_come_from_litellms_model_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM's bundled map: no network
    litellm = pytest.importorskip("litellm", reason="litellm is in the integrations extra")
    window = litellm.get_model_info("gpt-3.5-turbo")["max_input_tokens"]
    long = json.dumps({"model": "gpt-3.5-turbo", "messages": [*MESSAGES * 30, {"role": "user", "content": "now"}]})
    body = long.encode()
    assert cf.pack_request(body, target_context_tokens=10**6, sizing="provider").dropped == 0
    expected = cf.pack_request(body, target_context_tokens=window, sizing="provider")
    assert expected.dropped > 0
    options: dict[str, Any] = {"target_context_tokens": 10**6, "model_map": True}
    assert forward([body], **options)[0] == expected.body  # the map's window, not the default
    listed = {**options, "windows": {"gpt-3.5-turbo": window // 2}}  # a listed window wins
    assert (
        forward([body], **listed)[0] == cf.pack_request(body, target_context_tokens=window // 2, sizing="provider").body
    )
    assert forward([body_for("no-such-model")], **options)[0] == body_for("no-such-model")  # unmapped: the default
    assert forward([body], target_context_tokens=10**6)[0] == body  # not asked: not looked up
    monkeypatch.setitem(sys.modules, "litellm", None)
    with pytest.raises(cf.ArgumentError, match="model_map=True needs litellm"):
        PackingMiddleware(lambda *_: None, target_context_tokens=300, model_map=True)  # type: ignore[arg-type]


def test_a_cap_past_i64_is_read_exactly(backend: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="contextfold.gateway")
    cap, window = 2**63 + 5, 2**64 - 1  # the bytes path reads such an int as a double
    body = body_for(None, max_tokens=cap)
    expected = cf.pack_request(body, target_context_tokens=window, reserve_output_tokens=cap, sizing="provider")
    assert forward([body], target_context_tokens=window)[0] == expected.body
    (report,) = [r.contextfold for r in caplog.records if r.name == "contextfold.gateway"]  # type: ignore[attr-defined]
    assert report["budget"] == window - cap


def test_a_reserve_over_the_window_passes_the_body_untouched() -> None:
    body = body_for("small", max_tokens=5_000)
    assert forward([body], target_context_tokens=600, windows={"small": 300})[0] == body


def test_large_bodies_are_packed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    threads: list[int] = []
    real = cf.pack_request

    def recording(body: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(body, **kwargs)

    expected = packed(BODY)
    monkeypatch.setattr(cf, "pack_request", recording)
    loop_thread = threading.get_ident()  # asyncio.run runs the loop in this thread
    forward([BODY], offload_bytes=len(BODY))  # at the threshold: on the loop
    assert threads and set(threads) == {loop_thread}
    threads.clear()
    assert forward([BODY], offload_bytes=len(BODY) - 1)[0] == expected  # over it: in a worker thread
    assert threads and loop_thread not in threads


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"windows": {"m": 0}}, "windows"),
        ({"windows": ["m"]}, "windows"),
        ({"offload_bytes": -1}, "offload_bytes"),
        ({"count_tokens_in": 1}, "count_tokens_in"),
        ({"reserves": {"m": -1}}, "reserves"),
        ({"reserves": ["m"]}, "reserves"),
        ({"model_map": "yes"}, "model_map"),
    ],
)
def test_bad_model_settings_fail_when_the_middleware_is_built(options: dict[str, Any], named: str) -> None:
    with pytest.raises(cf.ArgumentError, match=named):
        PackingMiddleware(lambda *_: None, target_context_tokens=300, **options)  # type: ignore[arg-type]


def test_pins_past_a_short_bodys_end_hold_from_the_turn_they_exist_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING")
    middleware = PackingMiddleware(lambda *_: None, target_context_tokens=300, pinned=[2])  # type: ignore[arg-type,return-value]
    first = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    forward([first], middleware=middleware)
    body, _ = forward([BODY], middleware=middleware)
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert middleware.counters.snapshot()["requests"] == 2
    assert body == cf.pack_request(BODY, target_context_tokens=300, shape="openai", pinned=[2], sizing="provider").body


def test_a_body_whose_dropped_middle_holds_a_bad_message_is_packed(caplog: pytest.LogCaptureFixture) -> None:
    """Packing reads only what it keeps, so a malformed message it folds unread packs; the
    count of what came in sized every message, outside the error handling: a raw
    MessageTypeError out of the middleware, the app behind never called (a 500). What
    came in is now unknown (None), and the packed body goes on."""
    caplog.set_level("INFO", logger="contextfold.gateway")
    messages = [{"role": "user", "content": 5}, *[{"role": "user", "content": "x" * 400}] * 50]
    body = json.dumps({"model": "m", "messages": [*messages, {"role": "user", "content": "q"}]}).encode()
    want = cf.pack_request(body, target_context_tokens=1_000, shape="openai", sizing="provider")
    assert want.dropped > 0 and 0 not in want.kept
    out, _ = forward([body], target_context_tokens=1_000)
    assert out == want.body
    report = [r.contextfold for r in caplog.records if r.name == "contextfold.gateway"][-1]  # type: ignore[attr-defined]
    assert report["tokens_in"] is None and report["folded"] is True


def test_a_plain_string_input_is_one_message_to_the_pins(caplog: pytest.LogCaptureFixture) -> None:
    """A Responses request whose ``input`` is a plain string holds one message: a pin past
    it waits, as for any short request (it kept every pin, and packing refused it)."""
    caplog.set_level("WARNING")
    middleware = PackingMiddleware(lambda *_: None, target_context_tokens=300, pinned=[1])  # type: ignore[arg-type,return-value]
    forward([json.dumps({"model": "m", "input": "hello"}).encode()], middleware=middleware, path="/v1/responses")
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert middleware.counters.snapshot()["requests"] == 1


def test_a_model_name_cannot_forge_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """The request's ``model`` is the client's text: a line break in it is written
    escaped, so it cannot start a log line of its own."""
    caplog.set_level("INFO", logger="contextfold.gateway")
    forward([json.dumps({"model": "m\nERROR contextfold.gateway forged", "messages": MESSAGES}).encode()])
    line = [r.getMessage() for r in caplog.records if r.name == "contextfold.gateway"][-1]
    assert "\n" not in line and "m\\nERROR contextfold.gateway forged" in line
