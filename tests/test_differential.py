"""Native == reference, on generated transcripts (10,000 examples a function) and on
every corpus transcript. Errors must match too: same class, same text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from contextfold import reference
from contextfold._contract import sizers
from contextfold._js import utf16_len
from hypothesis import given
from hypothesis import strategies as st

from .conftest import anthropic_corpus, examples, native_required, openai_corpus
from .strategies import content, item_transcripts, json_values, text, transcripts

EXAMPLES = examples(10_000)

pytestmark = pytest.mark.slow  # minutes of examples: CI runs them on the default Python


def same(fn: str, *args: Any) -> Any:
    """Calls `fn` on both backends; results (or exceptions) must be identical."""
    native = native_required()
    outcomes = []
    for module in (native, reference):
        try:
            result = getattr(module, fn)(*args)
            outcomes.append(("ok", result.tolist() if isinstance(result, np.ndarray) else result))
        except Exception as exc:  # compared below: class and text
            outcomes.append((type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1], (fn, outcomes)
    return outcomes[0][1]


@EXAMPLES
@given(st.fixed_dictionaries({"role": st.sampled_from(["user", "tool", "x"]), "content": content}))
def test_message_tokens(message: dict[str, Any]) -> None:
    same("message_tokens", message, None)
    if isinstance(message["content"], str):
        same("estimate_tokens", message["content"])


@EXAMPLES
@given(json_values)
def test_json_values_as_content(value: Any) -> None:
    same("tokens_of", [{"role": "user", "content": [value]}, {"role": "assistant", "tool_calls": [value]}], None)


@EXAMPLES
@given(transcripts(), st.integers(4, 100), st.integers(4, 3000))
def test_window_start(convo: list[dict[str, Any]], window: int, budget: int) -> None:
    same("window_start", convo, window, budget, None)


@EXAMPLES
@given(transcripts(), st.integers(0, 3000))
def test_compaction_tail(convo: list[dict[str, Any]], budget: int) -> None:
    same("compact_tail_start_for_budget", convo, budget, None)
    same("pinned_directive_index", convo, budget % (len(convo) + 2))
    same("verbatim_start", convo, budget % (len(convo) + 2) - 1)


@examples(2_000)
@given(transcripts(), st.integers(4, 100), st.integers(4, 3000))
def test_window_start_with_a_custom_estimator(convo: list[dict[str, Any]], window: int, budget: int) -> None:
    estimate: Callable[[str], int] = lambda text: len(text.split()) * 3  # noqa: E731
    same("window_start", convo, window, budget, sizers(estimate))
    same("message_tokens_array", convo, sizers(estimate))


@EXAMPLES
@given(
    st.lists(st.tuples(st.integers(0, 5000), st.booleans()), max_size=300), st.integers(4, 100), st.integers(4, 20_000)
)
def test_window_start_array(cells: list[tuple[int, bool]], window: int, budget: int) -> None:
    sizes = np.array([c[0] for c in cells], dtype=np.int64)
    user = np.array([c[1] for c in cells], dtype=np.bool_)
    same("window_start_array", sizes, user, window, budget)


@pytest.mark.parametrize(("window", "budget"), [(80, 64_000), (20, 4_000), (8, 1_000), (4, 4)])
def test_corpus(window: int, budget: int) -> None:
    rows = openai_corpus() + [row["messages"] for row in anthropic_corpus()]
    for convo in rows:
        same("message_tokens_array", convo, None)
        same("window_start", convo, window, budget, None)
        same("compact_tail_start_for_budget", convo, budget, None)
        # growing transcripts: every prefix
        for n in range(0, len(convo), max(1, len(convo) // 25)):
            same("window_start", convo[:n], window, budget, None)


# Responses items and provider sizing -----------------------------------------------------

opaque_parts = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, text),
        st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, text),
        st.builds(lambda d: {"type": "image", "source": {"type": "base64", "data": d}}, text),
        st.builds(lambda d: {"type": "document", "source": {"data": d}}, text),
        st.builds(lambda u: {"type": "input_image", "image_url": u}, text),
        st.builds(lambda u: {"type": "computer_screenshot", "image_url": u}, text),
        st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, text, text),
        st.builds(lambda d: {"type": "redacted_thinking", "data": d}, text),
        st.dictionaries(text, json_values, max_size=3),
    ),
    max_size=4,
)


@pytest.mark.usefixtures("offline_tiktoken")
@examples(2_000)
@given(item_transcripts(max_turns=8), st.sampled_from([None, 0, 1_600]))
def test_responses_items_and_provider_sizing(items: list[dict[str, Any]], image_tokens: int | None) -> None:
    same("tokens_of", items, None, image_tokens)
    same("message_tokens_array", items, None, image_tokens)
    same("tokens_of", items, "cl100k_base", image_tokens)


def _chars_per_token(text: str) -> int:
    return -(-utf16_len(text) // 4)


@pytest.mark.usefixtures("offline_tiktoken")
@examples(3_000)
@given(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": opaque_parts}))
def test_provider_sizing_of_opaque_blocks(message: dict[str, Any]) -> None:
    seed = same("message_tokens", message, None, None)
    provider = same("message_tokens", message, None, 1_600)
    # An estimator is handed the text chars/4 measures, on both backends; an encoding counts it.
    assert same("message_tokens", message, sizers(_chars_per_token, 1_600), 1_600) == provider
    same("message_tokens", message, "o200k_base", 1_600)
    if not any(
        isinstance(p, dict)
        and p.get("type") in ("image_url", "image", "document", "input_image", "computer_screenshot")
        for p in message["content"]
    ):
        assert provider <= seed
