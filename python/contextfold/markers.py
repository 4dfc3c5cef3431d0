"""Consolidation markers: a persisted fold in a stored conversation.

A marker is a stored message whose ``metadata`` (JSON text) says ``consolidation: true``.
A manual marker covers everything before it; an auto marker (written when a run was
compacted) covers up to the message whose ``id`` is its ``keepFromId``.
:func:`scope_to_consolidation` returns what a reader should load: the marker and what it
does not cover. An auto marker whose ``keepFromId`` cannot be placed (the row was deleted,
or history was re-inserted under new ids) is ignored and the scope falls back to the
marker before it, so messages the note never held are never dropped.

Wire format (byte-exact): ``{"consolidation":true}`` for a manual marker,
``{"consolidation":true,"auto":true,"keepFromId":N,"folded":M}`` for an auto one, the
last two keys left out when not given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any, TypeVar

from ._contract import read_items
from ._js import field_of, is_int, is_str, mapping_get, shown, stored
from .errors import ArgumentError, ArgumentTypeError

__all__ = [
    "consolidation_marker_of",
    "consolidation_metadata",
    "is_consolidation_marker",
    "last_consolidation_index",
    "scope_to_consolidation",
]

Row = TypeVar("Row")


def consolidation_metadata(auto: Mapping[str, int | None] | None = None) -> str:
    """The metadata text of a marker: manual without ``auto``; with it (a mapping with
    ``keep_from_id`` and ``folded``, either optional), an auto marker."""
    meta: dict[str, Any] = {"consolidation": True}
    if auto is not None:
        get = mapping_get(auto)
        if get is None:
            raise ArgumentTypeError(f"auto must be a mapping or None, got {type(auto).__name__}")
        meta["auto"] = True
        keep_from = _id("keep_from_id", get("keep_from_id", get("keepFromId")))
        if keep_from is not None:
            meta["keepFromId"] = keep_from
        folded = _id("folded", get("folded"))
        if folded is not None:
            meta["folded"] = folded
    return json.dumps(meta, separators=(",", ":"))


def _id(name: str, value: Any) -> int | None:
    """``value`` as a plain int or None: what a reader takes back (a float, NaN included,
    or a bool would be written as no reader reads it)."""
    if value is None:
        return None
    if not is_int(value):
        raise ArgumentError(f"{name} must be an int or None, got {type(value).__name__}")
    number = int.__int__(value)
    try:
        str(number)  # as json writes it: past the interpreter's digit limit it cannot
    except ValueError:
        raise ArgumentError(f"{name} is too long an int to write: {shown(number)}") from None
    return number


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")  # JSON.parse has no NaN or Infinity


def consolidation_marker_of(row: Any) -> dict[str, Any] | None:
    """The marker metadata of a stored message (a mapping or an object with ``metadata``),
    or None when it is not a marker."""
    text = field_of(row, "metadata")
    if not is_str(text):
        return None
    try:
        meta = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # nested too deep to read: no marker either
        return None
    if not isinstance(meta, dict) or meta.get("consolidation") is not True:
        return None
    return meta


def is_consolidation_marker(row: Any) -> bool:
    """Whether a stored message is a consolidation marker."""
    return consolidation_marker_of(row) is not None


def last_consolidation_index(rows: Sequence[Any]) -> int:
    """Index of the newest marker, or -1."""
    rows = read_items("rows", rows, "rows")
    return next((i for i in range(len(rows) - 1, -1, -1) if is_consolidation_marker(rows[i])), -1)


def scope_to_consolidation(rows: Sequence[Row]) -> list[Row]:
    """What a reader should load (the same row objects, in a new list): unchanged without
    a marker; from a manual marker on; for an auto marker, the marker then every row from
    its ``keepFromId`` on, other markers left out. A row is the one ``keepFromId`` names
    when its ``id`` is a number (never a bool) equal to it, as JavaScript's ``===`` compares."""
    rows = read_items("rows", rows, "rows")
    passed_over: set[int] = set()  # the unplaceable auto markers, by identity
    places: dict[Any, list[int]] | None = None
    # One walk down from the newest row: a marker passed over leaves the rows below it as
    # they were, so the next newest marker is further down, never behind.
    for idx in range(len(rows) - 1, -1, -1):
        marker = rows[idx]
        meta = None if id(marker) in passed_over else consolidation_marker_of(marker)
        if meta is None:
            continue
        if meta.get("auto") is not True:
            return [r for r in rows[idx:] if id(r) not in passed_over]
        places = _places_of_ids(rows) if places is None else places
        start = _first_place(places, meta.get("keepFromId"), rows, passed_over)
        if 0 <= start <= idx:
            return [marker, *(r for r in rows[start:] if r is not marker and not is_consolidation_marker(r))]
        passed_over.add(id(marker))  # unplaceable: ignore it, fall back
    return [r for r in rows if id(r) not in passed_over]


def _places_of_ids(rows: list[Any]) -> dict[Any, list[int]]:
    """Where each numeric row id sits, newest place first (popped from the end)."""
    places: dict[Any, list[int]] = {}
    for i in range(len(rows) - 1, -1, -1):
        key = field_of(rows[i], "id")
        if is_int(key):
            key = stored(key)
        elif isinstance(key, bool) or not isinstance(key, Real):
            continue
        places.setdefault(key, []).append(i)
    return places


def _first_place(places: dict[Any, list[int]], keep_from: Any, rows: list[Any], passed_over: set[int]) -> int:
    """The first row still in scope whose id is ``keep_from``, or -1. A float is the
    number JSON.parse reads too (``5.0``, ``5e0``: 5)."""
    found = places.get(keep_from) if is_int(keep_from) or type(keep_from) is float else None
    while found and id(rows[found[-1]]) in passed_over:
        found.pop()  # a marker passed over stays passed over
    return found[-1] if found else -1
