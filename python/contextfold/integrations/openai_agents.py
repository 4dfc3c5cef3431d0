"""OpenAI Agents SDK: a ``call_model_input_filter`` that packs what the model sees into its window.

``pip install 'contextfold[openai-agents]'``::

    from agents import Agent, RunConfig, Runner
    from contextfold.integrations.openai_agents import InputFilter

    config = RunConfig(call_model_input_filter=InputFilter(target_context_tokens=128_000))
    result = await Runner.run(agent, "Fix the failing test.", run_config=config)

Before each model call the SDK hands the filter the Responses API input items it is about
to send and the agent's ``instructions``; :class:`InputFilter` packs the items with
:func:`contextfold.pack_handoff` (``shape="responses"``): a ``function_call`` (or any
``*_call``) stays with its output and the reasoning items before it, the latest user
message is kept, leading ``developer`` / ``system`` items are kept, and the dropped middle
becomes one note, a ``{"type": "message", "role": ..., "content": text}`` item. The
``instructions`` count like a system prompt (``system=``) and so do the agent's tool
definitions (``tools=``, see :class:`InputFilter`); the output reserve is
``reserve_output_tokens``, or the agent's ``model_settings.max_tokens`` when not given.

The filter returns the SDK's own item objects (by ``kept`` index) plus the note item, in a
new list, and never changes an item. Items are dicts as the SDK passes them; an item that
is a pydantic model (an output object passed back in) is sized by its
``model_dump(mode="json", exclude_unset=True)`` and returned as the same object, unless a
context edit (``edits=``) changed it: then the edited dict is returned, as it is sent.
Only the model's input is packed: the run's history (``result.to_input_list()``, a
session) keeps every item.

When the must-keep part (instructions, tools, leading developer items, the latest user
message with its exchange) is itself over the window, the filter sends that part
(``on_overflow="send"``, the default: the provider decides, and a pessimistic estimate
does not stop a run the model could take) with a warning logged, or raises
:class:`ContextOverflowError` carrying the pack (``on_overflow="raise"``), which
``Runner.run`` passes to its caller, to retry on a model with a larger window.

Not counted: hosted tools (web search, file search, computer use …) and MCP servers'
tools, which the SDK resolves after the filter runs; leave room for them in
``reserve_output_tokens``. With server-managed state (``conversation_id``,
``previous_response_id``) the SDK sends only the new items, and the server holds the rest:
this filter cannot shrink what it does not see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import contextfold as cf
from contextfold._contract import DEFAULT_IMAGE_TOKENS
from contextfold._edits import Edit
from contextfold._js import quoted

from ._common import Estimator, Packed, missing_extra, originals_of
from ._report import report_pack

try:
    from agents import Agent, FunctionTool, Handoff, handoff
    from agents.run import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise missing_extra("openai-agents", exc) from exc

__all__ = ["ContextOverflowError", "InputFilter", "agent_tools"]


class ContextOverflowError(cf.ContextfoldError):
    """The must-keep part of a model call's input is over the window (``on_overflow="raise"``)."""

    def __init__(self, message: str, pack: cf.HandoffPack) -> None:
        super().__init__(message)
        self.pack = pack
        """The pack of the input: its ``messages`` are the must-keep part, ``tokens`` its size."""


def agent_tools(agent: Agent[Any]) -> list[dict[str, Any]]:
    """The agent's function tools and handoffs as the Responses API receives them.

    Every one is counted, enabled or not (``is_enabled`` may need the run context): an
    over-count only leaves more room. Hosted and MCP tools are not included.
    """
    tools: list[dict[str, Any]] = [
        _function_tool(t.name, t.description, t.params_json_schema, t.strict_json_schema)
        for t in agent.tools
        if isinstance(t, FunctionTool)
    ]
    for item in agent.handoffs:
        h = item if isinstance(item, Handoff) else handoff(item)
        tools.append(_function_tool(h.tool_name, h.tool_description, h.input_json_schema, h.strict_json_schema))
    return tools


def _function_tool(name: str, description: str | None, parameters: Any, strict: bool) -> dict[str, Any]:
    # The key order of the SDK's own converter, so a custom estimator sees the JSON as sent.
    return {"name": name, "parameters": parameters, "strict": strict, "type": "function", "description": description}


