"""A run's working memory: what it has read, searched and changed so far.

By turn forty an agent cannot see what it concluded at turn ten: its reasoning is not
carried into the next turn and old tool results are compacted out of its window, so it
re-reads and re-derives. :meth:`WorkingMemory.brief` is the run's own record, restated
before each turn (deliver it in the volatile tail, :func:`contextfold.volatile_tail`, so it
is never cached and never taken for the user's request). Record successful observations
only: a memory that claims a write that failed grounds every later turn on a lie.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._contract import spelled, whole
from ._js import collapse_spaces, is_str, js_trim, mapping_get, quoted
from .codemap import _LINE_BREAK, rank_by_count
from .errors import ArgumentError, ArgumentTypeError

__all__ = ["BRIEF_MAX_FILES", "BRIEF_MAX_SEARCHES", "BRIEF_MIN_OBSERVATIONS", "WorkingMemory", "WorkingMemorySnapshot"]

BRIEF_MIN_OBSERVATIONS = 10
"""Below this many observations the run's own results are still in its window."""
BRIEF_MAX_FILES = 25
"""Files a brief lists per section."""
BRIEF_MAX_SEARCHES = 15
"""Searches a brief lists."""

Kind = Literal["read", "created", "edited", "deleted", "searched"]
_FILE_KINDS = ("read", "created", "edited", "deleted")
_KINDS = (*_FILE_KINDS, "searched")


@dataclass(frozen=True, slots=True)
class WorkingMemorySnapshot:
    """What a working memory holds. Lists keep duplicates: how often is a signal."""

    task: str | None
    created: tuple[str, ...]
    edited: tuple[str, ...]
    deleted: tuple[str, ...]
    read: tuple[str, ...]
    searched: tuple[str, ...]


class WorkingMemory:
    """Short-term memory for one run."""

    def __init__(self) -> None:
        self._task: str | None = None
        self._lists: dict[str, list[str]] = {k: [] for k in (*_FILE_KINDS, "searched")}
        self._observations = 0

    def set_task(self, task: str) -> None:
        """What the run was asked (whitespace collapsed); a consolidation names it."""
        if not is_str(task):
            raise ArgumentTypeError(f"task: expected str, got {type(task).__name__}")
        asked = collapse_spaces(task)
        if asked:
            self._task = asked

    def observe(self, kind: Kind | Mapping[str, Any], path_or_query: str | None = None) -> None:
        """Records one successful observation: ``observe("read", "src/a.py")``,
        ``observe("searched", "budget reset")``, or an observation dict
        (``{"kind": "edited", "path": …}`` / ``{"kind": "searched", "query": …}``).

        Every call counts toward :attr:`size`; a blank path or query is not recorded.
        """
        get = mapping_get(kind)
        given: Any = get("kind") if get is not None else kind
        name = spelled(given, _KINDS)
        if name is None:
            raise ArgumentError(f"unknown observation kind {quoted(given)}: expected one of {_KINDS}")
        if get is not None:
            path_or_query = get("query" if name == "searched" else "path")
        if not is_str(path_or_query):
            what = "query" if name == "searched" else "path"
            raise ArgumentTypeError(f"observation {what}: expected str, got {type(path_or_query).__name__}")
        self._observations += 1
        item = js_trim(path_or_query)
        if item:
            self._lists[name].append(item)

    @property
    def size(self) -> int:
        """Observations so far (searches and file events alike)."""
        return self._observations

    @property
    def snapshot(self) -> WorkingMemorySnapshot:
        """An immutable copy of what the memory holds."""
        lists = self._lists
        return WorkingMemorySnapshot(
            self._task,
            tuple(lists["created"]),
            tuple(lists["edited"]),
            tuple(lists["deleted"]),
            tuple(lists["read"]),
            tuple(lists["searched"]),
        )

    def brief(self, observations: int | None = None) -> str | None:
        """What this run has already established, to put in front of its next turn; None
        until it has made 10 observations (``observations`` lets a host count every tool
        call instead) or when nothing is recorded.

        Sections: Changed (created then edited, each once), Deleted, Read (files already
        changed left out; ranked by count, ``(n×)`` when more than once; past 25 a
        ``- … k more`` line), Searched (ranked, at most 15).
        """
        made = self._observations if observations is None else whole("observations", observations, None, None)
        if made < BRIEF_MIN_OBSERVATIONS:
            return None
        lists = self._lists

        # An item holding a line break cannot be one `- <item>` line (a file named so
        # would write lines and sections of its own): left out, as consolidate leaves
        # such a path out of a map. Tested on the distinct items, not on every observation.
        def listable(item: str) -> bool:
            return not _LINE_BREAK.search(item)

        changed = [p for p in dict.fromkeys(lists["created"] + lists["edited"]) if listable(p)]
        changed_set = set(changed)
        deleted = [p for p in dict.fromkeys(lists["deleted"]) if listable(p)]
        reads = [(p, n) for p, n in rank_by_count(lists["read"]) if p not in changed_set and listable(p)]
        searches = [(s, n) for s, n in rank_by_count(lists["searched"]) if listable(s)]
        if not (changed or deleted or reads or searches):
            return None

        def counted(item: str, n: int) -> str:
            return f"- {item} ({n}×)" if n > 1 else f"- {item}"

        lines = [
            "## Where this run stands",
            "This is your own record of the run so far, kept for you; it is not a new request. Earlier tool "
            "results may have been compacted out of your context, but what you learned from them still holds: "
            "build on it. Open a file again only if it may have changed or you need a part you have not seen yet.",
        ]
        if changed:
            lines += ["", "Changed:", *(f"- {p}" for p in changed[:BRIEF_MAX_FILES])]
        if deleted:
            lines += ["", "Deleted:", *(f"- {p}" for p in deleted[:BRIEF_MAX_FILES])]
        if reads:
            lines += ["", "Read:", *(counted(p, n) for p, n in reads[:BRIEF_MAX_FILES])]
            if len(reads) > BRIEF_MAX_FILES:
                lines.append(f"- … {len(reads) - BRIEF_MAX_FILES} more")
        if searches:
            lines += ["", "Searched:", *(counted(s, n) for s, n in searches[:BRIEF_MAX_SEARCHES])]
        return "\n".join(lines)
