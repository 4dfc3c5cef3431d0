"""What every adapter shares: the missing-extra error and packing a converted transcript."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import contextfold as cf

T = TypeVar("T")

Estimator = Callable[[str], int]
"""A token estimator: ``callable(text) -> int``, as ``estimate_tokens=`` takes."""


def missing_extra(extra: str, exc: ImportError) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    package = (exc.name or "a dependency").split(".")[0]
    return ImportError(f"{package} is not installed: pip install 'contextfold[{extra}]'")


def compact_json(value: Any) -> str:
    """Compact JSON as the packer measures it (no spaces, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Packed(NamedTuple):
    """A framework transcript packed: its own objects plus the note, and the pack itself."""

    messages: list[Any]
    """The caller's kept message objects in order, with the note as a framework message."""
    pack: cf.HandoffPack
    """The pack of the converted dicts: ``kept``, ``dropped``, ``fits``, ``tokens``, ``note``."""


def pack_converted(
    originals: Sequence[T],
    converted: Sequence[dict[str, Any]],
    make_note: Callable[[dict[str, Any]], Any],
    **options: Any,
) -> Packed:
    """Packs ``converted`` (one dict per original, same order) and maps the result back.

    The kept messages come back as the ``originals`` at the ``kept`` indices; the note
    (the one output dict that is not an input) goes through ``make_note``.
    """
    pack = cf.pack_handoff(converted, **options)
    out: list[Any] = []
    kept = pack.kept
    j = 0
    for message in pack.messages:
        if j < len(kept) and message is converted[kept[j]]:
            out.append(originals[kept[j]])
            j += 1
        else:  # the one output message that is not an input: the note
            out.append(make_note(message))
    return Packed(out, pack)
