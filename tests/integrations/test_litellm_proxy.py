"""End to end: the OpenAI SDK → a real LiteLLM proxy with the hook → a fake upstream.

Both servers run on 127.0.0.1 on free ports, started and stopped by this module. The
upstream records each request body; the test checks what it received: packed to fit, no
orphaned tool message, the latest user request present. The hook's own time per request
(median, p99) and the token counts are printed on one ``contextfold litellm e2e`` line.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import statistics
import sys
import time
import types
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest

from ..conftest import anthropic_corpus, openai_corpus
from . import need
from .servers import HOST, free_port, serving
from .test_litellm import screenshot_request, tool_definitions

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = need("litellm", "litellm")
need("litellm.proxy.proxy_cli", "litellm")
need("uvicorn", "integrations")
openai = need("openai", "integrations")
cfl = need("contextfold.integrations.litellm", "litellm")

MASTER_KEY = f"sk-{secrets.token_hex(32)}"  # the proxy refuses to start without one
WINDOW = 6_000
MAX_TOKENS = 500
CONFIG = """\
model_list:
  - model_name: packed-model
    litellm_params:
      model: openai/gpt-4o
      api_base: http://{host}:{upstream}/v1
      api_key: fake-key
    model_info:
      max_input_tokens: {window}
litellm_settings:
  callbacks: ["contextfold.integrations.litellm.proxy_handler_instance", "metadata_logger.recorder"]
  use_chat_completions_url_for_anthropic_messages: true  # the fake upstream speaks chat completions
callback_settings:
  contextfold:
    cut: greedy
"""


def proxy_command(config: Path, port: int) -> list[str]:
    """The command that runs the LiteLLM proxy on ``config``, on 127.0.0.1:``port``."""
    command = [sys.executable, "-c", "from litellm.proxy.proxy_cli import run_server; run_server()"]
    return [*command, "--config", str(config), "--host", HOST, "--port", str(port), "--num_workers", "1"]


HERE = Path(__file__).parent
PROXY_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_MASTER_KEY": MASTER_KEY,
    "LITELLM_LOG": "ERROR",
    "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),  # metadata_logger
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file the proxy's ``metadata_logger`` appends each logged call's report to."""
    path = tmp_path_factory.mktemp("reports") / "reports.jsonl"
    path.touch()
    return path


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory, reports: Path) -> Iterator[tuple[str, str]]:
    """(proxy base URL, upstream base URL), both serving until the module's tests end."""
    folder = tmp_path_factory.mktemp("litellm")
    upstream_port, proxy_port = free_port(), free_port()
    upstream = f"http://{HOST}:{upstream_port}"
    config = folder / "config.yaml"
    config.write_text(CONFIG.format(host=HOST, upstream=upstream_port, window=WINDOW))
    uvicorn = [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(__file__).parent), "fake_upstream:app"]
    uvicorn += ["--host", HOST, "--port", str(upstream_port), "--log-level", "warning"]
    with serving(uvicorn, f"{upstream}/recorded", folder / "upstream.log", timeout=30):
        with serving(
            proxy_command(config, proxy_port),
            f"http://{HOST}:{proxy_port}/health/liveliness",
            folder / "proxy.log",
            CONTEXTFOLD_TEST_REPORTS=str(reports),
            **PROXY_ENV,
        ):
            yield f"http://{HOST}:{proxy_port}", upstream


def agent_request() -> list[dict[str, Any]]:
    """The longest corpus run with tools, cut after its last tool result (the agent's next turn)."""
    messages = max((m for m in openai_corpus() if any(x["role"] == "tool" for x in m)), key=cf.tokens_of)
    last_result = max(i for i, m in enumerate(messages) if m["role"] == "tool")
    return messages[: last_result + 1]


