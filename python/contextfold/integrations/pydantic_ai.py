"""Pydantic AI: a history processor that packs ``ModelMessage`` lists into a window.

``pip install 'contextfold[pydantic-ai]'``::

    from pydantic_ai.capabilities import ProcessHistory
    from contextfold.integrations.pydantic_ai import history_processor
    agent = Agent("openai:gpt-4o", capabilities=[ProcessHistory(history_processor(max_tokens=8_000))])

    # Pydantic AI 1.x releases without the capability (removed in 2):
    agent = Agent("openai:gpt-4o", history_processors=[history_processor(max_tokens=8_000)])

Pydantic AI keeps what a processor returns as the run's history: after a run that folded,
``result.all_messages()`` holds the packed messages, not the full transcript.

Each ``ModelRequest`` / ``ModelResponse`` becomes one Anthropic-shape dict for
:func:`contextfold.pack_handoff`: a response's ``TextPart`` → a text block, ``ToolCallPart``
→ a ``tool_use`` block (id, name, arguments as given); a request's ``ToolReturnPart`` (and a
``RetryPromptPart`` naming a tool) → a ``tool_result`` block, ``UserPromptPart`` and
``SystemPromptPart`` → text blocks; other parts → a block of their kind with their text (a
built-in tool's return: its content as sent; its call: its arguments' JSON);
a message of text blocks only is one string (its texts joined by a blank line).
A request holding a ``SystemPromptPart`` counts as a system message, so at the front it is
always kept. A response with tool calls and the request answering them form one segment,
kept or dropped together. Non-text user content (images, files) is sized by its URL or
identifier, not by its bytes: leave room for large media in ``reserve_output_tokens``.

The processor returns the caller's own ``ModelMessage`` objects, plus the note as a
``ModelRequest`` (a ``UserPromptPart``) or a ``ModelResponse`` (a ``TextPart``), whichever
keeps requests and responses alternating. A message a context edit changed (``edits=``)
comes back as a copy with the edit applied: a ``ThinkingPart`` left out, a tool return's
content or a call's ``args`` replaced (a cleared retry prompt, or a return whose outcome
is an error, comes back as a plain ``ToolReturnPart`` of the text it was sized as).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import contextfold as cf
from contextfold._contract import WindowKeywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

from ._common import Conversion, Packed, edited_items, missing_extra, pack_converted, window_options

try:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise missing_extra("pydantic-ai", exc) from exc

__all__ = ["async_history_processor", "history_processor", "pack", "to_dicts"]


def to_dicts(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """One Anthropic-shape dict per message, as the packer sizes it (see the module doc)."""
    return [_to_dict(i, m) for i, m in enumerate(messages)]


def _to_dict(index: int, message: Any) -> dict[str, Any]:
    if isinstance(message, ModelResponse):
        role, block_of = "assistant", _response_block
    elif isinstance(message, ModelRequest):
        system = any(isinstance(p, SystemPromptPart) for p in message.parts)
        role, block_of = "system" if system else "user", _request_block
    else:
        raise cf.MessageTypeError(
            f"message {index}: expected a pydantic_ai ModelRequest or ModelResponse, got {type(message).__name__}",
            index,
            "",
        )
    return {"role": role, "content": _content([_block(index, k, p, block_of) for k, p in enumerate(message.parts)])}


def _block(index: int, number: int, part: Any, block_of: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """Part ``number`` of message ``index`` as a block; one that cannot be sent as it is
    (a text that is no str, content its own serialiser refuses) is named."""
    where = f"message {index}, field 'content': part {number}"
    try:
        block = block_of(part)
    except Exception as exc:  # the part's own serialiser (pydantic's) refused its content
        raise cf.MessageValueError(f"{where} cannot be written as it is sent: {exc}", index, "content") from None
    if block["type"] == "text" and not isinstance(block["text"], str):
        got = type(block["text"]).__name__
        raise cf.MessageTypeError(f"{where}'s text must be a str, got {got}", index, "content")
    return block


def _content(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text alone is sized as one string (so the note costs the same both ways), else blocks."""
    if all(b["type"] == "text" for b in blocks):
        return "\n\n".join(b["text"] for b in blocks)
    return blocks


def _response_block(part: Any) -> dict[str, Any]:
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": part.tool_call_id, "name": part.tool_name, "input": part.args or {}}
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.content}
    return _other_block(part)


