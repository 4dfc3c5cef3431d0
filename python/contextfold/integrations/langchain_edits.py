"""LangChain's ``ClearToolUsesEdit``, drop-in: the same edit for LangChain's own
``ContextEditingMiddleware``, with a linear number of token counts.

``pip install 'contextfold[langchain]'``. Re-exported by
:mod:`contextfold.integrations.langchain`::

    from contextfold.integrations.langchain import ClearToolUsesEdit
    from langchain.agents.middleware import ContextEditingMiddleware

    middleware = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=50_000, clear_at_least=10_000)])

This is LangChain's edit (``langchain.agents.middleware.context_editing``), not
contextfold's own :class:`contextfold.ClearToolUses` (SPEC §14), whose rules differ: here a
tool use is a ``ToolMessage`` and the call it answers in the nearest ``AIMessage`` before
it, ``keep`` counts ``ToolMessage`` objects, and ``clear_at_least`` is a point to stop at,
not a minimum below which nothing happens. The results are LangChain's on every input,
down to the marks and its quirks: a result whose call is not in the nearest ``AIMessage``
before it is left alone, and with ``clear_tool_inputs`` the cleared call replaces the first
message in the list equal to its ``AIMessage`` (``list.index``).

What differs is the cost. LangChain's edit recounts the whole transcript after every
result it clears when ``clear_at_least`` is set (quadratic in the transcript), scans back
from every ``ToolMessage`` to find its ``AIMessage`` and finds that message again by
equality from the start of the list. This one reads the transcript once (the nearest
``AIMessage`` of each ``ToolMessage``, each call found by id at most once), compares only
the messages that can be equal, and counts the transcript once: after that it counts only
the messages it changes, before and after, and keeps the running total by the differences.

Performance notes: on a 1,000-message corpus transcript (``benches/bench_langchain_edit.py``)
the single pass over the messages takes about 0.1 ms and the one full count (LangChain's
``count_tokens_approximately``) about 2 ms, most of the edit's time. Handing the messages
to contextfold's native core was considered for the pass and dropped: converting them to
dicts (:func:`contextfold.integrations.langchain.to_dicts`) alone takes about 2 ms, twenty
times the pass, and the count has to be the caller's ``count_tokens`` for the edit to
trigger where LangChain's does. Native code does the packing that follows the edit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from ._common import missing_extra

try:
    from langchain.agents.middleware.context_editing import ContextEdit, TokenCounter
    from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise missing_extra("langchain", exc) from exc

__all__ = ["ClearToolUsesEdit"]

_CLEARED = {"cleared": True, "strategy": "clear_tool_uses"}
"""The mark a cleared ``ToolMessage`` carries in ``response_metadata["context_editing"]``."""


@dataclass(slots=True)
class ClearToolUsesEdit(ContextEdit):
    """Clear old tool results once the transcript costs more than ``trigger`` tokens, as
    LangChain's ``ClearToolUsesEdit`` does (same fields, defaults and results).

    ``apply`` edits ``messages`` in place with the ``count_tokens`` it is given: when
    ``count_tokens(messages)`` exceeds ``trigger``, every ``ToolMessage`` but the newest
    ``keep``, oldest first, unless already cleared, unless its call is not among the
    ``tool_calls`` of the nearest ``AIMessage`` before it, or its tool (the message's
    ``name``, else the call's) is in ``exclude_tools``, is replaced by a copy whose content is
    ``placeholder``, ``artifact`` None and ``response_metadata["context_editing"]``
    ``{"cleared": True, "strategy": "clear_tool_uses"}``. With ``clear_tool_inputs`` the
    call's ``args`` become ``{}`` and its id is added to the ``AIMessage``'s
    ``response_metadata["context_editing"]["cleared_tool_inputs"]`` (sorted). With
    ``clear_at_least`` above 0 it stops once the tokens freed reach ``clear_at_least``.

    Counting: the transcript is counted once, for the trigger. After that, only with
    ``clear_at_least`` above 0, what a cleared result frees is ``count_tokens(before) -
    count_tokens(after)`` over the messages it changed (the ``ToolMessage``, and with
    ``clear_tool_inputs`` the ``AIMessage``): two counts of one or two messages per cleared
    result, where LangChain recounts the whole transcript after each. For a counter that sums
    a count per message, plus a constant (which cancels in each difference), the freed total
    equals what that recount gives, so the edit stops where LangChain's does. LangChain's
    ``count_tokens_approximately`` (the middleware's default) is such a counter with its
    default arguments: it rounds each message's characters up to tokens on their own ("so
    that individual message token counts add up to the total"), adds 3 per message and counts
    tools once. So is ``BaseChatModel.get_num_tokens_from_messages`` as
    ``token_count_method="model"`` calls it: a sum over the messages, with the system message
    and tools the middleware adds to every call as the constant. ``count_tokens_approximately``
    with ``use_usage_metadata_scaling=True`` (it scales the whole list) or a fractional
    ``extra_tokens_per_message`` (rounded once at the end) is not; for such a counter the
    running total is the sum of per-message differences, which approximates the recount, and
    the edit may stop at another result than LangChain's. Whether the edit runs at
    all is always decided on the full count, as LangChain decides it.
    """

    trigger: int = 100_000
    """The edit runs when ``count_tokens(messages)`` is above this."""

    clear_at_least: int = 0
    """Above 0: stop clearing once this many tokens are freed (0: clear all it can)."""

    keep: int = 3
    """How many of the newest ``ToolMessage`` objects are never cleared."""

    clear_tool_inputs: bool = False
    """Also empty the ``args`` of the call a cleared result answers, in its ``AIMessage``."""

    exclude_tools: Sequence[str] = ()
    """Names of tools whose results are never cleared."""

    placeholder: str = "[cleared]"
    """The content a cleared ``ToolMessage`` gets."""

    def apply(self, messages: list[AnyMessage], *, count_tokens: TokenCounter) -> None:
        """Apply the clear-tool-uses strategy to ``messages``, in place."""
        tokens = count_tokens(messages)
        if tokens <= self.trigger:
            return
        # One pass: each ToolMessage with the position of the nearest AIMessage before it.
        # Edits replace a message by a copy of its own class, so these positions hold.
        candidates: list[tuple[int, ToolMessage, int]] = []
        nearest_ai = -1
        for i, m in enumerate(messages):
            if isinstance(m, ToolMessage):
                candidates.append((i, m, nearest_ai))
            if isinstance(m, AIMessage):
                nearest_ai = i
        if self.keep >= len(candidates):
            candidates = []
        elif self.keep:
            candidates = candidates[: -self.keep]
        excluded = set(self.exclude_tools)
        calls = _Calls()
        equal = _EqualMessages()
        freed = 0
        for idx, tool_message, at in candidates:
            if tool_message.response_metadata.get("context_editing", {}).get("cleared"):
                continue
            if at < 0:
                continue
            ai_message = cast("AIMessage", messages[at])
            tool_call = calls.find(at, ai_message, tool_message.tool_call_id)
            if tool_call is None:
                continue
            if (tool_message.name or tool_call["name"]) in excluded:
                continue
            cleared = tool_message.model_copy(
                update={
                    "artifact": None,
                    "content": self.placeholder,
                    "response_metadata": {**tool_message.response_metadata, "context_editing": dict(_CLEARED)},
                }
            )
            messages[idx] = cleared
            before: list[BaseMessage] = [tool_message]
            after: list[BaseMessage] = [cleared]
            if self.clear_tool_inputs:
                where = equal.first(messages, at, ai_message)
                before.append(messages[where])
                messages[where] = _inputs_cleared(ai_message, tool_message.tool_call_id)
                after.append(messages[where])
            if self.clear_at_least > 0:
                freed += count_tokens(before) - count_tokens(after)
                if max(0, freed) >= self.clear_at_least:
                    break


def _inputs_cleared(message: AIMessage, call_id: str) -> AIMessage:
    """A copy of ``message`` whose calls with id ``call_id`` have ``args`` ``{}``, the id
    added to its ``response_metadata["context_editing"]["cleared_tool_inputs"]`` (sorted);
    LangChain's ``_build_cleared_tool_input_message`` to the value."""
    tool_calls: list[dict[str, Any]] = []
    found = False
    for call in message.tool_calls:
        copy = dict(call)
        if copy.get("id") == call_id:
            copy["args"] = {}
            found = True
        tool_calls.append(copy)
    metadata = dict(getattr(message, "response_metadata", {}))
    entry = dict(metadata.get("context_editing", {}))
    if found:
        entry["cleared_tool_inputs"] = sorted({*entry.get("cleared_tool_inputs", []), call_id})
        metadata["context_editing"] = entry
    return message.model_copy(update={"tool_calls": tool_calls, "response_metadata": metadata})


class _Calls:
    """The call a ``ToolMessage`` answers: the first of its ``AIMessage``'s ``tool_calls``
    with its id, as LangChain's scan finds it. Each message's calls are read once, in order
    and only as far as a lookup needs (so a malformed call raises where LangChain's scan
    would); clearing a call's input keeps its id, name and place, so what was read holds."""

    __slots__ = ("_by_id", "_read")

    def __init__(self) -> None:
        self._by_id: dict[int, dict[Any, Any]] = {}  # position -> first call of each id read
        self._read: dict[int, int] = {}  # position -> how many calls were read

    def find(self, at: int, message: AIMessage, call_id: Any) -> Any:
        by_id = self._by_id.setdefault(at, {})
        try:
            if call_id in by_id:
                return by_id[call_id]
        except TypeError:  # an unhashable id (a message built without validation)
            return next((c for c in message.tool_calls if c.get("id") == call_id), None)
        tool_calls = message.tool_calls
        for j in range(self._read.get(at, 0), len(tool_calls)):
            call = tool_calls[j]
            key = call.get("id")
            self._read[at] = j + 1
            try:
                by_id.setdefault(key, call)
            except TypeError:
                pass
            if key == call_id:
                return call
        return None


class _EqualMessages:
    """``messages.index(ai_message)``, LangChain's way to put a cleared call back: the first
    message equal to it. Pydantic's equality needs the same class and equal fields, so only
    messages of its class with the same id and call ids are compared (in the typical
    transcript, none but itself); edits keep all three, so the groups are built once."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[Any, list[int]] | None = None

    def first(self, messages: list[Any], at: int, message: AIMessage) -> int:
        if self._groups is None:
            self._groups = {}
            for i, m in enumerate(messages):
                if isinstance(m, AIMessage):
                    self._groups.setdefault(_identity(m), []).append(i)
        for i in self._groups[_identity(message)]:
            if messages[i] is message or messages[i] == message:
                return i
        raise AssertionError("unreachable: the message is at its own position")


def _identity(message: AIMessage) -> Any:
    """What equal messages share and an edit keeps: class, id and call ids."""
    try:
        key = (type(message), message.id, tuple(c.get("id") for c in message.tool_calls))
        hash(key)
    except Exception:  # a message built without validation: compare it with its whole class
        return (type(message),)
    return key
