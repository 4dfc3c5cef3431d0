"""Code maps: what a finished run learned about where the code lives, and recall of it.

:func:`consolidate` turns a run's working memory into one map per code *area* (the
directory most of its files share): the files that mattered, changed first, then reads
ranked by how often the run opened them. :func:`merge_consolidated` is the write rule a
keyed store applies, so a small run adds to an area's map instead of overwriting it, and
a deleted file leaves it. The recall side picks the maps a new request should be handed:
by the paths it names (:func:`areas_of_paths_in`) or by words that name an area
(:func:`areas_named_in`), most specific first (:func:`consolidated_facts_for`).

The stored format (a wire format, byte-exact across hosts): key ``codemap:<area>``
(``(root)`` for files at the repository root); entry lines ``- <path>`` or
``- <path> (<note>)`` with notes ``changed``, ``changed earlier``, ``deleted`` and
``read N×``; a last line ``(+N more file(s) touched)`` when more files were touched than
listed. The header lines are this library's own prose.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any, TypeVar, cast

from . import _backend
from ._contract import whole
from ._edits import iterable_of
from ._js import JS_SPACE_CHARS, collapse_spaces, field_of, is_str, js_trim, list_value, mapping_get, utf16_cut
from .errors import ArgumentError, ArgumentTypeError

__all__ = [
    "CONSOLIDATED_KEY_PREFIX",
    "CONSOLIDATED_ROOT_AREA",
    "MAX_RECALLED_MAPS",
    "MIN_CONSOLIDATED_FILES",
    "ConsolidatedMemory",
    "area_of_path",
    "areas_named_in",
    "areas_of_paths_in",
    "canonical_path",
    "consolidate",
    "consolidated_area",
    "consolidated_facts_for",
    "consolidated_files",
    "consolidated_key",
    "merge_consolidated",
    "rank_by_count",
    "repo_path",
    "without_consolidated_files",
]

CONSOLIDATED_KEY_PREFIX = "codemap:"
"""Key prefix of every code map."""
CONSOLIDATED_ROOT_AREA = "(root)"
"""The area of files at the repository root."""
MIN_CONSOLIDATED_FILES = 3
"""Fewer distinct files than this (changed, deleted and read together) is a lookup, not a map."""
MAX_RECALLED_MAPS = 6
"""Maps a run is handed, at most."""

_MAX_FILES = 12
_MIN_AREA_SEGMENTS = 2
_MAX_AREA_SEGMENTS = 4
_MAX_TASK_UNITS = 200
_MAX_KEY_UNITS = 255
_MIN_AREA_WORD = 4
_MAX_WORD_AREAS = 8
_MAX_PATH_AREAS = 24
_GENERIC_SEGMENTS = frozenset(
    "src lib libs app apps package packages component components util utils test tests index main core common "
    "shared source internal client clients server docs scripts public assets".split()
)

# JavaScript regular expressions, spelled for Python: `.` excludes \r and U+2028/U+2029
# as well as \n, `$` is `\Z`, `\d` is ASCII, `\s` is JavaScript's whitespace set.
_ANY = "[^\n\r\u2028\u2029]"
_LINE_BREAK = re.compile("[\n\r\u2028\u2029]")
"""What `.` stops at: a path holding one cannot be a map's entry."""
_SURROGATE = re.compile("[\ud800-\udfff]")
"""What UTF-8 cannot hold: a store refuses a map with one."""
_ENTRY = re.compile(f"- ({_ANY}+?)(?: \\(([^()]*)\\))?\\Z")
_MORE = re.compile(r"\(\+[0-9]+ more file\(s\) touched\)\Z")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}\Z")
# The seed finds URLs by `[a-zA-Z][a-zA-Z0-9+.-]*://\S+`: from every letter of a long run
# a backtracking engine scans the run for `://` again, quadratic in a pasted digest. They
# are found from each `://` instead (see _without_urls), the same matches in linear time.
_URL_TAIL = re.compile(f"://[^{JS_SPACE_CHARS}]")
_URL_END = re.compile(f"[{JS_SPACE_CHARS}]")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_PATH_TOKEN = re.compile(r"[A-Za-z0-9_.@()\-\\/]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")