@dataclass(frozen=True)
class InputFilter:
    """A ``RunConfig(call_model_input_filter=...)`` packing each model call's input items.

    ``target_context_tokens`` is the model's window. ``reserve_output_tokens`` is kept free
    for the reply; None (the default) takes the agent's ``model_settings.max_tokens``, or 0
    (the filter does not see ``RunConfig.model_settings``: give the reserve when you set
    ``max_tokens`` there).
    ``estimate_tokens``: None (⌈UTF-16 length / 4⌉), ``"o200k_base"`` / ``"cl100k_base"``
    (exact counts, native) or a ``callable(text) -> int``. ``cut``, ``chunk_tokens``,
    ``sizing``, ``image_tokens``, ``summary`` and ``edits`` are
    :func:`contextfold.pack_handoff`'s (``cut="chunked"`` keeps the packed
    prefix stable as the run grows, for prompt-cache hits). ``tools``: ``"agent"`` counts
    :func:`agent_tools` of the calling agent, a list counts those definitions, None none.
    ``pinned``, given the items, returns indices of items to keep with their exchanges
    (say, the run's first user message). ``on_overflow``: see the module doc.

    The filter is synchronous: packing is native and takes microseconds, so the SDK runs it
    inline in ``Runner.run``, ``run_sync`` and ``run_streamed`` alike.
    """

    target_context_tokens: int
    reserve_output_tokens: int | None = None
    estimate_tokens: Estimator | None = None
    cut: Literal["greedy", "chunked"] = "greedy"
    chunk_tokens: int | None = None
    sizing: Literal["seed", "provider"] = "seed"
    image_tokens: int = DEFAULT_IMAGE_TOKENS
    summary: str | None = None
    edits: Sequence[Edit] = ()
    tools: Literal["agent"] | list[dict[str, Any]] | None = "agent"
    pinned: Callable[[Sequence[Any]], Iterable[int]] | None = None
    on_overflow: Literal["send", "raise"] = "send"

    def __post_init__(self) -> None:
        checked = cf.PackOptions(  # every packing option checked here, once, as packing checks it
            target_context_tokens=self.target_context_tokens,
            reserve_output_tokens=self.reserve_output_tokens or 0,
            estimate_tokens=self.estimate_tokens,
            cut=self.cut,
            chunk_tokens=self.chunk_tokens,
            sizing=self.sizing,
            image_tokens=self.image_tokens,
            summary=self.summary,
            edits=self.edits,
        )
        object.__setattr__(self, "edits", checked.edits)  # a tuple: the filter stays hashable
        if self.on_overflow not in ("send", "raise"):
            raise cf.ArgumentError(f"on_overflow: expected 'send' or 'raise', got {quoted(self.on_overflow)}")
        if self.tools != "agent" and self.tools is not None and not isinstance(self.tools, list):
            raise cf.ArgumentTypeError(f"tools: expected 'agent', a list of dicts or None, got {quoted(self.tools)}")

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Packs ``data.model_data.input``; the instructions pass through unchanged."""
        model_data = data.model_data
        packed = self.pack(model_data.input, instructions=model_data.instructions, agent=data.agent)
        return ModelInputData(input=packed.messages, instructions=model_data.instructions)

    def pack(self, items: list[Any], *, instructions: str | None = None, agent: Agent[Any] | None = None) -> Packed:
        """Packs ``items`` (Responses input items) as a model call with these ``instructions``
        from ``agent`` would send them: the SDK's own items plus the note, and the pack."""
        if not isinstance(items, list):
            raise cf.MessageTypeError(f"input: expected a list of items, got {type(items).__name__}", None, "")
        readable = items if all(isinstance(item, dict) for item in items) else [_as_dict(item) for item in items]
        pack = cf.pack_handoff(
            readable,
            target_context_tokens=self.target_context_tokens,
            reserve_output_tokens=self._reserve(agent),
            estimate_tokens=self.estimate_tokens,
            pinned=self.pinned(items) if self.pinned is not None else (),
            system=instructions,
            shape="responses",
            cut=self.cut,
            chunk_tokens=self.chunk_tokens,
            tools=self._tools(agent),
            sizing=self.sizing,
            image_tokens=self.image_tokens,
            summary=self.summary,
            edits=self.edits,
        )
        report_pack(pack, adapter="openai-agents", route="call_model_input_filter")
        if not pack.fits and self.on_overflow == "raise":  # "send": the report above warns
            message = f"the input's must-keep part is {pack.tokens} tokens, over the {pack.budget}-token budget"
            raise ContextOverflowError(message, pack)
        if readable is items:  # the packed list already holds the SDK's own dicts
            return Packed(pack.messages, pack)
        # A kept item an edit changed comes back as the dict that is sent, as the note does.
        return Packed(originals_of(pack, items, readable, lambda note: note, lambda _, __, edited: edited), pack)

    def _reserve(self, agent: Agent[Any] | None) -> int:
        if self.reserve_output_tokens is not None:
            return self.reserve_output_tokens
        max_tokens = agent.model_settings.max_tokens if agent is not None else None
        return min(max_tokens or 0, self.target_context_tokens)

    def _tools(self, agent: Agent[Any] | None) -> list[dict[str, Any]] | None:
        if self.tools == "agent":
            return agent_tools(agent) if agent is not None else None
        return self.tools


def _as_dict(item: Any) -> Any:
    """A pydantic item as the SDK would send it; a dict (or anything else, for the packer
    to reject with its index) as it is."""
    dump = getattr(item, "model_dump", None)
    if isinstance(item, dict) or dump is None:
        return item
    return dump(mode="json", exclude_unset=True)
