"""contextfold: keep LLM transcripts inside a model's context window, exactly and fast.

The same API runs on the native extension (Rust) or the pure-Python reference;
``contextfold.backend`` says which is active (``CONTEXTFOLD_BACKEND=python`` forces the
reference).
"""

from __future__ import annotations

from . import _backend
from ._edits import AppliedEdit, ClearThinking, ClearToolUses
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
from .compaction import (
    TRANSCRIPT_SUMMARY_INPUT_TOKENS,
    TRANSCRIPT_SUMMARY_MAX_TOKENS,
    TRANSCRIPT_SUMMARY_PROMPT,
    CompactMemo,
    TranscriptFold,
    WorkingTranscriptState,
    build_working_transcript,
    render_for_summary,
    still_in_working_context,
    summarize_transcript,
    summary_chunks,
)
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    ContextfoldError,
    EstimatorError,
    MessageError,
    MessageTypeError,
    MessageValueError,
    RequestError,
)
from .markers import (
    consolidation_marker_of,
    consolidation_metadata,
    is_consolidation_marker,
    last_consolidation_index,
    scope_to_consolidation,
)
from .memory import WorkingMemory, WorkingMemorySnapshot
from .pack import (
    VOLATILE_TAIL_TAG,
    HandoffPack,
    PackOptions,
    elision_marker,
    handoff_budget,
    handoff_line,
    is_volatile_content,
    is_volatile_tail,
    pack_handoff,
    pack_many,
    volatile_tail,
)
from .request import PackedRequest, pack_request, pack_requests
from .store import DEFAULT_TTL, CodeMapStore, RedisCodeMapStore, SQLiteCodeMapStore
from .tokens import (
    DEFAULT_COUNT_CACHE_BYTES,
    CountCacheInfo,
    count_cache_info,
    count_tokens,
    estimate_tokens,
    message_tokens,
    message_tokens_array,
    set_count_cache,
    tokens_of,
    transcript_tokens,
)
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


def _version() -> str:
    # The extension carries the version (importlib.metadata would add 10 ms to every
    # import); on the reference, the extension is left unloaded.
    if _backend.name == "native":
        from ._native import __version__

        return __version__
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(__name__)
    except PackageNotFoundError:
        return _source_version()


def _source_version() -> str:
    """The Cargo workspace's version, for a source tree on the path that was never
    installed (so has no metadata); ``0+unknown`` where there is none."""
    import re
    from pathlib import Path

    try:
        workspace = (Path(__file__).parents[2] / "Cargo.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return "0+unknown"
    found = re.search(r'^\[workspace\.package\][^\[]*?^version = "([^"]+)"', workspace, re.M | re.S)
    return found[1] if found else "0+unknown"


__version__ = _version()
"""The version, which maturin takes from the Cargo workspace: the installed distribution's
(or, for a source tree on the path that was never installed, the workspace's own)."""

__all__ = [
    "COMPACT_TAIL_MAX_MESSAGES",
    "COMPACT_TAIL_TOKEN_BUDGET",
    "COMPACT_TAIL_TURNS",
    "CONSOLIDATED_KEY_PREFIX",
    "CONSOLIDATED_ROOT_AREA",
    "DEFAULT_COUNT_CACHE_BYTES",
    "DEFAULT_TTL",
    "HISTORY_TOKEN_BUDGET",
    "HISTORY_WINDOW",
    "MAX_RECALLED_MAPS",
    "MIN_CONSOLIDATED_FILES",
    "TRANSCRIPT_SUMMARY_INPUT_TOKENS",
    "TRANSCRIPT_SUMMARY_MAX_TOKENS",
    "TRANSCRIPT_SUMMARY_PROMPT",
    "VOLATILE_TAIL_TAG",
    "AppliedEdit",
    "ArgumentError",
    "ArgumentTypeError",
    "ClearThinking",
    "ClearToolUses",
    "CodeMapStore",
    "CompactMemo",
    "ConsolidatedMemory",
    "ContextfoldError",
    "CountCacheInfo",
    "EstimatorError",
    "HandoffPack",
    "MessageError",
    "MessageTypeError",
    "MessageValueError",
    "PackOptions",
    "PackedRequest",
    "RedisCodeMapStore",
    "RequestError",
    "SQLiteCodeMapStore",
    "TranscriptFold",
    "WorkingMemory",
    "WorkingMemorySnapshot",
    "WorkingTranscriptState",
    "area_of_path",
    "areas_named_in",
    "areas_of_paths_in",
    "assemble_compacted",
    "backend",
    "build_working_transcript",
    "canonical_path",
    "compact_tail_start",
    "compact_tail_start_for_budget",
    "consolidate",
    "consolidated_area",
    "consolidated_facts_for",
    "consolidated_files",
    "consolidated_key",
    "consolidation_marker_of",
    "consolidation_metadata",
    "count_cache_info",
    "count_tokens",
    "elision_marker",
    "estimate_tokens",
    "handoff_budget",
    "handoff_line",
    "is_consolidation_marker",
    "is_volatile_content",
    "is_volatile_tail",
    "last_consolidation_index",
    "merge_consolidated",
    "message_tokens",
    "message_tokens_array",
    "pack_handoff",
    "pack_many",
    "pack_request",
    "pack_requests",
    "pinned_directive_index",
    "rank_by_count",
    "render_for_summary",
    "repo_path",
    "scope_to_consolidation",
    "set_count_cache",
    "still_in_working_context",
    "summarize_transcript",
    "summary_chunks",
    "tokens_of",
    "transcript_tokens",
    "verbatim_start",
    "volatile_tail",
    "window_start",
    "window_start_array",
    "windowed",
    "without_consolidated_files",
]