def rank_by_count(items: Iterable[str]) -> list[tuple[str, int]]:
    """Each distinct item with how often it occurs: most frequent first, ties in plain
    code-point order (locale-independent, unlike the TypeScript host's ``localeCompare``)."""
    # A list read as stored (a subclass's own __iter__ never runs), as both backends read one.
    listed = list_value(items)
    return list(_backend.impl.rank_by_count(listed if listed is not None else list(iterable_of("items", items, "str"))))


def canonical_path(path: str) -> str:
    """A path's canonical spelling: trimmed, ``\\`` as ``/``, MSYS ``/c/x`` as ``c:/x``,
    ``//`` collapsed, ``./`` removed."""
    return str(_backend.impl.canonical_path(_text("path", path)))


def repo_path(path: str, root: str | None = None) -> str | None:
    """``path`` relative to the workspace ``root``, or None when it is no repository file
    worth mapping: outside the root (or absolute with no root), escaping with ``..``,
    under ``node_modules``, ``dist``, ``.next``, ``.turbo``, ``coverage``, ``.git`` or
    ``.builderforce``, or a lockfile. Drive paths compare case-insensitively."""
    found = _backend.impl.repo_path(_text("path", path), None if root is None else _text("root", root))
    return None if found is None else str(found)


def _text(name: str, value: Any) -> str:
    if not is_str(value):
        raise ArgumentTypeError(f"{name}: expected str, got {type(value).__name__}")
    return str.__str__(value)  # a subclass by the text it holds, not its __eq__


@dataclass(frozen=True, slots=True)
class ConsolidatedMemory:
    """One code map, ready for a keyed store."""

    key: str
    content: str


def _texts(name: str, items: Any, what: str = "str") -> list[str]:
    """``items`` read once as plain strs (an iterator is not used up by a second walk),
    each checked: ``name[i]: expected str`` (``name must be an iterable of {what}``)."""
    return [_text(f"{name}[{i}]", item) for i, item in enumerate(iterable_of(name, items, what))]


def consolidated_key(area: str) -> str:
    """The store key for an area: the same for every run on it, so their maps meet."""
    return utf16_cut(f"{CONSOLIDATED_KEY_PREFIX}{_text('area', area)}", _MAX_KEY_UNITS)


def consolidated_area(key: str) -> str | None:
    """The area a ``codemap:`` key is for, or None for any other key."""
    key = _text("key", key)
    return key[len(CONSOLIDATED_KEY_PREFIX) :] if key.startswith(CONSOLIDATED_KEY_PREFIX) else None


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _area_of_files(files: Sequence[str]) -> str:
    """The deepest directory (depth 4 to 2) holding a majority of the files that have one,
    else the depth-2 directory holding most, else the depth-1 one; root-only → ``(root)``."""
    placed = [parts[:-1] for parts in (f.split("/") for f in files) if len(parts) > 1]
    if not placed:
        return CONSOLIDATED_ROOT_AREA

    def ranked(depth: int) -> list[tuple[str, int]]:
        return rank_by_count(["/".join(d[:depth]) for d in placed if len(d) >= depth])

    for depth in range(_MAX_AREA_SEGMENTS, _MIN_AREA_SEGMENTS - 1, -1):
        top = ranked(depth)
        if top and top[0][1] * 2 > len(placed):
            return top[0][0]
    top = ranked(_MIN_AREA_SEGMENTS) or ranked(1)
    return top[0][0]


def _utc_day(at: datetime | date | None) -> str:
    if at is None:
        at = datetime.now(timezone.utc)
    kind = type(at)  # by its type: `__class__` may claim one
    if issubclass(kind, datetime):
        moment = cast(datetime, at)
        try:
            aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
            at = aware.astimezone(timezone.utc).date()
        except OverflowError:  # past year 9999 in UTC
            raise ArgumentError(f"at is out of range in UTC: {moment.isoformat()}") from None
    elif not issubclass(kind, date):
        raise ArgumentError(f"at must be a datetime, a date or None, got {kind.__name__}")
    return at.isoformat()


