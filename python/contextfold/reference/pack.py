"""Handoff packing, in pure Python: the reference for ``contextfold-core``'s pack.rs.

Same segments, same core, same tail rules, same note text, and the same reading: the
transcript is read on demand (:class:`~.tokens.TranscriptOnDemand`), so greedy packing
reads only what its answer needs, walking back from the newest message, and checks an
entry only when it sizes it or lists it in the note (docs/packing.md).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from .._contract import (
    MESSAGE_OVERHEAD,
    U64_MAX,
    Counting,
    HandoffPack,
    PackOptions,
    Sizers,
    add_note,
    calls_out,
    check_pinned,
    check_system,
    check_tools,
    elision_marker,
    is_volatile_content,
    named_prompt,
    pack_options,
    prompt_message,
)
from .._edits import ClearToolUses
from .._js import JS_SPACES, entry, is_list, list_value, listed, plain, str_value, utf16_len
from ..errors import EstimatorError, MessageError
from .count_cache import resolved
from .edits import apply_edits, frozen
from .items import CALL, OUTPUT, REASONING, check_item, marks_responses, peek_item
from .tokens import Transcript, TranscriptOnDemand, checked_role, message_tokens

NOTE_HEADER = "Earlier conversation, folded to fit the context window (oldest first):"
SUMMARY_HEADER = "Summary of the earlier conversation, folded to fit the context window:"
NOTE_MAX_LINES = 40
LINE_SNIPPET_UNITS = 80
_HEADER_UNITS = len(NOTE_HEADER)


def _blocks(message: dict[str, Any]) -> list[Any] | None:
    return list_value(entry(message, "content"))


def _block_is(block: Any, kind: str) -> bool:
    return issubclass(type(block), dict) and str_value(entry(block, "type")) == kind


def _has_block(message: dict[str, Any], kind: str) -> bool:
    blocks = _blocks(message)
    return blocks is not None and any(_block_is(b, kind) for b in blocks)


def _only_tool_results(message: dict[str, Any]) -> bool:
    blocks = _blocks(message)
    return bool(blocks) and all(_block_is(b, "tool_result") for b in blocks)  # type: ignore[union-attr]


def _has_tool_calls(message: dict[str, Any]) -> bool:
    calls = entry(message, "tool_calls")
    return is_list(calls) and list.__len__(calls) > 0


def _is_volatile(role: str, message: dict[str, Any]) -> bool:
    return role == "user" and is_volatile_content(entry(message, "content"))


def _newest_shape(messages: list[Any]) -> str | None:
    """The shape ``shape="auto"`` packs in (``newest_shape`` in segments.rs): that of the
    newest entry that shows one, read from the newest back (``"responses"`` when it marks
    Responses items, ``"anthropic"`` when a content block is a ``tool_use`` or
    ``tool_result``, ``"openai"`` when its ``tool_calls`` is a non-empty list or its role
    is ``tool``); None when no entry shows one."""
    for m in reversed(messages):
        if not issubclass(type(m), dict):
            continue
        if marks_responses(m):
            return "responses"
        blocks = _blocks(m)
        # A provider's compaction block is Anthropic's too.
        if blocks and any(
            _block_is(b, "tool_use") or _block_is(b, "tool_result") or _block_is(b, "compaction") for b in blocks
        ):
            return "anthropic"
        if _has_tool_calls(m) or str_value(entry(m, "role")) == "tool":
            return "openai"
    return None


def _lossy(text: str) -> str:
    """Surrogate pairs joined, unpaired surrogates as U+FFFD (as the core reads UTF-16)."""
    if text.isascii():
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class _Snippet:
    """Texts pushed one by one, whitespace runs as one space, cut with "…" at
    ``max_units`` UTF-16 units (the core's Snippet)."""

    __slots__ = ("max_units", "out", "pending", "used")

    def __init__(self, max_units: int) -> None:
        self.max_units = max_units
        self.out: list[str] = []
        self.used = 0
        self.pending = False  # a space is due before the next character

    def push(self, part: str) -> bool:
        """Adds ``part``; False once the snippet is cut (no later part shows)."""
        out, used, max_units = self.out, self.used, self.max_units
        started = bool(out)  # a character is shown: spaces count only after one
        pending = self.pending or started
        for c in _lossy(part):
            if c in JS_SPACES:
                pending = pending or started
                continue
            need = (1 if pending else 0) + (2 if ord(c) > 0xFFFF else 1)
            if used + need > max_units:
                out.append("…")
                return False
            if pending:
                out.append(" ")
                pending = False
            out.append(c)
            started = True
            used += need
        self.used, self.pending = used, pending
        return True

    def text(self) -> str:
        return "".join(self.out)


def handoff_line(message: dict[str, Any]) -> str:
    if marks_responses(message):
        check_item(message)
    else:
        checked_role(message)
    return _line(message)


def _line(message: dict[str, Any]) -> str:
    label = str_value(entry(message, "role"))
    if label is None:
        label = str_value(entry(message, "type"))
    line = "" if label is None else _lossy(label)
    names: list[str] = []
    calls = entry(message, "tool_calls")
    if is_list(calls):
        for call in listed(calls):
            function: Any = entry(call, "function") if issubclass(type(call), dict) else None
            name = str_value(entry(function, "name")) if issubclass(type(function), dict) else None
            if name is not None:
                names.append(_lossy(name))
    blocks = _blocks(message)
    for block in blocks or ():
        if _block_is(block, "tool_use") and (name := str_value(entry(block, "name"))) is not None:
            names.append(_lossy(name))
    if (name := str_value(entry(message, "name"))) is not None:
        names.append(_lossy(name))
    content = plain(entry(message, "content"))
    if type(content) is not str and type(content) is not list:  # an item without content shows its output
        content = plain(entry(message, "output"))
    shown = _Snippet(LINE_SNIPPET_UNITS)
    _show(shown, content)
    summary = shown.text()
    if names:
        line += f" [{', '.join(names)}]"
    if summary:
        line += f": {summary}"
    return line


def _show(shown: _Snippet, content: Any) -> None:
    """Pushes the texts of ``content`` a line shows, each block's looked up only while
    the line has room (as the core reads them: a block key's ``__eq__`` may run). A
    loop, not a generator, which would turn a StopIteration raised there into a
    RuntimeError."""
    if type(content) is str:
        shown.push(content)
    elif type(content) is list:
        for block in content:
            if issubclass(type(block), dict):
                for key in ("text", "content"):
                    if (text := str_value(entry(block, key))) is not None and not shown.push(text):
                        return


def note_text(lines: list[str], unlisted: int) -> str:
    head = NOTE_HEADER + (f"\n{elision_marker(unlisted)}" if unlisted > 0 else "")
    return head + "".join(f"\n- {line}" for line in lines)


def summary_note(summary: str) -> str:
    return f"{SUMMARY_HEADER}\n{summary}"


class _Segments:
    """Where segments lie between ``prefix`` and ``end`` (``Segmenter`` in segments.rs):
    listed up front (Responses items, and the chunked cut), or found around a message on
    demand (chat shapes: a segment's bounds depend only on its neighbours)."""

    def __init__(self, t: TranscriptOnDemand, prefix: int, end: int, dialect: str, listed: bool) -> None:
        self.t, self.prefix, self.end, self.dialect = t, prefix, end, dialect
        self.listed: list[Segment] | None = None
        if listed or dialect == "responses":
            self.listed = (
                _item_segments(t, prefix, end) if dialect == "responses" else _segments(t, prefix, end, dialect)
            )
            self.ends = [seg.end for seg in self.listed]
        self.orphans_from: int | None = None

    def _caller_before(self, i: int) -> int | None:
        """OpenAI: the assistant message with tool calls whose run of tool messages holds
        tool message ``i``."""
        t, p = self.t, i
        while p > self.prefix and t.role(p - 1) == "tool":
            p -= 1
        p -= 1
        if p >= self.prefix and t.role(p) == "assistant" and _has_tool_calls(t.messages[p]):
            return p
        return None

    def _answers_call(self, i: int) -> bool:
        """Anthropic: message ``i`` answers the call right before it."""
        t = self.t
        return (
            i > 0
            and t.role(i) == "user"
            and t.role(i - 1) == "assistant"
            and _has_block(t.messages[i], "tool_result")
            and _has_block(t.messages[i - 1], "tool_use")
        )

    def containing(self, i: int) -> tuple[int, int]:
        if self.listed is not None:
            k = bisect_right(self.ends, i)
            return (self.listed[k].start, self.listed[k].end) if k < len(self.listed) else (i, i + 1)
        t = self.t
        if self.dialect == "anthropic":
            if i > self.prefix and self._answers_call(i):
                return i - 1, i + 1
            if i + 1 < self.end and self._answers_call(i + 1):
                return i, i + 2
            return i, i + 1
        role = t.role(i)
        if role == "tool":
            caller = self._caller_before(i)
        else:
            caller = i if role == "assistant" and _has_tool_calls(t.messages[i]) else None
        if caller is None:
            return i, i + 1
        stop = caller + 1
        while stop < self.end and t.role(stop) == "tool":
            stop += 1
        return caller, stop

    def start_before(self, stop: int) -> int:
        """The start of the segment ending at ``stop``; called with ``stop`` falling."""
        last = stop - 1
        if self.listed is not None:
            k = bisect_left(self.ends, stop)
            return self.listed[k].start if k < len(self.listed) else last
        if self.dialect == "anthropic":
            return last - 1 if last > self.prefix and self._answers_call(last) else last
        t = self.t
        if t.role(last) != "tool" or (self.orphans_from is not None and last >= self.orphans_from):
            return last
        caller = self._caller_before(last)
        if caller is not None:
            return caller
        start = last
        while start > self.prefix and t.role(start - 1) == "tool":
            start -= 1
        self.orphans_from = start
        return last


class Segment(NamedTuple):
    """Messages ``start`` to ``end`` (exclusive), kept or dropped whole."""

    start: int
    end: int


class History(NamedTuple):
    """A history packed: what :func:`_Packer.pack_history` decides (``Packed`` in pack.rs)."""

    kept: list[int]
    note: tuple[str, int] | None
    """The note's text and its place in the output."""
    fits: bool
    tokens: int


def _segments(t: TranscriptOnDemand, start: int, stop: int, dialect: str) -> list[Segment]:
    role, messages = t.role, t.messages
    out: list[Segment] = []
    i = start
    while i < stop:
        end = i + 1
        if role(i) == "assistant":
            m = messages[i]
            if dialect == "openai" and _has_tool_calls(m):
                while end < stop and role(end) == "tool":
                    end += 1
            elif dialect == "anthropic" and _has_block(m, "tool_use"):
                if end < stop and role(end) == "user" and _has_block(messages[end], "tool_result"):
                    end += 1
        out.append(Segment(i, end))
        i = end
    return out


def _item_segments(t: TranscriptOnDemand, start: int, stop: int) -> list[Segment]:
    """Responses items: a run of reasoning items goes with the item after it; a call also
    takes its output (the first output after it with the same ``call_id``) and all that
    lies between."""
    messages = t.messages
    kinds = [""] * start + [peek_item(messages[i])[1] for i in range(start, stop)]
    outputs: dict[str, list[int]] = {}
    for i in range(start, stop):
        if kinds[i] == OUTPUT and (call_id := str_value(entry(messages[i], "call_id"))) is not None:
            outputs.setdefault(call_id, []).append(i)
    out: list[Segment] = []
    i = start
    while i < stop:
        end = i
        while end < stop and kinds[end] == REASONING:
            end += 1
        end = min(end + 1, stop)
        k = i
        while k < end:
            if kinds[k] == CALL:
                call_id = str_value(entry(messages[k], "call_id"))
                answers = None if call_id is None else outputs.get(call_id)
                if answers:
                    at = bisect_right(answers, k)
                    if at < len(answers):
                        end = max(end, answers[at] + 1)
            k += 1
        out.append(Segment(i, end))
        i = end
    return out


def _newest_dropped(core: list[tuple[int, int]], prefix: int, stop: int) -> list[int]:
    """The messages a note may list when the tail starts at ``stop``: the newest
    ``NOTE_MAX_LINES`` before it outside the ``core`` segments (sorted), newest first."""
    out: list[int] = []
    starts = [c[0] for c in core]
    i = stop
    while i > prefix and len(out) < NOTE_MAX_LINES:
        j = i - 1
        k = bisect_right(starts, j) - 1
        if k >= 0 and j < core[k][1]:
            i = core[k][0]
        else:
            out.append(j)
            i = j
    return out


class _Packer:
    """One packing call: the transcript, its options and the note-sizing rule."""

    def __init__(self, t: TranscriptOnDemand, sizers: Sizers | None, pinned: list[int], summary: str | None) -> None:
        self.t = t
        self.pinned = pinned
        self.summary = summary
        self.by_length = sizers is None
        self._text_tokens = (lambda text: -(-utf16_len(text) // 4)) if sizers is None else sizers[1]

    def note_tokens(self, text: str) -> int:
        return self._text_tokens(text) + MESSAGE_OVERHEAD

    def listing_cost(self, newest: list[str], total: int, lines_units: int) -> int:
        """Cost of the note listing ``newest``: from its length alone with the default
        estimate (no text built per candidate), else from the text."""
        if self.by_length:
            unlisted = total - len(newest)
            units = _HEADER_UNITS + (1 + utf16_len(elision_marker(unlisted)) if unlisted else 0) + lines_units
            return -(-units // 4) + MESSAGE_OVERHEAD
        return self.note_tokens(note_text(newest[::-1], total - len(newest)))

    def listing_note(self, total: int, newest_dropped: list[int], room: int) -> tuple[str, int] | None:
        newest: list[str] = []
        best_cost = self.listing_cost(newest, total, 0)
        if best_cost > room:
            return None
        lines_units = 0
        for i in newest_dropped:
            self.t.check(i)
            line = _line(self.t.messages[i])
            units = lines_units + 3 + utf16_len(line)
            newest.append(line)
            cost = self.listing_cost(newest, total, units)
            if cost > room:
                newest.pop()
                break
            best_cost = cost
            lines_units = units
        return note_text(newest[::-1], total - len(newest)), best_cost

    def note_for(self, dropped: int, newest: list[int], room: int | None, chunk: int = 0) -> tuple[str, int] | None:
        """The summary, else a listing of the newest dropped messages. Greedy passes the
        ``room`` left (the summary only when it fits); chunked passes ``room=None`` and its
        ``chunk``: the summary always, a listing within a fixed allowance."""
        if not dropped:
            return None
        if self.summary is not None:
            text = summary_note(self.summary)
            cost = self.note_tokens(text)
            if room is None or cost <= room:
                return text, cost
        if room is None:
            room = max(chunk // 4, self.note_tokens(note_text([], dropped)))
        return self.listing_note(dropped, newest, room)

    def greedy_tail(
        self, segments: _Segments, core: list[tuple[int, int]], prefix: int, end: int, room: int
    ) -> tuple[int, int, tuple[str, int] | None]:
        """Walk back from ``end`` over the newest segments while they fit."""
        core_starts = {c[0] for c in core}
        total_dropped = end - prefix - sum(c[1] - c[0] for c in core)
        with_note = self.note_tokens(note_text([], total_dropped)) <= room
        start = end
        tail = 0
        dropped = total_dropped
        while start > prefix:
            first = segments.start_before(start)
            if first in core_starts:
                start = first
                continue
            cost = self.t.sum(first, start)
            left = dropped - (start - first)
            reserve = self.note_tokens(note_text([], left)) if with_note and left > 0 else 0
            if tail + cost + reserve > room:
                break
            tail += cost
            dropped = left
            start = first
        note = None
        if with_note:
            note = self.note_for(dropped, _newest_dropped(core, prefix, start), room - tail)
        return start, tail, note

    def chunked_tail(
        self, segs: list[Segment], core: list[tuple[int, int]], prefix: int, end: int, room: int, chunk: int
    ) -> tuple[int, int, tuple[str, int] | None]:
        chunk = max(chunk, 1)
        t = self.t
        costs = [t.sum(seg.start, seg.end) for seg in segs]
        candidates: list[int] = []
        running = 0
        for k, cost in enumerate(costs):
            before = running
            running += cost
            if running // chunk > before // chunk:
                candidates.append(k + 1)
        candidates.append(len(segs))
        candidates = [c for i, c in enumerate(candidates) if i == 0 or c != candidates[i - 1]]
        # What the tail from segment k on adds: the core's segments are counted already.
        core_starts = {s for s, _ in core}
        suffix = [0] * (len(segs) + 1)
        for k in range(len(segs) - 1, -1, -1):
            suffix[k] = suffix[k + 1] + (0 if segs[k].start in core_starts else costs[k])

        def start_of(c: int) -> int:
            return segs[c].start if c < len(segs) else end

        for c in candidates:
            tail = suffix[c]
            if tail > room:
                continue
            stop = start_of(c)
            dropped = stop - prefix - sum(e - s for s, e in core if e <= stop)
            note = self.note_for(dropped, _newest_dropped(core, prefix, stop), None, chunk)
            if note is None:
                return stop, tail, None
            if tail + note[1] <= room:
                return stop, tail, note
        c = next((c for c in candidates if suffix[c] <= room), len(segs))
        return start_of(c), suffix[c], None

    def pack_history(self, end: int, budget: int, dialect: str, chunk: int | None, system_prefix: bool) -> History:
        """With ``system_prefix``, the leading system messages are kept whatever happens."""
        t = self.t
        role = t.role
        tokens = t.cost_within(0, end, budget)
        if tokens is not None:
            return History(list(range(end)), None, True, tokens)
        prefix = next((i for i in range(end) if role(i) != "system"), end) if system_prefix else 0
        segments = _Segments(t, prefix, end, dialect, chunk is not None)
        directive = next(
            (
                i
                for i in range(end - 1, prefix - 1, -1)
                if role(i) == "user"
                and not _is_volatile("user", t.messages[i])
                and not (dialect == "anthropic" and _only_tool_results(t.messages[i]))
            ),
            None,
        )
        pinned = [p for p in self.pinned if prefix <= p < end and role(p) in ("user", "assistant")]
        core = sorted({segments.containing(i) for i in ([] if directive is None else [directive]) + pinned})
        core_tokens = t.sum(0, prefix) + sum([t.sum(s, e) for s, e in core])  # a list: see TranscriptOnDemand.sum
        if core_tokens > budget:
            kept = list(range(prefix)) + [i for s, e in core for i in range(s, e)]
            return History(kept, None, False, core_tokens)
        room = budget - core_tokens
        if chunk is None:
            tail_start, tail_tokens, note = self.greedy_tail(segments, core, prefix, end, room)
        else:
            tail_start, tail_tokens, note = self.chunked_tail(segments.listed or [], core, prefix, end, room, chunk)
        kept = list(range(prefix)) + [i for s, e in core if e <= tail_start for i in range(s, e)]
        kept += range(tail_start, end)
        tokens = core_tokens + tail_tokens
        packed_note = None
        if note is not None:
            tokens += note[1]
            packed_note = (note[0], prefix)
        return History(kept, packed_note, True, tokens)


def pack_handoff(
    messages: Any,
    options: PackOptions | None,
    keywords: Mapping[str, Any],
    system: str | list[Any] | None = None,
    tools: list[Any] | None = None,
) -> HandoffPack | None:
    """Packs ``messages`` under the call's ``options``, as ``pack_options`` made them, or
    (None) as it makes them of ``keywords``. The native backend returns None in that case
    when it finds no options ``pack_options`` made before of these keywords (it looks up
    keywords of exact ints, strs and Nones only), for the caller to make them and call
    again (``call_options`` in rust/python/src/args.rs); this one never does."""
    return handoff(messages, pack_options(None, keywords) if options is None else options, system, tools)


def handoff(
    messages: Any, options: PackOptions, system: str | list[Any] | None = None, tools: list[Any] | None = None
) -> HandoffPack:
    """:func:`pack_handoff` with its options made."""
    check_system(system)
    check_tools(tools)
    system_tokens = _prompt_tokens(system, tools, options.sizers, options.images)
    return _pack(messages, options, system_tokens)


def _pack(messages: Any, options: PackOptions, system_tokens: int) -> HandoffPack:
    """Packs ``messages`` under ``options``, a separate system prompt and tools costing
    ``system_tokens``: edited first (``pack_edited`` in pack.rs), then folded."""
    if not options.edits:
        return _fold(messages, options, system_tokens)
    t = TranscriptOnDemand(messages, options.sizers, options.shape, options.images)
    n = len(t)
    check_pinned(options.pinned, n)
    if (whole := _fits_unedited(t, options, system_tokens)) is not None:
        return whole
    fitted = list(t.sizes)  # what the fit sized, in the format the edits read (as natively)
    given = t.messages  # what the output holds; t.messages what the edits read
    # Another thread may run at any point of a Python call (and a custom estimator runs
    # mid-call): the edits plan on, and the output is built from, copies of the lists.
    t.messages = frozen(given)
    # The edits read the whole transcript, each in its own order: every entry is checked
    # first, in order, so the first malformed one is the one named.
    Transcript(t.messages, None, options.shape)
    t.responses = options.shape == "responses" or (options.shape == "auto" and _newest_shape(t.messages) == "responses")
    # What precedes a provider compaction goes first when packing, unread by the provider:
    # the edits neither count nor edit it (else a trigger it passes could clear what
    # follows, and the transcript then fit with it). Cleared results move in steps of
    # chunk_tokens (a quarter of the budget by default), whatever the cut.
    compaction = _compaction_segment(t, options)
    edited, removed, applied = apply_edits(
        t.messages,
        options.edits,
        cost=t.size_of,
        base=system_tokens,
        budget=options.budget,
        step=options.step,
        responses=t.responses,
        hidden=range(0) if compaction is None else range(compaction[0], compaction[1]),
        known=fitted,
    )
    if not applied:
        return _as_given(_fold(t.messages, replace(options, edits=()), system_tokens), t.messages, given)
    gone = set(removed)
    source = [i for i in range(n) if i not in gone]
    # A pin on a removed reasoning item pins the next entry left: the item after it, in
    # whose segment it was.
    pinned = [k for k in (bisect_left(source, p) for p in options.pinned) if k < len(source)]
    try:
        pack = _fold(edited, replace(options, pinned=pinned, edits=()), system_tokens)
    except (MessageError, EstimatorError) as exc:
        raise _in_input(exc, source) from None
    kept = [source[k] for k in pack.kept]
    pack = _as_given(pack, t.messages, given)
    return pack._replace(kept=kept, dropped=n - len(kept), applied_edits=tuple(applied))


def _as_given(pack: HandoffPack, read: list[Any], given: list[Any]) -> HandoffPack:
    """``pack`` with each unedited message it keeps as the caller's own, not the copy
    ``frozen`` read it from."""
    own = {id(copy): m for copy, m in zip(read, given, strict=True) if copy is not m}
    return pack._replace(messages=[own.get(id(m), m) for m in pack.messages])


def _in_input(exc: MessageError | EstimatorError, source: list[int]) -> MessageError | EstimatorError:
    """``exc`` naming the input message its edited one stands for."""
    index = exc.index
    if index is None or index >= len(source) or source[index] == index:
        return exc
    named = f"message {index}"
    text = str(exc)
    text = f"message {source[index]}{text[len(named) :]}" if text.startswith(named) else text
    if isinstance(exc, MessageError):
        return type(exc)(text, source[index], exc.field)
    return type(exc)(text, source[index])


def _fits_unedited(t: TranscriptOnDemand, options: PackOptions, system_tokens: int) -> HandoffPack | None:
    """``t`` whole when its edits run only over the budget (each a ``ClearToolUses`` whose
    trigger is at least the budget) and it fits: found as packing finds the fit, reading
    no entry packing would not (``pack_edited``'s shortcut in pack.rs). None otherwise,
    and always with a custom estimator, which sees an entry only once it is checked."""
    if calls_out(options.sizers) or not all(
        isinstance(edit, ClearToolUses) and (edit.trigger is None or edit.trigger >= options.budget)
        for edit in options.edits
    ):
        return None
    try:
        tokens, _ = _fits_whole(t, options, system_tokens)
    except MessageError:  # raised where the edits check every entry, in order
        return None
    if tokens is None:
        return None
    return HandoffPack(list(t.messages), 0, True, tokens + system_tokens, options.budget, None, list(range(len(t))), ())


def _fold(messages: Any, options: PackOptions, system_tokens: int) -> HandoffPack:
    """Folds ``messages`` under ``options`` (its edits aside)."""
    t = TranscriptOnDemand(messages, options.sizers, options.shape, options.images)
    n = len(t)
    check_pinned(options.pinned, n)
    try:
        packed = _decide(t, options, system_tokens, list(options.pinned), system_prefix=True)
    except MessageError:
        # A malformed message the fold sized may precede a compaction, which leaves it
        # unread.
        compacted = _after_compaction(t, options, system_tokens)
        if compacted is None:
            raise
        packed = compacted
    else:
        # Anything but the whole transcript fitting (a note means something was dropped):
        # a must-keep part over budget may hold pins before the compaction, which go with
        # what precedes it.
        if not (packed.fits and len(packed.kept) == n):
            packed = _after_compaction(t, options, system_tokens) or packed
    # The note's role is decided on the final output, the volatile tail put back.
    kept = packed.kept
    text, at = packed.note if packed.note is not None else (None, 0)
    following = t.role(kept[at]) if text is not None and at < len(kept) else None
    role = "user" if following in (None, "assistant") else "assistant"
    out = [t.messages[i] for i in kept]
    if text is not None:
        out.insert(
            at,
            {"type": "message", "role": role, "content": text} if t.responses else {"role": role, "content": text},
        )
    return HandoffPack(out, n - len(kept), packed.fits, packed.tokens + system_tokens, options.budget, text, kept, ())


def _decide(
    t: TranscriptOnDemand, options: PackOptions, system_tokens: int, pinned: list[int], system_prefix: bool
) -> History:
    """What to keep of ``t`` (``pack_transcript`` in pack.rs); with ``system_prefix``, its
    leading system messages are kept whatever happens."""
    n = len(t)
    tokens, shown = _fits_whole(t, options, system_tokens)
    if tokens is not None:
        return History(list(range(n)), None, True, tokens)
    summary = None if options.summary is None else _lossy(options.summary)
    packer = _Packer(t, resolved(options.sizers, options.images), pinned, summary)
    dialect = options.shape
    available = options.budget - system_tokens
    if t.responses:
        dialect = "responses"
    elif dialect == "auto":
        dialect = "anthropic" if shown == "anthropic" else "openai"
    # A pinned message is kept as any pin: the volatile tail is what follows the last one.
    last_pin = max(pinned, default=-1) + 1
    volatile = n
    while volatile > last_pin and _is_volatile(t.role(volatile - 1), t.messages[volatile - 1]):
        volatile -= 1
    if volatile < n:
        tail_tokens = t.sum(volatile, n)
        with_tail = packer.pack_history(volatile, available - tail_tokens, dialect, options.chunk, system_prefix)
        if with_tail.fits:
            with_tail.kept.extend(range(volatile, n))
            return with_tail._replace(tokens=with_tail.tokens + tail_tokens)
    return packer.pack_history(volatile, available, dialect, options.chunk, system_prefix)


def _fits_whole(t: TranscriptOnDemand, options: PackOptions, system_tokens: int) -> tuple[int | None, str | None]:
    """What ``t`` costs whole when it fits (None when not), its format decided, and the
    shape its newest entry shows under ``shape="auto"`` (``fits_whole`` in pack.rs)."""
    # shape="auto" reads back to the newest entry that shows a shape only.
    shown = _newest_shape(t.messages) if options.shape == "auto" else None
    if t.responses is None:
        t.responses = shown == "responses"
    return t.cost_within(0, len(t), options.budget - system_tokens), shown


def _after_compaction(t: TranscriptOnDemand, options: PackOptions, system_tokens: int) -> History | None:
    """Provider compaction (``pack_after_compaction`` in pack.rs): over budget, the system
    messages, the newest compaction (a Responses item, or an Anthropic block whichever way
    the calls pair) kept with its own segment whatever happens, and what follows it folded
    into the rest of the budget; what precedes it goes first, unlisted."""
    n = len(t)
    compaction = _compaction_segment(t, options)
    if compaction is None:
        return None
    # The compaction's own segment is kept whatever happens: counted like a system prompt.
    prefix, at, end = compaction
    fixed = t.sum(0, prefix) + t.sum(at, end)
    rest = TranscriptOnDemand(
        t.messages[end:], options.sizers, "responses" if t.responses else "openai", options.images
    )
    pinned = [p - end for p in options.pinned if p >= end]
    try:
        # What follows the compaction has no leading system messages of its own: one
        # right after it is folded like any other message.
        packed = _decide(rest, options, min(U64_MAX, system_tokens + fixed), pinned, system_prefix=False)
    except (MessageError, EstimatorError) as exc:
        raise _in_input(exc, list(range(end, n))) from None
    kept = [*range(prefix), *range(at, end), *(k + end for k in packed.kept)]
    note = None if packed.note is None else (packed.note[0], packed.note[1] + prefix + end - at)
    return History(kept, note, packed.fits, packed.tokens + fixed)


def _compaction_segment(t: TranscriptOnDemand, options: PackOptions) -> tuple[int, int, int] | None:
    """The newest provider compaction that follows the leading system messages
    (``newest_compaction`` in pack.rs): how many those are, and the start and end of the
    compaction's own segment (a message that goes on to call a tool, with the answers; an
    item between a call and its output, with both). None without one."""
    n = len(t)
    found = _newest_compaction(t.messages, bool(t.responses))
    if found is None:
        return None
    prefix = next((i for i in range(n) if t.role(i) != "system"), n)
    if found < prefix:
        return None
    if t.responses:
        shape: str | None = "responses"
    else:
        shape = options.shape if options.shape != "auto" else _newest_shape(t.messages)
    at, end = _Segments(t, prefix, n, shape or "openai", listed=False).containing(found)
    return prefix, at, end


def _newest_compaction(messages: list[Any], responses: bool) -> int | None:
    """The index of the newest entry holding a compaction (:func:`_is_compaction`)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        # Only a list content (or a Responses item) can hold one: most cost one lookup.
        if issubclass(type(m), dict) and (responses or is_list(entry(m, "content"))) and _is_compaction(m, responses):
            return i
    return None


def _is_compaction(entry_: Any, responses: bool) -> bool:
    """A message with an Anthropic ``compaction`` block, or (``responses``) a Responses
    ``compaction`` item."""
    if not issubclass(type(entry_), dict):
        return False
    if responses and str_value(entry(entry_, "type")) == "compaction":
        return True
    blocks = _blocks(entry_)
    return blocks is not None and any(_block_is(b, "compaction") for b in blocks)


def _prompt_tokens(system: Any, tools: Any, sizing: Counting, image_tokens: int | None = None) -> int:
    """What a separate system prompt and the tool definitions cost: each what a system
    message with that content costs (past a u64 the sum saturates, as the core's does:
    nothing that large fits). A value in either with no JSON form, or nested too deep,
    is named by the argument (:func:`named_prompt`)."""
    total = 0
    for name, part in (("system", system), ("tools", tools)):
        if part is None:
            continue
        with named_prompt(name, sizing):
            total += message_tokens(prompt_message(part), sizing, image_tokens)
    return min(U64_MAX, total)


def pack_many(
    transcripts: list[Any], options: PackOptions, systems: list[Any] | None, tools: list[Any] | None, threads: int
) -> list[HandoffPack]:
    """One by one: pure Python has no GIL to release (``threads`` is accepted and unused).
    A transcript's error carries a note naming it."""
    # The tools cost the same in every transcript: sized once; then each system prompt.
    check_tools(tools)
    tools_tokens = _prompt_tokens(None, tools, options.sizers, options.images)
    prompts = []
    for i, system in enumerate(systems or [None] * len(transcripts)):
        try:
            check_system(system)
            prompts.append(min(U64_MAX, tools_tokens + _prompt_tokens(system, None, options.sizers, options.images)))
        except Exception as exc:
            add_note(exc, f"in transcript {i}")
            raise
    out = []
    for i, (messages, system_tokens) in enumerate(zip(transcripts, prompts, strict=True)):
        try:
            out.append(_pack(messages, options, system_tokens))
        except Exception as exc:
            add_note(exc, f"in transcript {i}")
            raise
    return out
