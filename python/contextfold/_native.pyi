"""The Rust extension. Use the public API in :mod:`contextfold`; these are its internals,
with the same signatures as :mod:`contextfold.reference`.

``estimate`` is ``None`` (⌈UTF-16 length / 4⌉) or the ``(per_message, per_text)`` pair
built by ``contextfold._estimate.sizers``.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

_Sizers = tuple[Callable[[int, Any], int], Callable[[str], int]] | None

build_profile: str
"""``"release"`` or ``"debug"``: benchmarks refuse to time a debug build."""

def estimate_tokens(text: str) -> int:
    """⌈UTF-16 length / 4⌉ of ``text``, read in place."""

def message_tokens(message: Any, estimate: _Sizers = None) -> int:
    """Tokens of one message."""

def tokens_of(messages: Any, estimate: _Sizers = None) -> int:
    """Sum of the messages' tokens."""

def message_tokens_array(messages: Any, estimate: _Sizers = None) -> npt.NDArray[np.int64]:
    """Each message's tokens."""

def window_start(messages: Any, window: int, token_budget: int, estimate: _Sizers = None) -> int:
    """Index where the chunked history window starts."""

def window_start_array(
    sizes: npt.NDArray[np.int64], user: npt.NDArray[np.bool_], window: int, token_budget: int
) -> int:
    """``window_start`` over per-message sizes and a user-turn mask."""

def verbatim_start(messages: Any, i: int) -> int:
    """``i`` clamped, then moved past ``tool`` messages."""

def compact_tail_start_for_budget(messages: Any, budget: int, estimate: _Sizers = None) -> int:
    """Start of a compaction tail under ``budget`` tokens."""

def pinned_directive_index(messages: Any, tail_start: int) -> int:
    """Index of the last user message when before ``tail_start``, else -1."""

def _scan_floor(messages: Any) -> int:
    """Reads each message's role and content length: the benchmarks' floor."""

def pack_handoff(
    messages: Any,
    budget: int,
    estimate: _Sizers,
    pinned: list[int],
    summary: str | None,
    system_tokens: int,
    dialect: str,
    chunk_tokens: int | None,
) -> tuple[list[Any], list[int], str | None, bool, int]:
    """Packs into ``budget`` tokens: ``(messages, kept, note, fits, tokens)``."""

def pack_many(
    transcripts: list[Any],
    budget: int,
    system_tokens: list[int],
    dialect: str,
    chunk_tokens: int | None,
    threads: int,
) -> list[tuple[list[Any], list[int], str | None, bool, int]]:
    """Packs each transcript, extracted while attached, on ``threads`` threads without the GIL."""

def rank_by_count(items: list[str]) -> list[tuple[str, int]]:
    """Each distinct string with its count: most frequent first, ties in code-point order."""

def canonical_path(path: str) -> str:
    """The canonical spelling of a path."""

def repo_path(path: str, root: str | None = None) -> str | None:
    """The path relative to ``root``, or None when it is not a repo file worth mapping."""

def handoff_line(message: Any) -> str:
    """One note line for a dropped message."""

__all__ = [
    "_scan_floor",
    "build_profile",
    "canonical_path",
    "compact_tail_start_for_budget",
    "estimate_tokens",
    "handoff_line",
    "message_tokens",
    "message_tokens_array",
    "pack_handoff",
    "pack_many",
    "pinned_directive_index",
    "rank_by_count",
    "repo_path",
    "tokens_of",
    "verbatim_start",
    "window_start",
    "window_start_array",
]
