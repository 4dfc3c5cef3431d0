"""Custom token estimators, shared by both backends.

A custom estimator is a callable ``estimate(text) -> int``. A message then costs
``estimate(text) + 4``, where ``text`` is its content (a string as is, anything else as
compact JSON) followed by the compact JSON of its ``tool_calls``. Both backends call the
same two helpers built here, so a custom estimator gives identical results on either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import EstimatorError
from .reference.jsjson import compact_json
from .reference.tokens import MESSAGE_OVERHEAD, content_and_calls

Estimator = Callable[[str], int]
PerMessage = Callable[[int | None, Any], int]
PerText = Callable[[str], int]


def checked(estimate: Estimator, text: str) -> int:
    """``estimate(text)``, verified to be a non-negative int."""
    tokens = estimate(text)
    if type(tokens) is not int and not (isinstance(tokens, int) and not isinstance(tokens, bool)):
        raise EstimatorError(f"estimate_tokens must return an int, got {type(tokens).__name__}")
    if tokens < 0:
        raise EstimatorError(f"estimate_tokens must return a non-negative int, got {tokens}")
    return int(tokens)


def estimator_text(message: Any, index: int | None = None) -> str:
    """The text a custom estimator sizes for ``message``."""
    content, calls = content_and_calls(message, index)
    text = content if type(content) is str else compact_json("" if content is None else content)
    return text if calls is None else text + compact_json(calls)


def sizers(estimate: Estimator | None) -> tuple[PerMessage, PerText] | None:
    """The ``(per_message, per_text)`` pair the backends take, or None for chars/4."""
    if estimate is None:
        return None
    if not callable(estimate):
        raise EstimatorError(f"estimate_tokens must be callable, got {type(estimate).__name__}")

    def per_message(index: int | None, message: Any) -> int:
        return checked(estimate, estimator_text(message, index)) + MESSAGE_OVERHEAD

    def per_text(text: str) -> int:
        return checked(estimate, text)

    return per_message, per_text
