"""LangChain: pack ``BaseMessage`` lists, as a function, a Runnable, or agent middleware.

``pip install 'contextfold[langchain]'``. Every entry point converts the messages to
OpenAI-shape dicts for :func:`contextfold.pack_handoff` and maps the result back by
``kept`` index, so what comes back are the caller's own message objects (ids intact, so a
``RemoveMessage(id=...)`` still finds them) plus the note as a ``HumanMessage`` or an
``AIMessage`` (whichever keeps roles alternating). A message a context edit changed
(``edits=``) comes back as a copy of the caller's (``model_copy``, same id) with the edit
applied: a ``ToolMessage``'s content cleared, thinking blocks left out of an ``AIMessage``'s
content, its calls' ``args`` emptied. An ``AIMessage``'s ``tool_calls`` and
the ``ToolMessage`` answers right after it are kept or dropped together.

Conversion, one dict per message: ``SystemMessage`` → system, ``HumanMessage`` → user,
``AIMessage`` → assistant with its ``tool_calls`` (arguments as compact JSON) and its
``invalid_tool_calls`` (arguments as received),
``ToolMessage`` and ``FunctionMessage`` → tool, ``ChatMessage`` → its own role; the content
(a string or a list of blocks) is passed as is. Packing always uses the OpenAI pairing, so
Anthropic ``tool_use`` blocks inside an ``AIMessage``'s content are sized, not re-paired; an
Anthropic ``compaction`` block there is kept, and what precedes it goes first.

:class:`ClearToolUsesEdit` (from :mod:`contextfold.integrations.langchain_edits`) takes the
place of LangChain's own in its ``ContextEditingMiddleware``: the same results, with a
linear number of token counts.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import contextfold as cf
from contextfold._contract import WindowKeywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

from ._common import (
    Conversion,
    Estimator,
    Packed,
    edited_items,
    json_text,
    missing_extra,
    pack_converted,
    text_tokens,
    window_options,
)
from .langchain_edits import ClearToolUsesEdit

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
    from langchain_core.prompt_values import PromptValue
    from langchain_core.runnables import RunnableLambda
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise missing_extra("langchain", exc) from exc

__all__ = [
    "ClearToolUsesEdit",
    "ContextfoldMiddleware",
    "TokenCounter",
    "pack",
    "pack_messages",
    "pack_with",
    "to_dicts",
    "tools_tokens",
]

CONVERSION = Conversion("openai", "langchain")
"""What the messages are packed as: OpenAI-shape dicts (see the module doc)."""

_ROLES = {
    "system": "system",
    "human": "user",
    "ai": "assistant",
    "tool": "tool",
    "function": "tool",
    # what streaming produces: the same messages, typed by their class's name
    "SystemMessageChunk": "system",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "ToolMessageChunk": "tool",
    "FunctionMessageChunk": "tool",
}
_CHAT_ROLES = {"system", "user", "assistant", "tool", "developer"}


def to_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """One OpenAI-shape dict per message, as the packer sizes it (see the module doc)."""
    return [_to_dict(i, m) for i, m in enumerate(messages)]


def _to_dict(index: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, BaseMessage):
        raise cf.MessageTypeError(
            f"message {index}: expected a langchain BaseMessage, got {type(message).__name__}", index, ""
        )
    role = _ROLES.get(message.type)
    if role is None:
        chat_role = getattr(message, "role", None)
        role = chat_role if message.type in ("chat", "ChatMessageChunk") and chat_role in _CHAT_ROLES else None
        if role is None:
            raise cf.MessageValueError(
                f"message {index}: field 'type': cannot pack a {message.type!r} message", index, "type"
            )
    out: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": message.content}
    if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
        # a call whose arguments did not parse is still a call its ToolMessage answers
        out["tool_calls"] = [
            _call(c["id"], c["name"], _arguments(index, n, c)) for n, c in enumerate(message.tool_calls)
        ] + [_call(c["id"], c["name"], c["args"]) for c in message.invalid_tool_calls]
    if role == "tool":
        out["tool_call_id"] = getattr(message, "tool_call_id", None) or message.name or ""
    return out


def _arguments(index: int, number: int, call: Any) -> str:
    """The call's ``args`` as the JSON text a provider is sent; a value JSON cannot write
    (a datetime, bytes, an int past Python's digit limit, nesting past its recursion
    limit) is named, as the provider client would fail on it too."""
    try:
        return json_text(call["args"])
    except (TypeError, ValueError, RecursionError) as exc:
        raise cf.MessageValueError(
            f"message {index}, field 'tool_calls': call {number}'s args cannot be written as JSON: {exc}",
            index,
            "tool_calls",
        ) from None


def _call(call_id: str | None, name: str | None, arguments: str | None) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or ""}}


def _edited_message(original: BaseMessage, converted: dict[str, Any], edited: dict[str, Any]) -> BaseMessage:
    """A copy of ``original`` with what the context edits changed: its content (a tool
    result cleared, thinking blocks removed), its calls' arguments (emptied). A call held
    twice (a ``tool_use`` block and a ``tool_calls`` entry of the same id, as ChatAnthropic
    returns it) is emptied in both: the edit empties one, the provider is sent either."""
    update: dict[str, Any] = {}
    emptied_ids: set[Any] = set()
    if edited["content"] is not converted["content"]:
        update["content"] = edited["content"]
        if isinstance(converted["content"], list):
            emptied_ids = {
                block.get("id")
                for block, new in edited_items(converted["content"], edited["content"])
                if new is not None and new is not block and isinstance(block, dict) and block.get("type") == "tool_use"
            }
    calls = edited.get("tool_calls")
    if isinstance(original, AIMessage) and (
        emptied_ids or (calls is not None and calls is not converted.get("tool_calls"))
    ):
        pairs = edited_items(converted["tool_calls"], calls) if calls is not None else []
        emptied = [new is not call or call["id"] in emptied_ids for call, new in pairs]
        valid = len(original.tool_calls)
        update["tool_calls"] = [
            {**c, "args": {}} if e else c for c, e in zip(original.tool_calls, emptied[:valid], strict=True)
        ]
        update["invalid_tool_calls"] = [
            {**c, "args": "{}"} if e else c for c, e in zip(original.invalid_tool_calls, emptied[valid:], strict=True)
        ]
        if isinstance(original, AIMessageChunk):  # its calls are made again from these: emptied too
            calls = original.tool_calls + original.invalid_tool_calls
            gone = {c["id"] for c, e in zip(calls, emptied, strict=True) if e}
            update["tool_call_chunks"] = [
                {**c, "args": "{}"} if c.get("id") in gone else c for c in original.tool_call_chunks
            ]
    return original.model_copy(update=update)


def _note_message(note: dict[str, Any]) -> BaseMessage:
    return AIMessage(content=note["content"]) if note["role"] == "assistant" else HumanMessage(content=note["content"])


def pack(
    messages: Sequence[BaseMessage] | PromptValue,
    *,
    max_tokens: int,
    **options: Unpack[WindowKeywords],
) -> Packed:
    """Packs ``messages`` into ``max_tokens - reserve_output_tokens`` tokens.

    Returns the packed list (the caller's own objects plus the note message) together
    with the :class:`~contextfold.HandoffPack` (``kept``, ``dropped``, ``fits``, ``tokens``).
    """
    return pack_with(messages, window_options(max_tokens, options, CONVERSION))


def pack_with(
    messages: Sequence[BaseMessage] | PromptValue,
    options: cf.PackOptions,
    *,
    system: str | list[Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    route: str = "pack",
    adapter: str = "langchain",
) -> Packed:
    """:func:`pack` with its options in one object, and what is sent beside the messages
    (``system``: a system prompt's content; ``tools``: OpenAI tool schemas) counted as
    :func:`contextfold.pack_handoff` counts them; reported as ``adapter``'s pack at
    ``route``."""
    if isinstance(messages, PromptValue):
        messages = messages.to_messages()
    if isinstance(messages, BaseMessage):  # iterates as its fields
        raise cf.ArgumentTypeError(f"messages must be an iterable of messages, not one {type(messages).__name__}")
    return pack_converted(
        messages,
        to_dicts,
        _note_message,
        _edited_message,
        options,
        CONVERSION._replace(adapter=adapter),
        system=system,
        tools=tools,
        route=route,
    )


def pack_messages(
    messages: Sequence[BaseMessage] | PromptValue | None = None,
    *,
    max_tokens: int,
    **options: Unpack[WindowKeywords],
) -> Any:
    """``trim_messages``' place in a chain, without breaking tool pairs or losing the question.

    With ``messages``, returns the packed list. Without, returns a ``RunnableLambda`` that
    packs whatever it is invoked with (a message list or a prompt value), so
    ``prompt | pack_messages(max_tokens=8_000) | model`` works as with ``trim_messages``.
    """
    packing = window_options(max_tokens, options, CONVERSION)
    if messages is None:
        return RunnableLambda(
            lambda given: pack_with(given, packing, route="pack_messages").messages, name="pack_messages"
        )
    return pack_with(messages, packing, route="pack_messages").messages


class TokenCounter:
    """A ``token_counter=`` for ``trim_messages`` (and anything else that takes a list counter).

    Counts a list of messages as :func:`contextfold.tokens_of` counts their dicts.
    """

    def __init__(self, estimate_tokens: Estimator | None = None) -> None:
        self.estimate_tokens = estimate_tokens

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        return cf.tokens_of(to_dicts(messages), estimate_tokens=self.estimate_tokens)


def tools_tokens(tools: Sequence[Any], estimate_tokens: Estimator | None = None) -> int:
    """Tokens of tool definitions as a provider receives them: the compact JSON of their
    OpenAI tool schemas (a dict that already has a ``type`` is taken as it is)."""
    return text_tokens(json_text(_tool_schemas(tools)), estimate_tokens) if tools else 0


def _tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """``tools`` (LangChain tools, functions, or schema dicts) as OpenAI tool schemas; a
    schema dict given as it is, as the JSON its provider's client sends (a tuple in it as
    a list)."""
    return [
        json.loads(json_text(t)) if isinstance(t, dict) and "type" in t else convert_to_openai_tool(t) for t in tools
    ]


class ContextfoldMiddleware(AgentMiddleware):
    """Agent middleware for ``langchain.agents.create_agent``: pack what the model sees.

    Each model call gets the agent's messages packed into ``max_tokens`` minus
    ``reserve_output_tokens``, the system message and the request's tool schemas counted
    in as :func:`contextfold.pack_handoff` counts its ``system=`` and ``tools=`` (so an
    edit's ``trigger`` sees them too); the agent's state keeps every message (nothing is
    removed), so the next call packs from the whole history again.
    """

    def __init__(
        self,
        *,
        max_tokens: int,
        **options: Unpack[WindowKeywords],
    ) -> None:
        super().__init__()
        self.options = window_options(max_tokens, options, CONVERSION)

    def _packed(self, request: Any) -> Any:
        system = request.system_message
        packed = pack_with(
            request.messages,
            self.options,
            system=None if system is None else system.content,
            tools=_tool_schemas(request.tools) or None,
            route="middleware",
        )
        return request.override(messages=packed.messages)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._packed(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(self._packed(request))
