"""LangChain's context editing on a 1,000-message transcript (corpus messages, cycled):
LangChain's ``ContextEditingMiddleware`` with its own ``ClearToolUsesEdit``, against
contextfold's ``ClearToolUsesEdit`` followed by contextfold's packing, at a trigger of 8,000
tokens and ``clear_at_least`` set to none, half or all of what clearing every result but the
newest 3 frees (LangChain's edit recounts the transcript after each result it clears once
``clear_at_least`` is set). Counts are LangChain's ``count_tokens_approximately``, as the
middleware's default. The edited messages are checked equal to LangChain's before timing.

Rows of each group:

- ``langchain middleware``: ``ContextEditingMiddleware.wrap_model_call`` (a deep copy of the
  messages, then LangChain's edit), the model call a no-op.
- ``contextfold edit + pack``: contextfold's edit on a shallow copy of the list (it replaces
  messages, never changes one), then :func:`contextfold.integrations.langchain.pack_with`
  into 8,000 tokens.
- ``contextfold edit in the middleware + pack``: contextfold's edit inside LangChain's
  ``ContextEditingMiddleware`` (so with its deep copy), then ``ContextfoldMiddleware``.
- ``contextfold native ClearToolUses + pack``: contextfold's own edit, natively, as
  :func:`~contextfold.integrations.langchain.pack_with` applies it (``edits=`` in the
  options; the messages converted to dicts and the result mapped back). Its rules are
  contextfold's, not LangChain's (it clears in cache-stable steps and never recounts, so
  its ``clear_at_least`` is 0 in every group), so its output is checked against packing the
  converted dicts, not against LangChain's edit.

    pytest benches/bench_langchain_edit.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

from typing import Any

import contextfold as cf
import pytest

from .conftest import native, repeated

BUDGET = 8_000
TRIGGER = 8_000
SHARES = [0.0, 0.5, 1.0]
"""``clear_at_least`` as a share of what clearing every result but the newest 3 frees."""


@pytest.fixture(scope="module")
def lc() -> Any:
    """The LangChain pieces, or a skip when langchain is not installed."""
    try:
        from contextfold.integrations import langchain
    except ImportError as exc:
        pytest.skip(f"langchain is not installed ({exc})")
    return langchain


@pytest.fixture(scope="module")
def transcript(lc: Any) -> list[Any]:
    import gc

    from langchain_core.messages import convert_to_messages

    messages = convert_to_messages(repeated(1_000))
    gc.freeze()  # long-lived: keep the collector from rescanning them each round
    return messages


def _clear_at_least(lc: Any, messages: list[Any], share: float) -> int:
    from langchain_core.messages.utils import count_tokens_approximately

    everything = list(messages)
    lc.ClearToolUsesEdit(trigger=0).apply(everything, count_tokens=count_tokens_approximately)
    freed = count_tokens_approximately(messages) - count_tokens_approximately(everything)
    return max(int(share * freed), 0)


def _request(messages: list[Any]) -> Any:
    from langchain.agents.middleware.types import ModelRequest
    from langchain_core.language_models.fake_chat_models import FakeChatModel

    return ModelRequest(model=FakeChatModel(), messages=list(messages), tools=[], runtime=object())


@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize(
    "how",
    [
        "langchain middleware",
        "contextfold edit + pack",
        "contextfold edit in the middleware + pack",
        "contextfold native ClearToolUses + pack",
    ],
)
def bench_clear_tool_uses(benchmark: Any, lc: Any, transcript: list[Any], how: str, share: float) -> None:
    from langchain.agents.middleware.context_editing import ClearToolUsesEdit, ContextEditingMiddleware
    from langchain_core.messages.utils import count_tokens_approximately

    native()
    fields = {"trigger": TRIGGER, "clear_at_least": _clear_at_least(lc, transcript, share)}
    seen: list[Any] = []

    def model(request: Any) -> None:
        seen.append(request.messages)

    theirs = ContextEditingMiddleware(edits=[ClearToolUsesEdit(**fields)])
    ours = ContextEditingMiddleware(edits=[lc.ClearToolUsesEdit(**fields)])
    packing = lc.ContextfoldMiddleware(max_tokens=BUDGET)
    options = cf.PackOptions(target_context_tokens=BUDGET)

    def edit_and_pack() -> list[Any]:
        edited = list(transcript)
        lc.ClearToolUsesEdit(**fields).apply(edited, count_tokens=count_tokens_approximately)
        seen.append(edited)
        return lc.pack_with(edited, options).messages

    own = cf.PackOptions(target_context_tokens=BUDGET, edits=[cf.ClearToolUses(trigger=TRIGGER)])
    if how == "contextfold native ClearToolUses + pack":
        packed = lc.pack_with(transcript, own)
        direct = cf.pack_handoff(lc.to_dicts(transcript), options=own)
        assert lc.to_dicts(packed.messages) == direct.messages and direct.applied_edits

    runs = {
        "langchain middleware": lambda: theirs.wrap_model_call(_request(transcript), model),
        "contextfold edit + pack": edit_and_pack,
        "contextfold edit in the middleware + pack": lambda: ours.wrap_model_call(
            _request(transcript), lambda request: packing.wrap_model_call(request, model)
        ),
        "contextfold native ClearToolUses + pack": lambda: lc.pack_with(transcript, own).messages,
    }
    # checked before timing: the edit is LangChain's, and what is packed is packed from it
    theirs.wrap_model_call(_request(transcript), model)
    runs[how]()
    expected, edited = seen[0], seen[-1]
    if how == "contextfold edit in the middleware + pack":
        assert edited == lc.pack_with(expected, options).messages
    elif how != "contextfold native ClearToolUses + pack":
        assert edited == expected
    assert sum(m.content == "[cleared]" for m in expected) > 100
    benchmark.group = f"ClearToolUsesEdit, 1,000 messages, clear_at_least {share:.0%} of clearing all"
    benchmark.pedantic(runs[how], rounds=5 if how == "langchain middleware" else 20, iterations=1)