def recorded(upstream: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{upstream}/recorded", timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def assert_no_orphans(messages: list[dict[str, Any]]) -> None:
    """Each tool message answers a call of the assistant message its tool run follows."""
    calls: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            calls = {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in calls, f"orphaned tool message {i}"
        else:
            calls = set()


def test_proxy_forwards_a_packed_request(proxy: tuple[str, str]) -> None:
    base, upstream = proxy
    messages = agent_request()
    tools = tool_definitions(messages)
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
    before = len(recorded(upstream))
    answer = client.chat.completions.create(model="packed-model", messages=messages, max_tokens=MAX_TOKENS, tools=tools)
    assert answer.choices[0].message.content == "done"
    bodies = recorded(upstream)[before:]
    assert len(bodies) == 1
    sent = bodies[0]["messages"]

    reserve = MAX_TOKENS + cf.message_tokens({"role": "system", "content": tools})  # the tools count as tools=
    assert cf.tokens_of(messages) > WINDOW  # it really was over the window going in
    assert cf.tokens_of(sent) <= WINDOW - reserve
    assert_no_orphans(sent)
    directive = [m for m in messages if m["role"] == "user"][-1]
    assert directive["content"] in [m.get("content") for m in sent]
    notes = [m for m in sent if str(m.get("content", "")).startswith("Earlier conversation, folded")]
    assert len(notes) == 1
    assert sent[0] == messages[0]  # the system prompt, first, as sent
    assert bodies[0]["tools"] == tools

    timings = hook_timings(upstream, messages, tools)
    round_trips = []
    for _ in range(10):
        start = time.perf_counter()
        client.chat.completions.create(model="packed-model", messages=messages, max_tokens=MAX_TOKENS, tools=tools)
        round_trips.append(time.perf_counter() - start)
    print(
        f"\ncontextfold litellm e2e: in {len(messages)} messages / {cf.tokens_of(messages)} tokens "
        f"/ {len(tools)} tools, "
        f"upstream got {len(sent)} messages / {cf.tokens_of(sent)} tokens (window {WINDOW}, reserve {reserve}); "
        f"hook {cf.backend}: median {statistics.median(timings) * 1e6:.0f} us, "
        f"p99 {percentile(timings, 99) * 1e6:.0f} us over {len(timings)}; "
        f"proxy round trip median {statistics.median(round_trips) * 1e3:.1f} ms"
    )
    exact = hook_timings(upstream, messages, tools, tokenizer="o200k_base")
    print(
        f"contextfold litellm estimators ({cf.backend}, {len(timings)} calls each): "
        f"chars/4 median {statistics.median(timings) * 1e6:.0f} us, p99 {percentile(timings, 99) * 1e6:.0f} us; "
        f"o200k_base median {statistics.median(exact) * 1e6:.0f} us, p99 {percentile(exact, 99) * 1e6:.0f} us"
    )


def test_proxy_passes_a_request_that_fits_unchanged(proxy: tuple[str, str]) -> None:
    base, upstream = proxy
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
    client.chat.completions.create(model="packed-model", messages=messages)  # type: ignore[arg-type]
    assert recorded(upstream)[-1]["messages"] == messages


def hook_timings(
    upstream: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], tokenizer: str | None = None
) -> list[float]:
    """Seconds per ``async_pre_call_hook`` call on this request, in process, with the window
    looked up in a LiteLLM router built from the proxy's model list, as inside the proxy
    (counting with ``tokenizer``, or chars/4)."""
    model = {
        "model_name": "packed-model",
        "litellm_params": {"model": "openai/gpt-4o", "api_base": f"{upstream}/v1", "api_key": "fake-key"},
        "model_info": {"max_input_tokens": WINDOW},
    }
    server = types.ModuleType("litellm.proxy.proxy_server")
    server.llm_router = litellm.Router(model_list=[model])  # type: ignore[attr-defined]
    hook = cfl.ContextfoldHook(tokenizer=tokenizer)

    async def run() -> list[float]:
        times = []
        for _ in range(300):
            data = {"model": "packed-model", "messages": messages, "max_tokens": MAX_TOKENS, "tools": tools}
            start = time.perf_counter()
            await hook.async_pre_call_hook(None, None, data, "acompletion")
            times.append(time.perf_counter() - start)
            assert cf.tokens_of(data["messages"], estimate_tokens=tokenizer) <= WINDOW - MAX_TOKENS
        return times

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "litellm.proxy.proxy_server", server)
        return asyncio.run(run())


