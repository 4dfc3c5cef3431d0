"""The ASGI middleware in front of the fake upstream, served by uvicorn on 127.0.0.1.

The upstream records the raw bytes it receives: a packed body must equal
``contextfold.pack_request`` of the body sent (so kept messages arrive byte for byte), fit,
keep the latest user request, and orphan no tool message; everything else arrives as sent.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.synthetic import responses_items

from ..conftest import anthropic_corpus, openai_corpus
from . import need
from .servers import HOST, free_port, serving
from .test_litellm_proxy import assert_no_orphans

need("uvicorn", "integrations")
httpx = need("httpx", "integrations")

WINDOW = 4_000
RESERVE = 500


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(__file__).parent), "packing_upstream:app"]
    command += ["--host", HOST, "--port", str(port), "--log-level", "warning"]
    log = tmp_path_factory.mktemp("asgi") / "upstream.log"
    env = {"CONTEXTFOLD_WINDOW": str(WINDOW), "CONTEXTFOLD_RESERVE": str(RESERVE)}
    with serving(command, f"http://{HOST}:{port}/recorded", log, timeout=30, **env):
        yield f"http://{HOST}:{port}"


def received(base: str) -> dict[str, Any]:
    """The last POST the upstream saw: its path and raw body."""
    last = httpx.get(f"{base}/recorded_raw", timeout=10).json()[-1]
    return {"path": last["path"], "body": base64.b64decode(last["body"])}


def post(base: str, path: str, body: bytes) -> Any:
    return httpx.post(f"{base}{path}", content=body, headers={"content-type": "application/json"}, timeout=30)


def test_chat_bodies_are_packed_on_the_bytes_path(server: str) -> None:
    messages = max((m for m in openai_corpus() if any(x["role"] == "tool" for x in m)), key=cf.tokens_of)
    body = json.dumps({"model": "served", "messages": messages, "temperature": 0}, indent=1).encode()
    assert post(server, "/v1/chat/completions", body).status_code == 200
    got = received(server)
    expected = cf.pack_request(
        body, target_context_tokens=WINDOW, reserve_output_tokens=RESERVE, shape="openai", sizing="provider"
    )
    assert got == {"path": "/v1/chat/completions", "body": expected.body}
    sent = json.loads(got["body"])
    assert sent["temperature"] == 0 and sent["model"] == "served"
    assert cf.tokens_of(sent["messages"]) <= WINDOW - RESERVE < cf.tokens_of(messages)
    assert_no_orphans(sent["messages"])
    assert [m for m in messages if m["role"] == "user"][-1] in sent["messages"]
    for i in expected.kept:  # kept messages arrive byte for byte, as indented in the request
        assert json.dumps(messages[i], indent=1).replace("\n", "\n  ").encode() in got["body"]


def test_messages_bodies_are_packed_in_anthropic_shape(server: str) -> None:
    row = max(anthropic_corpus(), key=lambda r: cf.tokens_of(r["messages"]))
    body = json.dumps({"model": "served", "system": row.get("system"), "messages": row["messages"]}).encode()
    post(server, "/v1/messages", body)  # the fake upstream records it, then answers 404
    expected = cf.pack_request(
        body, target_context_tokens=WINDOW, reserve_output_tokens=RESERVE, shape="anthropic", sizing="provider"
    )
    assert expected.dropped > 0
    assert received(server) == {"path": "/v1/messages", "body": expected.body}


def test_responses_bodies_are_packed_as_items_with_their_tools(server: str) -> None:
    messages = max((m for m in openai_corpus() if any(x["role"] == "tool" for x in m)), key=cf.tokens_of)
    items = responses_items(messages)
    tools = [{"type": "function", "name": "run", "parameters": {"type": "object"}, "description": "x " * 200}]
    body = json.dumps({"model": "served", "instructions": "Be brief.", "input": items, "tools": tools}).encode()
    post(server, "/v1/responses", body)
    options = {"target_context_tokens": WINDOW, "reserve_output_tokens": RESERVE, "sizing": "provider"}
    expected = cf.pack_request(body, **options)  # type: ignore[arg-type]
    assert expected.dropped > 0 and expected.fits
    assert received(server) == {"path": "/v1/responses", "body": expected.body}
    sent = json.loads(expected.body)
    same = cf.pack_handoff(items, shape="responses", system="Be brief.", tools=tools, **options)  # type: ignore[arg-type]
    assert sent["input"] == same.messages and sent["tools"] == tools


def test_everything_else_passes_untouched(server: str) -> None:
    messages = max(openai_corpus(), key=cf.tokens_of)
    big = json.dumps({"model": "served", "messages": messages}).encode()
    post(server, "/v1/embeddings", big)
    assert received(server) == {"path": "/v1/embeddings", "body": big}
    broken = b'{"model": "served", "messages": [{"role": 7}]}'
    post(server, "/v1/chat/completions", broken)
    assert received(server) == {"path": "/v1/chat/completions", "body": broken}  # unreadable: forwarded as is
    small = json.dumps({"model": "served", "messages": messages[:2]}).encode()
    post(server, "/v1/chat/completions", small)
    assert received(server)["body"] == small


def test_an_image_is_sized_as_the_provider_bills_it(server: str) -> None:
    """A screenshot costs the flat provider count, not its base64 length: a request that
    fits as billed passes whole, though its bytes alone are far over the window."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0K" * 75_000}}
    messages = [
        {"role": "user", "content": "step 1: " + "x" * 400},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "What is wrong here?"}, image]},
    ]
    body = json.dumps({"model": "served", "messages": messages}).encode()
    assert cf.tokens_of(messages, sizing="provider") <= WINDOW - RESERVE < cf.tokens_of(messages)
    assert post(server, "/v1/chat/completions", body).status_code == 200
    assert received(server) == {"path": "/v1/chat/completions", "body": body}
