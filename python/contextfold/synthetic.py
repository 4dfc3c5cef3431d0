"""A deterministic, realistic agent run, for the demo, the benchmarks and the tests.

:func:`agent_run` builds what a coding agent's transcript looks like: a system prompt, the
user's task, assistant turns calling tools (reading files, searching, editing, running
tests) with long tool outputs, a later instruction from the user, and a ``<run-state>``
volatile tail. The same ``seed`` gives the same run.
"""

from __future__ import annotations

import json
import random
from typing import Any

from .pack import volatile_tail

__all__ = ["agent_run", "responses_items"]

_FILES = [
    "src/gateway/router.py",
    "src/gateway/limits.py",
    "src/store/sqlite_store.py",
    "src/store/redis_store.py",
    "tests/test_router.py",
    "docs/deploy.md",
]
_WORDS = (
    "request budget token window cache tenant route retry latency store session limit handler "
    "config replica shard queue worker timeout header stream chunk prefix"
).split()


def _code(rng: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        name = rng.choice(_WORDS)
        out.append(
            f"    {name}_{i} = {rng.choice(_WORDS)}.get({name!r}, {rng.randint(0, 999)})  # {rng.choice(_WORDS)}"
        )
    return "def handle(request):\n" + "\n".join(out) + "\n    return response\n"


def agent_run(turns: int = 24, *, seed: int = 7, tool_output_lines: int = 60) -> list[dict[str, Any]]:
    """An agent transcript of about ``4 * turns`` messages, OpenAI chat shape."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent. Use the tools; keep answers short."},
        {
            "role": "user",
            "content": "The gateway drops requests when a tenant's budget resets. Find out why and fix it.",
        },
    ]
    for turn in range(turns):
        path = rng.choice(_FILES)
        call_id = f"call_{turn:03d}"
        if turn == turns * 2 // 3:
            messages.append({"role": "user", "content": "Also add a regression test for the reset path, then stop."})
        tool = rng.choice(["read_file", "read_file", "grep", "edit_file", "run_tests"])
        args: dict[str, Any] = {"path": path} if tool != "grep" else {"pattern": rng.choice(_WORDS), "path": "src/"}
        if tool == "edit_file":
            args["patch"] = _code(rng, 6)
        messages.append(
            {
                "role": "assistant",
                "content": f"Checking {path} for the {rng.choice(_WORDS)} handling.",
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
                ],
            }
        )
        output = (
            _code(rng, tool_output_lines)
            if tool in ("read_file", "edit_file")
            else "\n".join(
                f"{rng.choice(_FILES)}:{rng.randint(1, 400)}: {' '.join(rng.choices(_WORDS, k=8))}"
                for _ in range(tool_output_lines // 3)
            )
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "name": tool, "content": output})
        if turn % 4 == 3:
            messages.append({"role": "assistant", "content": f"So far: the {rng.choice(_WORDS)} path looks suspect."})
    tail = volatile_tail(
        [f"Turn {turns}: {len(messages)} messages so far.", "Budget: finish within 10 more tool calls."]
    )
    if tail is not None:
        messages.append(tail)
    return messages


def responses_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversation as OpenAI Responses API input items, for tests and benchmarks.

    A system message becomes a ``developer`` message item; a user or assistant text, a
    message item with one ``input_text`` / ``output_text`` part (list content is kept as
    it is); each tool call, a ``function_call`` item with its ``call_id``; a ``tool``
    message, a ``function_call_output`` item answering its ``tool_call_id``.
    """
    items: list[dict[str, Any]] = []
    for m in messages:
        role, content = m["role"], m.get("content")
        if role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m.get("tool_call_id", ""), "output": content or ""}
            )
            continue
        if role == "system":
            items.append({"type": "message", "role": "developer", "content": content})
            continue
        if content:
            part = "output_text" if role == "assistant" else "input_text"
            parts = content if isinstance(content, list) else [{"type": part, "text": content}]
            items.append({"type": "message", "role": role, "content": parts})
        for call in m.get("tool_calls") or ():
            function = call.get("function", {})
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id", ""),
                    "name": function.get("name", ""),
                    "arguments": function.get("arguments", ""),
                }
            )
    return items
