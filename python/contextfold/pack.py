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

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from . import _backend
from ._contract import (
    VOLATILE_TAIL_CLOSE,
    VOLATILE_TAIL_TAG,
    HandoffPack,
    PackKeywords,
    PackOptions,
    elision_marker,
    handoff_budget,
    is_volatile_content,
    pack_options,
    read_items,
    thread_count,
)
from ._edits import iterable_of
from ._js import entry, is_str, js_trim, str_value
from .errors import ArgumentError, ArgumentTypeError, MessageTypeError
from .tokens import Message

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "VOLATILE_TAIL_TAG",
    "HandoffPack",
    "PackOptions",
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
    if not issubclass(type(message), dict):
        raise MessageTypeError(f"message: expected a dict, got {type(message).__name__}", None, "")
    return str(_backend.impl.handoff_line(message))


def is_volatile_tail(message: Message) -> bool:
    """True for a ``user`` message whose content opens with :data:`VOLATILE_TAIL_TAG`."""
    return (
        issubclass(type(message), dict)
        and str_value(entry(message, "role")) == "user"
        and is_volatile_content(entry(message, "content"))
    )


def volatile_tail(sections: Iterable[str | None]) -> dict[str, str] | None:
    """The one per-request tail message for these sections, or None when all are empty.

    Sections are trimmed and joined by a blank line between the open and close tags.
    Append it after the history; :func:`pack_handoff` keeps it last and never takes it
    for the directive.
    """
    texts = []
    for i, section in enumerate(iterable_of("sections", sections, "str or None")):
        if section is not None and not is_str(section):
            raise ArgumentTypeError(f"sections[{i}] must be a str or None, got {type(section).__name__}")
        texts.append(js_trim(section or ""))
    body = "\n\n".join(s for s in texts if s)
    return {"role": "user", "content": f"{VOLATILE_TAIL_TAG}\n{body}\n{VOLATILE_TAIL_CLOSE}"} if body else None


