"""Ranking and path canonicalisation, in pure Python: the reference for
``contextfold-core``'s rank.rs and paths.rs."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from .._js import js_trim
from ..errors import ArgumentTypeError

NOISE_SEGMENTS = frozenset({"node_modules", "dist", ".next", ".turbo", "coverage", ".git", ".builderforce"})
NOISE_FILES = frozenset({"pnpm-lock.yaml", "package-lock.json", "yarn.lock", "bun.lockb"})

# JavaScript's /i on [a-z] without the u flag matches ASCII letters only; Python's
# re.IGNORECASE would also match U+017F and U+212A, so the classes spell both cases.
_MSYS_DRIVE = re.compile(r"/([a-zA-Z])/")
_DRIVE = re.compile(r"[a-zA-Z]:/")
_SLASHES = re.compile(r"/{2,}")
_DOT_SLASH = re.compile(r"(^|/)(\./)+")


def _check_strings(items: list[Any], what: str) -> None:
    for i, item in enumerate(items):
        if type(item) is not str:  # exact str, as the native path requires
            raise ArgumentTypeError(f"{what}[{i}]: expected str, got {type(item).__name__}")


def rank_by_count(items: list[str]) -> list[tuple[str, int]]:
    """Each distinct item with its count: most frequent first, ties in code-point order."""
    _check_strings(items, "items")
    return sorted(Counter(items).items(), key=lambda kv: (-kv[1], kv[0]))


def canonical_path(path: str) -> str:
    """Trimmed, backslashes as ``/``, ``/c/x`` as ``c:/x``, ``//`` collapsed, ``./`` removed."""
    p = js_trim(path).replace("\\", "/")
    if _MSYS_DRIVE.match(p):
        p = f"{p[1]}:/{p[3:]}"
    return _DOT_SLASH.sub(r"\1", _SLASHES.sub("/", p))


def _folded_cut(p: str, base: str) -> int | None:
    """Where ``p`` goes on past its leading folder that equals ``base`` but for case (as
    ``str.lower`` folds both), or None. A character lower-cases to as many characters alone
    as in a text (U+0130 to two), so the one prefix whose lower case is as long as
    ``base``'s is found by lengths, and compared once."""
    folded = base.lower()
    j = grown = 0
    while j + grown < len(folded) and j < len(p):
        if not p[j].isascii():
            grown += len(p[j].lower()) - 1
        j += 1
    if j + grown == len(folded) and p[j : j + 1] == "/" and p[:j].lower() == folded:
        return j + 1
    return None


def repo_path(path: str, root: str | None = None) -> str | None:
    """The path relative to ``root``, or None when it is not a repo file worth mapping."""
    p = canonical_path(path)
    if p.startswith("/") or _DRIVE.match(p):
        base = canonical_path(root).rstrip("/") if root else ""
        if not base:
            return None
        if _DRIVE.match(base + "/"):  # "C:/" and "C:" too
            cut = _folded_cut(p, base)
        else:
            cut = len(base) + 1 if p.startswith(base + "/") else None
        if cut is None:
            return None
        p = p[cut:]
    segments = p.split("/")
    if not p or ".." in segments:
        return None
    if any(s in NOISE_SEGMENTS for s in segments) or segments[-1] in NOISE_FILES:
        return None
    return p
