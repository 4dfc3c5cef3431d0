"""LangGraph: a ``pre_model_hook`` for the prebuilt ReAct agent.

``pip install 'contextfold[langgraph]'``. ``create_react_agent(model, tools,
pre_model_hook=pre_model_hook(max_tokens=8_000))`` packs the state's messages before each
model call and hands them over as ``llm_input_messages``: the model sees the packed list,
the graph's state keeps every message. The packed list holds the state's own message
objects plus the note (see :mod:`contextfold.integrations.langchain`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import contextfold as cf
from contextfold._contract import WindowKeywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

from ._common import missing_extra, window_options

try:
    import langgraph  # noqa: F401  # the hook is for LangGraph's agent: require it like the others

    from .langchain import CONVERSION, pack_with
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise missing_extra("langgraph", exc) from exc

__all__ = ["pre_model_hook"]


def pre_model_hook(
    *,
    max_tokens: int,
    **options: Unpack[WindowKeywords],
) -> Callable[[Mapping[str, Any] | Any], dict[str, Any]]:
    """A hook returning ``{"llm_input_messages": packed}`` from the state's ``messages`` (a
    dict's item, or a pydantic state's attribute).

    The agent's ``prompt`` (its system message) is added after the hook runs: leave room
    for it, and for the tool definitions, in ``reserve_output_tokens``.
    """
    packing = window_options(max_tokens, options, CONVERSION._replace(adapter="langgraph"))

    def hook(state: Mapping[str, Any] | Any) -> dict[str, Any]:
        # A state is a dict, or an object (a pydantic state_schema), as LangGraph reads it.
        messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
        if messages is None:
            raise cf.ArgumentError(f"pre_model_hook: the state ({type(state).__name__}) holds no messages")
        packed = pack_with(messages, packing, adapter="langgraph", route="pre_model_hook")
        return {"llm_input_messages": packed.messages}

    return hook
