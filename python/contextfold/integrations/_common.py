"""What every adapter shares: the missing-extra error, its packing options (a
:class:`contextfold.PackOptions`), and packing a transcript converted to dicts with the
result mapped back to the caller's objects."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, NamedTuple, TypeVar

import contextfold as cf

T = TypeVar("T")

Estimator = Callable[[str], int] | Literal["o200k_base", "cl100k_base"]
"""What ``estimate_tokens=`` takes: a ``callable(text) -> int``, or the name of an OpenAI
encoding that contextfold counts natively."""


def missing_extra(extra: str, exc: ImportError) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    package = (exc.name or "a dependency").split(".")[0]
    return ImportError(f"{package} is not installed: pip install 'contextfold[{extra}]'")


def json_text(value: Any) -> str:
    """Compact JSON as the packer measures it (no spaces, non-ASCII kept)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def text_tokens(text: str, estimate_tokens: Estimator | None) -> int:
    """``text``'s tokens by ``estimate_tokens``, or by the default estimate."""
    if estimate_tokens is None:
        return cf.estimate_tokens(text)
    if isinstance(estimate_tokens, str):
        return cf.count_tokens(text, estimate_tokens)
    return estimate_tokens(text)


def window_options(max_tokens: int, options: Mapping[str, Any]) -> cf.PackOptions:
    """The options an adapter packs with: a window of ``max_tokens`` (the name the
    frameworks' own trimmers use) and any other :class:`contextfold.PackOptions` field
    (``reserve_output_tokens``, ``estimate_tokens``, ``cut``, ``edits``, ``sizing``, …);
    bad values fail here, when the adapter is built."""
    return cf.PackOptions(target_context_tokens=max_tokens, **options)


def with_fixed(options: cf.PackOptions, fixed_tokens: int) -> cf.PackOptions:
    """``options`` with ``fixed_tokens`` (a system prompt, tool schemas sent beside the
    messages) added to the reserve, up to the whole window."""
    if not fixed_tokens:
        return options
    reserve = min(options.target_context_tokens, options.reserve_output_tokens + fixed_tokens)
    return replace(options, reserve_output_tokens=reserve)


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
    options: cf.PackOptions,
    *,
    shape: Literal["openai", "anthropic"],
    fixed_tokens: int = 0,
) -> Packed:
    """Packs ``converted`` (one dict per original, same order) and maps the result back.

    The kept messages come back as the ``originals`` at the ``kept`` indices; the note
    (the one output dict that is not an input) goes through ``make_note``.
    """
    pack = cf.pack_handoff(converted, options=with_fixed(options, fixed_tokens), shape=shape)
    return Packed(originals_of(pack, originals, converted, make_note), pack)


def originals_of(
    pack: cf.HandoffPack,
    originals: Sequence[Any],
    converted: Sequence[Any],
    make_note: Callable[[dict[str, Any]], Any],
) -> list[Any]:
    """``pack.messages`` (a pack of ``converted``) with each kept message swapped for its
    original, and the note (the one output message that is not an input) made by ``make_note``."""
    out: list[Any] = []
    kept = pack.kept
    j = 0
    for message in pack.messages:
        if j < len(kept) and message is converted[kept[j]]:
            out.append(originals[kept[j]])
            j += 1
        else:
            out.append(make_note(message))
    return out