def percentile(values: list[float], p: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def test_proxy_packs_anthropic_messages_requests(proxy: tuple[str, str]) -> None:
    """``/v1/messages`` (call type ``anthropic_messages``): packed in Anthropic shape, with
    the top-level ``system`` counted, before LiteLLM translates it for the upstream."""
    import httpx

    base, upstream = proxy
    row = next(r for r in anthropic_corpus() if r["id"] == "mini-swe-agent-deepseek-django__django-14752")
    messages = row["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages = messages[: last_user + 1]  # end on the tool results the next turn answers
    names = sorted(
        {b["name"] for m in messages if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"}
    )
    tools = [{"name": n, "description": f"Runs {n}.", "input_schema": {"type": "object"}} for n in names]
    body = {
        "model": "packed-model",
        "system": row["system"],
        "messages": messages,
        "max_tokens": MAX_TOKENS,
        "tools": tools,
    }
    assert cf.tokens_of(messages) > WINDOW
    before = len(recorded(upstream))
    answer = httpx.post(f"{base}/v1/messages", json=body, headers={"x-api-key": MASTER_KEY}, timeout=60)
    assert answer.status_code == 200, answer.text
    (received,) = recorded(upstream)[before:]
    sent = received["messages"]
    assert len(sent) < len(messages)
    assert cf.tokens_of(sent) <= WINDOW
    assert_no_orphans(sent)
    assert sum(str(m.get("content", "")).startswith("Earlier conversation, folded") for m in sent) == 1


def recorded_raw(upstream: str) -> list[dict[str, Any]]:
    """Every POST the upstream saw: ``{"path", "body"}``, the body as loaded JSON."""
    with urllib.request.urlopen(f"{upstream}/recorded_raw", timeout=10) as answer:
        return [{"path": r["path"], "body": json.loads(base64.b64decode(r["body"]))} for r in json.loads(answer.read())]


def test_proxy_packs_responses_requests(proxy: tuple[str, str]) -> None:
    """``/v1/responses`` (call type ``aresponses``): the ``input`` items arrive packed, the
    ``instructions`` and tools counted."""
    from contextfold.synthetic import responses_items

    base, upstream = proxy
    items = responses_items(agent_request())
    tools = [{"type": "function", "name": "run", "description": "Runs.", "parameters": {"type": "object"}}]
    assert cf.tokens_of(items) > WINDOW
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
    before = len(recorded_raw(upstream))
    answer = client.responses.create(
        model="packed-model", input=items, instructions="Be brief.", tools=tools, max_output_tokens=MAX_TOKENS
    )
    assert answer.output_text == "done"
    (received,) = [r for r in recorded_raw(upstream)[before:] if r["path"].endswith("/responses")]
    sent = received["body"]["input"]
    expected = cf.pack_handoff(
        items,
        target_context_tokens=WINDOW,
        reserve_output_tokens=MAX_TOKENS,
        shape="responses",
        system="Be brief.",
        tools=tools,
    )
    assert expected.dropped > 0 and expected.fits
    assert sent == expected.messages
    assert received["body"]["instructions"] == "Be brief."


def test_proxy_sizes_an_image_as_the_provider_bills_it(proxy: tuple[str, str]) -> None:
    """A 600 KB screenshot costs a flat 1,600 tokens (``sizing="provider"``, the hook's
    default), so a request that fits as billed arrives whole, not cut to its core."""
    base, upstream = proxy
    _, messages = screenshot_request()
    assert cf.tokens_of(messages, sizing="provider") <= WINDOW - MAX_TOKENS < cf.tokens_of(messages)
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
    client.chat.completions.create(model="packed-model", messages=messages, max_tokens=MAX_TOKENS)  # type: ignore[arg-type]
    assert recorded(upstream)[-1]["messages"] == messages


def test_a_bad_setting_stops_the_proxy_at_start_up(tmp_path: Path) -> None:
    """Settings are checked when the proxy loads the hook: a bad one is an error naming it
    at start-up, not a 500 on every request of a proxy that looks healthy."""
    port = free_port()
    config = tmp_path / "config.yaml"
    bad = CONFIG.format(host=HOST, upstream=free_port(), window=WINDOW).replace("cut: greedy", "sizing: exact")
    config.write_text(bad)
    with pytest.raises(RuntimeError, match="exited") as stopped:
        with serving(
            proxy_command(config, port), f"http://{HOST}:{port}/health/liveliness", tmp_path / "proxy.log", **PROXY_ENV
        ):
            pass
    assert "ArgumentError: sizing must be" in str(stopped.value)


def logged_reports(path: Path, count: int) -> list[dict[str, Any]]:
    """The reports LiteLLM's logger wrote to ``path``, once there are ``count`` of them (it
    logs after answering: waits up to 30 s for them)."""
    deadline = time.monotonic() + 30
    while True:
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) >= count or time.monotonic() > deadline:
            return [json.loads(line) for line in lines]
        time.sleep(0.1)


def test_the_pack_report_reaches_litellms_logged_metadata(proxy: tuple[str, str], reports: Path) -> None:
    base, _ = proxy
    messages = agent_request()
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
    before = len(logged_reports(reports, 0))
    client.chat.completions.create(model="packed-model", messages=messages, max_tokens=MAX_TOKENS)
    logged = logged_reports(reports, before + 1)[before:]
    assert len(logged) == 1
    report = logged[0]["contextfold"]
    assert report is not None, logged
    sent = cf.pack_handoff(
        messages, target_context_tokens=WINDOW, reserve_output_tokens=MAX_TOKENS, shape="openai", sizing="provider"
    )
    assert report == {
        "adapter": "litellm",
        "model": "packed-model",
        "route": "acompletion",
        "messages_in": len(messages),
        "messages_out": len(sent.messages),
        "tokens_in": cf.tokens_of(messages, sizing="provider"),
        "tokens_out": sent.tokens,
        "budget": WINDOW - MAX_TOKENS,
        "folded": True,
        "fits": True,
        "dropped": sent.dropped,
        "cleared_tool_uses": 0,
        "cleared_thinking_turns": 0,
    }


def docs_config() -> str:
    """The LiteLLM ``config.yaml`` block of docs/integrations.md, as a reader pastes it."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = docs[docs.index("### LiteLLM proxy") :]
    return section[section.index("```yaml\n") + len("```yaml\n") : section.index("```\n", section.index("```yaml"))]


def test_the_documented_config_starts_and_packs_as_pasted(proxy: tuple[str, str], tmp_path: Path) -> None:
    """The docs' config, run as the docs' command runs it (its master key and the OpenAI key
    from the environment), the upstream's address given as OpenAI's base URL."""
    import yaml

    _, upstream = proxy
    text = docs_config()
    config = yaml.safe_load(text)
    master_key_variable = config["general_settings"]["master_key"].removeprefix("os.environ/")
    model = config["model_list"][0]
    window = model["model_info"]["max_input_tokens"]
    (tmp_path / "config.yaml").write_text(text)
    port = free_port()
    env = {
        master_key_variable: MASTER_KEY,
        "OPENAI_API_KEY": "sk-fake",
        "OPENAI_API_BASE": f"{upstream}/v1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
    }
    messages = agent_request() * 3  # over the documented window
    assert cf.tokens_of(messages) > window
    command = proxy_command(tmp_path / "config.yaml", port)
    with serving(command, f"http://{HOST}:{port}/health/liveliness", tmp_path / "proxy.log", **env):
        client = openai.OpenAI(base_url=f"http://{HOST}:{port}/v1", api_key=MASTER_KEY, max_retries=0, timeout=60)
        before = len(recorded(upstream))
        client.chat.completions.create(model=model["model_name"], messages=messages, max_tokens=MAX_TOKENS)
    (sent,) = [body["messages"] for body in recorded(upstream)[before:]]
    assert len(sent) < len(messages) and cf.tokens_of(sent, sizing="provider") <= window - MAX_TOKENS
    assert_no_orphans(sent)
