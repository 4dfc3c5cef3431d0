"""contextfold: keep LLM transcripts inside a model's context window, exactly and fast.

The same API runs on the native extension (Rust) or the pure-Python reference;
``contextfold.backend`` says which is active (``CONTEXTFOLD_BACKEND=python`` forces the
reference).
"""

from __future__ import annotations

from . import _backend
from .codemap import (
    CONSOLIDATED_KEY_PREFIX,
    CONSOLIDATED_ROOT_AREA,
    MAX_RECALLED_MAPS,
    MIN_CONSOLIDATED_FILES,
    ConsolidatedMemory,
    area_of_path,
    areas_named_in,
    areas_of_paths_in,
    canonical_path,
    consolidate,
    consolidated_area,
    consolidated_facts_for,
    consolidated_files,
    consolidated_key,
    merge_consolidated,
    rank_by_count,
    repo_path,
    without_consolidated_files,
)
from .errors import (
    ArgumentError,
    ContextfoldError,
    EstimatorError,
    MessageError,
    MessageTypeError,
    MessageValueError,
)
from .memory import WorkingMemory, WorkingMemorySnapshot
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
    "CONSOLIDATED_KEY_PREFIX",
    "CONSOLIDATED_ROOT_AREA",
    "HISTORY_TOKEN_BUDGET",
    "HISTORY_WINDOW",
    "MAX_RECALLED_MAPS",
    "MIN_CONSOLIDATED_FILES",
    "VOLATILE_TAIL_TAG",
    "ArgumentError",
    "ConsolidatedMemory",
    "ContextfoldError",
    "EstimatorError",
    "HandoffPack",
    "MessageError",
    "MessageTypeError",
    "MessageValueError",
    "WorkingMemory",
    "WorkingMemorySnapshot",
    "area_of_path",
    "areas_named_in",
    "areas_of_paths_in",
    "assemble_compacted",
    "backend",
    "canonical_path",
    "compact_tail_start",
    "compact_tail_start_for_budget",
    "consolidate",
    "consolidated_area",
    "consolidated_facts_for",
    "consolidated_files",
    "consolidated_key",
    "elision_marker",
    "estimate_tokens",
    "handoff_budget",
    "handoff_line",
    "is_volatile_content",
    "is_volatile_tail",
    "merge_consolidated",
    "message_tokens",
    "message_tokens_array",
    "pack_handoff",
    "pack_many",
    "pinned_directive_index",
    "rank_by_count",
    "repo_path",
    "tokens_of",
    "transcript_tokens",
    "verbatim_start",
    "volatile_tail",
    "window_start",
    "window_start_array",
    "windowed",
    "without_consolidated_files",
]
