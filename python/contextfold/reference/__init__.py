"""The pure-Python reference backend.

Every hot path of the native extension exists here with the same signature and
byte-identical results; differential tests hold the two equal. It is what users get
without the extension, written as idiomatic, efficient Python: the honest baseline that
the benchmarks measure the extension against.
"""

from .count_cache import count_cache_info, set_count_cache
from .pack import handoff_line, pack_handoff, pack_many
from .paths import canonical_path, rank_by_count, repo_path
from .request import pack_lines, pack_request, pack_requests, pack_rows, request_head
from .tokens import count_tokens, estimate_tokens, message_tokens, message_tokens_array, tokens_of
from .window import (
    compact_tail_start_for_budget,
    pinned_directive_index,
    verbatim_start,
    window_start,
    window_start_array,
)

__all__ = [
    "canonical_path",
    "compact_tail_start_for_budget",
    "count_cache_info",
    "count_tokens",
    "estimate_tokens",
    "handoff_line",
    "message_tokens",
    "message_tokens_array",
    "pack_handoff",
    "pack_lines",
    "pack_many",
    "pack_request",
    "pack_requests",
    "pack_rows",
    "pinned_directive_index",
    "rank_by_count",
    "repo_path",
    "request_head",
    "set_count_cache",
    "tokens_of",
    "verbatim_start",
    "window_start",
    "window_start_array",
]