def pack_handoff(
    messages: Sequence[Message],
    *,
    options: PackOptions | None = None,
    system: str | list[Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    **keywords: Unpack[PackKeywords],
) -> HandoffPack:
    """Pack ``messages`` into ``target_context_tokens - reserve_output_tokens`` tokens.

    Under budget the transcript comes back unchanged. Otherwise: leading system messages
    (``developer`` counts as ``system``, as OpenAI's APIs take it),
    the latest directive and ``pinned`` turns (with their tool exchanges) are kept; the
    newest whole segments fill the rest (``cut="greedy"``), or the tail starts at fixed
    cut points every ``chunk_tokens`` (default ``budget // 4``) so the packed prefix stays
    stable as the transcript grows (``cut="chunked"``); the dropped middle becomes one
    note. A trailing run of ``<run-state>`` messages after the last pin (the volatile
    tail) is packed last and goes first when the history needs the whole budget; a pinned
    one is kept as any pin. ``system`` is Anthropic's separate system prompt (or the Responses API's
    ``instructions``): counted as a system message's content, never dropped. ``tools``
    (the request's tool definitions, a list of dicts) count the same way, as a system
    message whose content is the list (⌈UTF-16 length of its compact JSON / 4⌉ + 4, or
    a custom estimator's count of that JSON + 4), and are never dropped. ``sizing`` and
    ``image_tokens`` size every message, ``system`` and ``tools`` as
    :func:`~contextfold.message_tokens` says (``"provider"``: images a flat count,
    signatures and encrypted reasoning free).

    Shapes. ``"openai"``: an assistant message with a non-empty ``tool_calls`` list and
    the ``tool`` messages right after it form one segment. ``"anthropic"``: an assistant
    message with ``tool_use`` blocks and the next message when it is a user message with
    ``tool_result`` blocks. ``"responses"`` (OpenAI Responses API input items):

    - an item whose ``type`` is absent or ``"message"`` is a message, read and sized
      like a chat message (``role`` required; ``developer`` counts as ``system``, so
      leading developer/system items are the kept system part); every other item costs
      ⌈UTF-16 length of its compact JSON / 4⌉ + 4 (a custom estimator sees that JSON);
    - a ``*_call`` item (``function_call``, ``custom_tool_call``, ``computer_call``, …)
      and its output (the first ``*_call_output`` item after it with the same
      ``call_id``) form one segment with everything between them, so parallel calls and
      their outputs stay together; a run of ``reasoning`` items belongs to the segment
      of the item right after it; an unanswered call or an orphan output is a segment of
      its own (with the reasoning before it); an item of any other type is its own
      segment, kept or dropped whole, never rejected;
    - calls and reasoning items play the assistant's role, outputs the tool's (for
      ``pinned``, and for the note's role: ``user`` when the next kept item plays the
      assistant's role or there is none, else ``assistant``);
    - the directive is the last ``user`` message item that is not a volatile tail (a
      ``<run-state>`` message, its content a str or a list whose first part's ``text``
      opens with the tag);
    - the note is a message item: ``{"type": "message", "role": ..., "content": text}``;
    - a ``call_id`` on a call or output must be a str, ``type`` a str, every item a dict.

    ``shape="auto"`` packs in the shape of the newest entry that shows one, read from the
    newest back: Responses items when it has a ``type`` and no ``role`` or is a
    ``message``, ``function_call`` or ``function_call_output`` item; Anthropic when its
    content holds a ``tool_use`` or ``tool_result`` block; OpenAI when it has a non-empty
    ``tool_calls`` list or the role ``tool``; OpenAI chat when no entry shows a shape.

    What is read (docs/packing.md): at or under budget, every message; over budget, only
    what the answer needs, walking back from the newest message: the messages sized to
    find the tail (and the segment it stops at), the system messages, the directive's and
    pinned segments, and the dropped messages the note lists (at most 40); the rest of
    the history is only walked for roles. A message is checked (TypeError/ValueError
    naming its index and field) when it is sized or listed, so a malformed message deep
    in the dropped middle raises nothing. The chunked cut sizes the whole history.

    The list is read once, when the call begins: every field of the result (``messages``,
    ``kept``, ``dropped``) comes from that reading, even if ``estimate_tokens`` (or another
    thread) changes the list during the call.
    """
    impl = _backend.impl
    # Natively, options made before of the same plain keywords are found; else (None)
    # they are made here.
    if options is None and (pack := impl.pack_handoff(messages, None, keywords, system, tools)) is not None:
        return pack
    return cast(HandoffPack, impl.pack_handoff(messages, pack_options(options, keywords), {}, system, tools))


def pack_many(
    transcripts: Sequence[Sequence[Message]],
    *,
    options: PackOptions | None = None,
    systems: Sequence[str | list[Any] | None] | None = None,
    tools: list[dict[str, Any]] | None = None,
    threads: int | None = None,
    **keywords: Unpack[PackKeywords],
) -> list[HandoffPack]:
    """:func:`pack_handoff` over many transcripts, with the same options for each.

    On the native backend ``threads`` is a maximum (never more than the CPUs, and fewer
    when the OS refuses to start more; ``None``: one a CPU): the first transcripts are
    packed in place and timed, and worker threads start only when reading a transcript
    costs clearly less than packing it, as with long string content; the calling thread
    then reads the transcripts (reading Python objects needs the GIL) and the workers
    pack them with the GIL released. When reading is most of the work it keeps packing in
    place, where the workers would idle, so no thread count is slower than one thread.
    Either way the call passes through the interpreter every quarter switch interval, so
    other Python threads get their turns and Ctrl-C stops it (releasing everything the
    batch held), and it is safe to call from many threads at once. The results equal packing one by one.
    ``systems`` gives each transcript's separate system prompt (Anthropic shape); ``tools``
    the tool definitions every transcript is sent with (counted once per transcript). An
    embedded encoding (``estimate_tokens="o200k_base"``) is counted natively, so those
    batches stay native and GIL-free too, as do batches sized with ``sizing="provider"``
    and batches with ``edits``; a custom ``estimate_tokens`` is Python code, so those
    batches are packed one by one (each still packed natively).

    The list of transcripts is read once, when the call begins, and each transcript list
    once, when packing it begins; each result comes from that reading: a thread changing
    the batch or a transcript during the call changes no field of any result.
    """
    options = pack_options(options, keywords)
    count = 0 if threads is None else thread_count(threads)  # 0: the backend picks
    # The batch is read once, here: a list another thread shortens or grows meanwhile
    # changes no result (it gave a silent prefix natively, and raised on the reference).
    transcripts = read_items("transcripts", transcripts, "transcripts")
    if systems is not None:
        systems = read_items("systems", systems, "system prompts")
        if len(systems) != len(transcripts):
            raise ArgumentError(f"systems has {len(systems)} entries for {len(transcripts)} transcripts")
    return _backend.impl.pack_many(transcripts, options, systems, tools, count)