def _writable(text: str) -> bool:
    """Whether UTF-8 can hold ``text``, as a store needs."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _snapshot_lists(snapshot: Any) -> tuple[str | None, dict[str, list[str]]]:
    fields = ("created", "edited", "deleted", "read", "searched")
    if mapping_get(snapshot) is None and not any(hasattr(snapshot, f) for f in (*fields, "task")):
        # Neither a mapping nor an object with a snapshot's fields: it was an empty run.
        kind = type(snapshot).__name__
        raise ArgumentTypeError(f"snapshot must be a WorkingMemorySnapshot or a mapping of its fields, got {kind}")
    task = field_of(snapshot, "task")
    given = {f: field_of(snapshot, f) for f in fields}
    lists = {f: list(iterable_of(f"snapshot {f}", [] if v is None else v, "paths")) for f, v in given.items()}
    for name, items in lists.items():
        for i, item in enumerate(items):
            if not is_str(item):
                raise ArgumentTypeError(f"snapshot {name}[{i}]: expected str, got {type(item).__name__}")
    if task is not None and not is_str(task):
        raise ArgumentTypeError(f"snapshot task: expected str or None, got {type(task).__name__}")
    return task, lists


def consolidate(
    snapshot: Any,
    *,
    at: datetime | date | None = None,
    root: str | None = None,
    min_files: int = MIN_CONSOLIDATED_FILES,
) -> ConsolidatedMemory | None:
    """The code map for a finished run, or None when it touched fewer than ``min_files``
    distinct files (changed, deleted and read together).

    ``snapshot`` is a :class:`~contextfold.WorkingMemorySnapshot` or a mapping with its
    keys. Paths are made repo-relative to ``root`` and filtered (:func:`repo_path`; one
    holding a line break, one UTF-8 cannot hold, or one ending in `` (…)``, which would read
    back as another path and a note, is skipped too) before anything is
    counted; a lone surrogate in the task is written as U+FFFD. At most 12
    changed/read files are listed; files the run deleted follow as ``(deleted)`` lines,
    which :func:`merge_consolidated` applies as removals. ``at`` dates the map (UTC; a naive datetime is read as UTC).
    """
    min_files = whole("min_files", min_files, None, None)
    task, lists = _snapshot_lists(snapshot)

    def kept(items: list[str]) -> list[str]:
        # A map holds one entry a line: a path with a line break in it (one its readers'
        # `.` stops at, U+2028 and U+2029 too) would write two. One UTF-8 cannot hold (a
        # name os.listdir decoded with surrogate escapes) would make the map unstorable.
        # One ending in ` (…)` reads back as another path and a note (`(deleted)` too).
        paths = (repo_path(raw, root) for raw in items)
        return [
            p
            for p in paths
            if p and not _LINE_BREAK.search(p) and (p.isascii() or _writable(p)) and _entries(f"- {p}") == [(p, None)]
        ]

    deleted = _unique(kept(lists["deleted"]))
    deleted_set = set(deleted)
    changed = [p for p in _unique(kept(lists["created"] + lists["edited"])) if p not in deleted_set]
    changed_set = set(changed)
    reads = [(p, n) for p, n in rank_by_count(kept(lists["read"])) if p not in changed_set and p not in deleted_set]
    read_counts = dict(reads)
    ranked = changed + [p for p, _ in reads]
    if len(ranked) + len(deleted) < min_files or not (ranked or deleted):
        return None
    shown = ranked[:_MAX_FILES]
    area = _area_of_files(ranked or deleted)
    asked = _SURROGATE.sub("\ufffd", utf16_cut(collapse_spaces(task or ""), _MAX_TASK_UNITS))
    purpose = f' for a run asked: "{asked}"' if asked else ""
    lines = [
        f"Code map of `{area}`, recorded {_utc_day(at)}{purpose}.",
        "Start with these files rather than searching again:",
    ]
    for p in shown:
        if p in changed_set:
            lines.append(f"- {p} (changed)")
        else:
            n = read_counts.get(p, 1)
            lines.append(f"- {p} (read {n}×)" if n > 1 else f"- {p}")
    lines += [f"- {p} (deleted)" for p in deleted]
    if len(ranked) > len(shown):
        lines.append(f"(+{len(ranked) - len(shown)} more file(s) touched)")
    return ConsolidatedMemory(consolidated_key(area), "\n".join(lines))


def _entries(content: str) -> list[tuple[str, str | None]]:
    out = []
    for line in content.split("\n"):
        m = _ENTRY.match(line)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def _render(path: str, note: str | None) -> str:
    return f"- {path} ({note})" if note else f"- {path}"


def merge_consolidated(key: str, prior: str | None, next: str) -> str:
    """What a store keeps when map ``next`` lands on ``key`` holding ``prior``.

    The new run's entries come first, then the earlier map's entries it did not touch (an
    earlier ``changed`` restated as ``changed earlier``), minus every file the new run
    deleted, at most 12 with a ``(+N more file(s) touched)`` line for the rest; the header
    lines are ``next``'s. For a key that is not a code map, ``next`` as it is. Pass
    ``prior`` only while the stored map is live (not expired or superseded).
    """
    key, next = _text("key", key), _text("next", next)
    prior = None if prior is None else _text("prior", prior)
    if not key.startswith(CONSOLIDATED_KEY_PREFIX):
        return next
    header = [line for line in next.split("\n") if not _ENTRY.match(line) and not _MORE.match(line)]
    fresh = _entries(next)
    seen = {path for path, note in fresh if note == "deleted"}
    merged: list[str] = []
    for path, note in fresh:
        if path not in seen:
            seen.add(path)
            merged.append(_render(path, note))
    for path, note in _entries(prior) if prior is not None and js_trim(prior) else []:
        if path in seen or note == "deleted":
            continue
        seen.add(path)
        merged.append(_render(path, "changed earlier" if note == "changed" else note))
    more = len(merged) - _MAX_FILES
    return "\n".join(header + merged[:_MAX_FILES] + ([f"(+{more} more file(s) touched)"] if more > 0 else []))


def consolidated_files(content: str) -> list[str]:
    """The files a stored map lists, in order (never a ``(deleted)`` line)."""
    return [path for path, note in _entries(_text("content", content)) if note != "deleted"]


def without_consolidated_files(content: str, paths: Iterable[str]) -> str | None:
    """The map with ``paths`` taken out (compared canonically, case-insensitively), for a
    store whose files changed since; None when no entry is left."""
    drop = {canonical_path(p).lower() for p in _texts("paths", paths, "paths")}
    lines = []
    left = 0
    for line in _text("content", content).split("\n"):
        m = _ENTRY.match(line)
        if m:
            if canonical_path(m.group(1)).lower() in drop:
                continue
            left += 1
        lines.append(line)
    return "\n".join(lines) if left else None


def area_of_path(path: str) -> str:
    """The area of a repo-relative path: a file's directory, a directory itself (no
    extension), ``(root)`` for a file at the root, ``""`` for an empty path."""
    norm = re.sub(r"^(\./)+", "", js_trim(_text("path", path)).replace("\\", "/")).rstrip("/")  # not /+$: quadratic
    if not norm:
        return ""
    if not _EXTENSION.search(norm):
        return norm
    i = norm.rfind("/")
    return norm[:i] if i > 0 else CONSOLIDATED_ROOT_AREA


def areas_of_paths_in(text: str) -> list[str]:
    """The areas of the repo-relative paths a text names (URLs, absolute paths and ``..``
    skipped; a bare file name needs a stem of two or more characters), at most 24."""
    out: list[str] = []
    for raw in _PATH_TOKEN.findall(_without_urls(_text("text", text))):
        # The seed's `^[(]+|[.)]+$` and `[^.]{2,}.*\.ext$` (a stem of two, no dot in it
        # first), spelled without the backtracking either costs on a long token.
        token = raw.lstrip("(").rstrip(".)")
        if not token or token[0] in "\\/" or ".." in re.split(r"[\\/]", token):
            continue
        if not ("/" in token or "\\" in token or _is_bare_file(token)):
            continue
        area = area_of_path(token)
        if area and area not in out:
            out.append(area)
        if len(out) >= _MAX_PATH_AREAS:
            break
    return out


def _without_urls(text: str) -> str:
    """``text`` with each URL (a scheme, ``://`` and what follows up to whitespace) made
    one space, as the seed's ``text.replace(/[a-zA-Z][a-zA-Z0-9+.-]*:\\/\\/\\S+/g, " ")``
    makes them: a URL starts at the first letter of the scheme characters right before
    a ``://``, and ends at the next whitespace."""
    parts: list[str] = []
    done = 0  # text before this is written
    at = 0
    while (found := _URL_TAIL.search(text, at)) is not None:
        colon = found.start()
        start = colon
        while start > done and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < colon and not ("a" <= text[start].lower() <= "z"):
            start += 1  # a URL starts with a letter: skip the digits and +.- before one
        if start == colon:
            at = colon + 1  # no scheme: a `://` inside what follows may still start one
            continue
        end = _URL_END.search(text, colon + 3)
        stop = len(text) if end is None else end.start()
        parts += (text[done:start], " ")
        done = at = stop
    return "".join(parts) + text[done:] if parts else text


def _is_bare_file(token: str) -> bool:
    """Whether ``token`` names a file by itself: two characters that are no dot, then
    anything, then an extension."""
    extension = _EXTENSION.search(token)
    return extension is not None and extension.start() >= 2 and "." not in token[:2]


def _squash(s: str) -> str:
    return _NOT_WORD.sub("", s.lower())


def _request_terms(text: str) -> set[str]:
    words = [w for w in _NOT_WORD.split(_CAMEL.sub(r"\1 \2", text).lower()) if w]
    terms: set[str] = set()
    for i, word in enumerate(words):
        terms.add(word)
        if word.endswith("s") and len(word) > _MIN_AREA_WORD:
            terms.add(word[:-1])
        if i + 1 < len(words):
            terms.add(word + words[i + 1])
    return terms


def areas_named_in(text: str, areas: Iterable[str]) -> list[str]:
    """The stored areas a request names by word: ``runStore``, ``run-store``, ``run_store``
    and ``run store`` all name ``…/runStore``; generic (``src``, ``lib`` …) and short
    directory names never do. Deepest first, at most 8."""
    areas = _texts("areas", areas)
    terms = _request_terms(_text("text", text))
    if not terms:
        return []
    hits = [
        area
        for area in _unique(areas)
        if any(
            len(s) >= _MIN_AREA_WORD and s not in _GENERIC_SEGMENTS and s in terms
            for s in (_squash(seg) for seg in area.split("/"))
        )
    ]
    hits.sort(key=lambda a: -len(a.split("/")))
    return hits[:_MAX_WORD_AREAS]


F = TypeVar("F")


def consolidated_facts_for(facts: Iterable[F], areas: Sequence[str], max: int = MAX_RECALLED_MAPS) -> list[F]:
    """The code-map facts whose area contains, or lies within, one of ``areas``: most
    specific first, at most ``max``. Facts are mappings or objects with a ``key``; the
    same objects come back."""
    areas = _texts("areas", areas)
    max = whole("max", max)
    facts = iterable_of("facts", facts, "facts")
    if not areas:
        return []
    scored: list[tuple[int, F]] = []
    seen: set[str] = set()
    for fact in facts:
        key = field_of(fact, "key")
        area = consolidated_area(key) if is_str(key) else None
        if area is None or key in seen:
            continue
        if not any(area == d or d.startswith(f"{area}/") or area.startswith(f"{d}/") for d in areas):
            continue
        seen.add(key)
        scored.append((len(area.split("/")), fact))
    scored.sort(key=lambda s: -s[0])
    return [fact for _, fact in scored[:max]]
