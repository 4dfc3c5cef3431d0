"""contextfold: keep LLM transcripts inside a model's context window, exactly and fast.

The same API runs on the native extension (Rust) or the pure-Python reference;
``contextfold.backend`` says which is active (``CONTEXTFOLD_BACKEND=python`` forces the
reference).
"""

from __future__ import annotations

from . import _backend
from .errors import (
    ArgumentError,
    ContextfoldError,
    EstimatorError,
    MessageError,
    MessageTypeError,
    MessageValueError,
)
from .pack import (
    VOLATILE_TAIL_TAG,
    HandoffPack,
    elision_marker,
    handoff_budget,
    handoff_line,
    is_volatile_content,
    is_volatile_tail,
    pack_handoff,
    pack_many,
    volatile_tail,
)
from .tokens import estimate_tokens, message_tokens, message_tokens_array, tokens_of, transcript_tokens
from .window import (
    COMPACT_TAIL_MAX_MESSAGES,
    COMPACT_TAIL_TOKEN_BUDGET,
    COMPACT_TAIL_TURNS,
    HISTORY_TOKEN_BUDGET,
    HISTORY_WINDOW,
    assemble_compacted,
    compact_tail_start,
    compact_tail_start_for_budget,
    pinned_directive_index,
    verbatim_start,
    window_start,
    window_start_array,
    windowed,
)

backend: str = _backend.name
"""``"native"`` or ``"python"``: the implementation behind the API, fixed at import."""

__version__ = "0.1.0"

__all__ = [
    "COMPACT_TAIL_MAX_MESSAGES",
    "COMPACT_TAIL_TOKEN_BUDGET",
    "COMPACT_TAIL_TURNS",
    "HISTORY_TOKEN_BUDGET",
    "HISTORY_WINDOW",
    "VOLATILE_TAIL_TAG",
    "ArgumentError",
    "ContextfoldError",
    "EstimatorError",
    "HandoffPack",
    "MessageError",
    "MessageTypeError",
    "MessageValueError",
    "assemble_compacted",
    "backend",
    "compact_tail_start",
    "compact_tail_start_for_budget",
    "elision_marker",
    "estimate_tokens",
    "handoff_budget",
    "handoff_line",
    "is_volatile_content",
    "is_volatile_tail",
    "message_tokens",
    "message_tokens_array",
    "pack_handoff",
    "pack_many",
    "pinned_directive_index",
    "tokens_of",
    "transcript_tokens",
    "verbatim_start",
    "volatile_tail",
    "window_start",
    "window_start_array",
    "windowed",
]
