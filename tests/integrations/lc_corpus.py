"""Corpus transcripts as LangChain messages, and a chat model that records what it is sent."""

# ruff: noqa: E402  (the framework imports follow the check that it is installed)

from __future__ import annotations

import json
from typing import Any

from . import need

need("langchain.agents", "langchain")

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from ..conftest import openai_corpus


def _args(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def to_langchain(messages: list[dict[str, Any]]) -> list[BaseMessage]:
    """One LangChain message per corpus dict, each with an id (``m<index>``)."""
    out: list[BaseMessage] = []
    for i, m in enumerate(messages):
        content = m.get("content") or ""
        ident = f"m{i}"
        if m["role"] == "system":
            out.append(SystemMessage(content=content, id=ident))
        elif m["role"] == "user":
            out.append(HumanMessage(content=content, id=ident))
        elif m["role"] == "tool":
            out.append(ToolMessage(content=content, tool_call_id=m.get("tool_call_id") or "", id=ident))
        else:
            calls, invalid = [], []
            for c in m.get("tool_calls") or []:
                args = _args(c["function"]["arguments"])
                if args is None:
                    invalid.append({"id": c["id"], "name": c["function"]["name"], "args": c["function"]["arguments"]})
                else:
                    calls.append({"id": c["id"], "name": c["function"]["name"], "args": args})
            out.append(AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid, id=ident))
    return out


def langchain_corpus() -> list[list[BaseMessage]]:
    return [to_langchain(messages) for messages in openai_corpus()]


class RecordingChatModel(BaseChatModel):
    """Answers "done" and records every message list it is sent (the objects themselves)."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "recording"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])
