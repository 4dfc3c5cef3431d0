"""The Rust extension. Use the public API in :mod:`contextfold`; these are its internals.

Every function here has exactly the signature of its pure-Python twin in
:mod:`contextfold.reference`, so the stub re-exports those definitions instead of
repeating them, and ``mypy.stubtest`` holds the extension to them.
"""

from contextfold.reference import canonical_path as canonical_path
from contextfold.reference import compact_tail_start_for_budget as compact_tail_start_for_budget
from contextfold.reference import count_cache_info as count_cache_info
from contextfold.reference import count_tokens as count_tokens
from contextfold.reference import estimate_tokens as estimate_tokens
from contextfold.reference import handoff_line as handoff_line
from contextfold.reference import message_tokens as message_tokens
from contextfold.reference import message_tokens_array as message_tokens_array
from contextfold.reference import pack_handoff as pack_handoff
from contextfold.reference import pack_lines as pack_lines
from contextfold.reference import pack_many as pack_many
from contextfold.reference import pack_request as pack_request
from contextfold.reference import pack_requests as pack_requests
from contextfold.reference import pack_rows as pack_rows
from contextfold.reference import pinned_directive_index as pinned_directive_index
from contextfold.reference import rank_by_count as rank_by_count
from contextfold.reference import repo_path as repo_path
from contextfold.reference import request_head as request_head
from contextfold.reference import set_count_cache as set_count_cache
from contextfold.reference import tokens_of as tokens_of
from contextfold.reference import verbatim_start as verbatim_start
from contextfold.reference import window_start as window_start
from contextfold.reference import window_start_array as window_start_array

build_profile: str
"""``"release"`` or ``"debug"``: benchmarks refuse to time a debug build."""

__version__: str
"""The Cargo workspace's version, which is also the distribution's."""