def _request_block(part: Any) -> dict[str, Any]:
    if isinstance(part, ToolReturnPart):
        return {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": part.model_response_str()}
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:
        return {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": part.model_response()}
    if isinstance(part, (SystemPromptPart, UserPromptPart)):
        content = part.content
        if isinstance(content, str):
            return {"type": "text", "text": content}
        return {"type": "text", "text": "\n".join(_user_item(item) for item in content)}
    if isinstance(part, RetryPromptPart):
        return {"type": "text", "text": part.model_response()}
    return _other_block(part)


def _user_item(item: Any) -> str:
    if isinstance(item, str):
        return item
    return str(getattr(item, "url", None) or getattr(item, "identifier", None) or type(item).__name__)


def _other_block(part: Any) -> dict[str, Any]:
    """Any other part as a block of its kind, sized by the text it is sent as: a built-in
    (provider-run) tool's return by its content's text, its call by its args' JSON."""
    if callable(getattr(part, "model_response_str", None)):
        text = part.model_response_str()
    elif callable(getattr(part, "args_as_json_str", None)):
        text = part.args_as_json_str()
    else:
        content = getattr(part, "content", "")
        text = content if isinstance(content, str) else ""
    return {"type": str(getattr(part, "part_kind", type(part).__name__)), "text": text}


def _edited_message(original: Any, converted: dict[str, Any], edited: dict[str, Any]) -> ModelMessage:
    """A copy of ``original`` with what the context edits changed: a thinking part removed,
    a tool return's content or a call's arguments replaced. (A message whose content the
    edits change holds blocks, one a part.)"""
    parts = []
    for part, (block, new) in zip(original.parts, edited_items(converted["content"], edited["content"]), strict=True):
        if new is block:
            parts.append(part)
        elif new is not None:
            parts.append(
                replace(part, args=new["input"]) if block["type"] == "tool_use" else _cleared(part, new["content"])
            )
    copy: ModelMessage = replace(original, parts=parts)
    return copy


def _cleared(part: Any, content: Any) -> Any:
    """A tool result an edit cleared, sent as the text it was sized as: a retry prompt (sent
    with an instruction to fix the call) or a return whose outcome frames its content as
    an error becomes a plain return of that text."""
    if isinstance(part, ToolReturnPart):
        if getattr(part, "outcome", "success") == "success":  # no outcome before pydantic-ai 2
            return replace(part, content=content)
        return replace(part, content=content, outcome="success")
    return ToolReturnPart(part.tool_name, content, tool_call_id=part.tool_call_id, timestamp=part.timestamp)


def _note_message(note: dict[str, Any]) -> ModelMessage:
    if note["role"] == "assistant":
        return ModelResponse(parts=[TextPart(content=note["content"])])
    return ModelRequest(parts=[UserPromptPart(content=note["content"])])


_CONVERSION = Conversion("anthropic", "pydantic-ai")
"""What the messages are packed as: Anthropic-shape dicts (see the module doc)."""


def pack(
    messages: Sequence[ModelMessage],
    *,
    max_tokens: int,
    **options: Unpack[WindowKeywords],
) -> Packed:
    """Packs ``messages`` into ``max_tokens - reserve_output_tokens``; the list and the pack."""
    return _pack(messages, window_options(max_tokens, options, _CONVERSION), "pack")


def _pack(messages: Sequence[ModelMessage], options: cf.PackOptions, route: str) -> Packed:
    return pack_converted(
        messages,
        to_dicts,
        _note_message,
        _edited_message,
        options,
        _CONVERSION,
        route=route,
    )


def history_processor(
    *,
    max_tokens: int,
    **options: Unpack[WindowKeywords],
) -> Callable[[list[ModelMessage]], list[ModelMessage]]:
    """A ``history_processors=`` entry packing each model call's history (see the module doc).

    ``reserve_output_tokens`` should cover the reply and what Pydantic AI adds outside the
    history: the agent's ``instructions`` and the tool definitions.
    """
    packing = window_options(max_tokens, options, _CONVERSION)

    def process(messages: list[ModelMessage]) -> list[ModelMessage]:
        return _pack(messages, packing, "history_processor").messages

    return process


def async_history_processor(
    *,
    max_tokens: int,
    **options: Unpack[WindowKeywords],
) -> Callable[[list[ModelMessage]], Awaitable[list[ModelMessage]]]:
    """:func:`history_processor` as a coroutine function, for async-only pipelines.

    Packing is native and short (microseconds), so it runs inline rather than in a thread.
    """
    packing = window_options(max_tokens, options, _CONVERSION)

    async def process(messages: list[ModelMessage]) -> list[ModelMessage]:
        return _pack(messages, packing, "history_processor").messages

    return process
