"""Handoff packing: fit any transcript into a model's window without breaking it.

:func:`pack_handoff` keeps the leading system messages, the latest directive (the last
real user request), pinned turns and the newest whole tool exchanges, and folds the rest
into ONE note placed after the system messages. It never cuts inside a message and never
splits a tool call from its results; when the must-keep part alone is too large it says
so (``fits=False``) instead of silently cutting.

The note's text (this module's format, stable across backends):

    Earlier conversation, folded to fit the context window (oldest first):
    [… 12 earlier messages not shown]
    - user: fix the flaky test in ci/run…
    - assistant [read_file, grep]: Looking at the runner first.

Each line is :func:`handoff_line` of a dropped message: its role, the names of the tools
it called (or, for a tool result, the tool's ``name``), and the first 80 UTF-16 units of
its text with whitespace collapsed (``…`` when cut). The newest dropped messages are
listed, at most 40, as many as fit; :func:`elision_marker` counts the rest. With
``summary=`` the note is ``"Summary of the earlier conversation, …:\\n" + summary`` when
that fits.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from . import _backend
from ._contract import (
    VOLATILE_TAIL_CLOSE,
    VOLATILE_TAIL_TAG,
    EncodingName,
    Estimator,
    HandoffPack,
    add_note,
    check_system,
    chunk_size,
    elision_marker,
    handoff_budget,
    is_volatile_content,
    sizers,
    whole,
)
from ._js import js_trim
from .errors import ArgumentError, MessageTypeError
from .tokens import Message, message_tokens

__all__ = [
    "VOLATILE_TAIL_TAG",
    "HandoffPack",
    "elision_marker",
    "handoff_budget",
    "handoff_line",
    "is_volatile_content",
    "is_volatile_tail",
    "pack_handoff",
    "pack_many",
    "volatile_tail",
]


def handoff_line(message: Message) -> str:
    """One note line for a dropped message: ``role [tools]: first words…``."""
    if not isinstance(message, dict):
        raise MessageTypeError(f"message: expected a dict, got {type(message).__name__}", None, "")
    return str(_backend.impl.handoff_line(message))


def is_volatile_tail(message: Message) -> bool:
    """True for a ``user`` message whose content opens with :data:`VOLATILE_TAIL_TAG`."""
    return isinstance(message, dict) and message.get("role") == "user" and is_volatile_content(message.get("content"))


def volatile_tail(sections: Iterable[str | None]) -> dict[str, str] | None:
    """The one per-request tail message for these sections, or None when all are empty.

    Sections are trimmed and joined by a blank line between the open and close tags.
    Append it after the history; :func:`pack_handoff` keeps it last and never takes it
    for the directive.
    """
    body = "\n\n".join(s for s in (js_trim(x or "") for x in sections) if s)
    return {"role": "user", "content": f"{VOLATILE_TAIL_TAG}\n{body}\n{VOLATILE_TAIL_CLOSE}"} if body else None


def pack_handoff(
    messages: Sequence[Message],
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    estimate_tokens: Estimator | EncodingName | None = None,
    pinned: Iterable[int] = (),
    summary: str | None = None,
    system: str | list[Any] | None = None,
    shape: Literal["auto", "openai", "anthropic"] = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
) -> HandoffPack:
    """Pack ``messages`` into ``target_context_tokens - reserve_output_tokens`` tokens.

    Under budget the transcript comes back unchanged. Otherwise: leading system messages,
    the latest directive and ``pinned`` turns (with their tool exchanges) are kept; the
    newest whole segments fill the rest (``cut="greedy"``), or the tail starts at fixed
    cut points every ``chunk_tokens`` (default ``budget // 4``) so the packed prefix stays
    stable as the transcript grows (``cut="chunked"``); the dropped middle becomes one
    note. ``system`` is Anthropic's separate system prompt: counted, never dropped.
    ``shape="auto"`` pairs Anthropic ``tool_use``/``tool_result`` blocks when any appear.

    The list is read once, when the call begins: every field of the result (``messages``,
    ``kept``, ``dropped``) comes from that reading, even if ``estimate_tokens`` (or another
    thread) changes the list during the call.
    """
    return _backend.impl.pack_handoff(  # type: ignore[no-any-return]
        messages,
        target_context_tokens,
        reserve_output_tokens,
        estimate_tokens,
        pinned,
        summary,
        system,
        shape,
        cut,
        chunk_tokens,
    )


def pack_many(
    transcripts: Sequence[Sequence[Message]],
    *,
    target_context_tokens: int,
    reserve_output_tokens: int = 0,
    estimate_tokens: Estimator | EncodingName | None = None,
    systems: Sequence[str | list[Any] | None] | None = None,
    shape: Literal["auto", "openai", "anthropic"] = "auto",
    cut: Literal["greedy", "chunked"] = "greedy",
    chunk_tokens: int | None = None,
    threads: int | None = None,
) -> list[HandoffPack]:
    """:func:`pack_handoff` over many transcripts, with the same options for each.

    On the native backend, with ``threads`` above one (default: one a CPU; never more
    than the CPUs, and fewer when the OS refuses to start more), the calling thread reads
    the transcripts (reading Python objects needs the GIL) and worker threads pack them
    with the GIL released; with one thread it packs them in place. Either way the call
    passes through the interpreter every quarter switch interval, so other Python threads
    get their turns and Ctrl-C stops it (releasing everything the batch held), and it is
    safe to call from many threads at once. The results equal packing one by one.
    ``systems`` gives each transcript's separate system prompt (Anthropic shape). An
    embedded encoding (``estimate_tokens="o200k_base"``) is counted natively, so those
    batches stay native and GIL-free too; a custom ``estimate_tokens`` is Python code, so
    those batches are packed one by one.

    Each transcript list is read once, when packing it begins, and its result comes from
    that reading: a thread changing a transcript during the batch changes no field of its
    result.
    """
    budget = handoff_budget(target_context_tokens, reserve_output_tokens)
    chunk = chunk_size(budget, shape, cut, chunk_tokens)
    count = os.cpu_count() or 1 if threads is None else whole("threads", threads, 1, None)
    if not isinstance(transcripts, list):
        transcripts = list(transcripts)
    if systems is not None and len(systems) != len(transcripts):
        raise ArgumentError(f"systems has {len(systems)} entries for {len(transcripts)} transcripts")
    sizing = sizers(estimate_tokens)
    if sizing is not None and not isinstance(sizing, str):  # Python code sizes every message: one by one
        packs = []
        for i, (messages, system) in enumerate(zip(transcripts, systems or [None] * len(transcripts), strict=True)):
            try:
                packs.append(
                    pack_handoff(
                        messages,
                        target_context_tokens=target_context_tokens,
                        reserve_output_tokens=reserve_output_tokens,
                        estimate_tokens=estimate_tokens,
                        system=system,
                        shape=shape,
                        cut=cut,
                        chunk_tokens=chunk_tokens,
                    )
                )
            except Exception as exc:
                add_note(exc, f"in transcript {i}")
                raise
        return packs
    encoding: EncodingName | None = sizing
    if systems is None:
        system_tokens = [0] * len(transcripts)
    else:
        system_tokens = [_system_tokens(s, encoding) for s in systems]
    return _backend.impl.pack_many(  # type: ignore[no-any-return]
        transcripts, budget, system_tokens, shape, chunk, count, encoding
    )


def _system_tokens(system: Any, encoding: EncodingName | None) -> int:
    check_system(system)
    return 0 if system is None else message_tokens({"role": "system", "content": system}, estimate_tokens=encoding)
