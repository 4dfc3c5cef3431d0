"""Handoff packing, in pure Python: the reference for ``contextfold-core``'s pack.rs.

Same segments, same core, same tail rules, same note text, same early stop: greedy
packing sizes only what it keeps (and the first segment that does not fit).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from typing import Any

from .._contract import (
    MESSAGE_OVERHEAD,
    U64_MAX,
    Estimator,
    HandoffPack,
    Sizers,
    Sizing,
    add_note,
    elision_marker,
    encoding_name,
    is_volatile_content,
    pack_arguments,
    prompt_message,
    resolved,
)
from .._js import JS_SPACES, entry, plain, str_value, utf16_len
from ..errors import ArgumentError
from .items import CALL, OUTPUT, REASONING, check_item, marks_responses
from .tokens import Transcript, checked_role, message_tokens

NOTE_HEADER = "Earlier conversation, folded to fit the context window (oldest first):"
SUMMARY_HEADER = "Summary of the earlier conversation, folded to fit the context window:"
NOTE_MAX_LINES = 40
LINE_SNIPPET_UNITS = 80
_HEADER_UNITS = len(NOTE_HEADER)


def _blocks(message: dict[str, Any]) -> list[Any] | None:
    content = entry(message, "content")
    if type(content) is list:
        return content
    return list.copy(content) if isinstance(content, list) else None


def _block_is(block: Any, kind: str) -> bool:
    return isinstance(block, dict) and str_value(entry(block, "type")) == kind


def _has_block(message: dict[str, Any], kind: str) -> bool:
    blocks = _blocks(message)
    return blocks is not None and any(_block_is(b, kind) for b in blocks)


def _only_tool_results(message: dict[str, Any]) -> bool:
    blocks = _blocks(message)
    return bool(blocks) and all(_block_is(b, "tool_result") for b in blocks)  # type: ignore[union-attr]


def _has_tool_calls(message: dict[str, Any]) -> bool:
    calls = entry(message, "tool_calls")
    return isinstance(calls, list) and list.__len__(calls) > 0


def _is_volatile(role: str, message: dict[str, Any]) -> bool:
    return role == "user" and is_volatile_content(entry(message, "content"))


def detect_dialect(messages: list[Any]) -> str:
    for m in messages:
        blocks = _blocks(m)
        if blocks and any(_block_is(b, "tool_use") or _block_is(b, "tool_result") for b in blocks):
            return "anthropic"
    return "openai"


def _lossy(text: str) -> str:
    """Surrogate pairs joined, unpaired surrogates as U+FFFD (as the core reads UTF-16)."""
    if text.isascii():
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def snippet(parts: list[str], max_units: int) -> str:
    out: list[str] = []
    used = 0
    pending = False
    started = False
    for part in parts:
        pending = pending or started
        for c in _lossy(part):
            if c in JS_SPACES:
                pending = pending or started
                continue
            width = 2 if ord(c) > 0xFFFF else 1
            need = (1 if pending else 0) + width
            if used + need > max_units:
                out.append("…")
                return "".join(out)
            if pending:
                out.append(" ")
                pending = False
            out.append(c)
            started = True
            used += need
    return "".join(out)


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
    if isinstance(calls, list):
        for call in list.copy(calls):
            function = entry(call, "function") if isinstance(call, dict) else None
            name = str_value(entry(function, "name")) if isinstance(function, dict) else None
            if name is not None:
                names.append(_lossy(name))
    blocks = _blocks(message)
    for block in blocks or ():
        if _block_is(block, "tool_use") and (name := str_value(entry(block, "name"))) is not None:
            names.append(_lossy(name))
    if (name := str_value(entry(message, "name"))) is not None:
        names.append(_lossy(name))
    content = plain(entry(message, "content"))
    if not isinstance(content, (str, list)):  # an item without content shows its output
        content = plain(entry(message, "output"))
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                for key in ("text", "content"):
                    if (text := str_value(entry(block, key))) is not None:
                        parts.append(text)
    summary = snippet(parts, LINE_SNIPPET_UNITS)
    if names:
        line += f" [{', '.join(names)}]"
    if summary:
        line += f": {summary}"
    return line


def note_text(lines: list[str], unlisted: int) -> str:
    head = NOTE_HEADER + (f"\n{elision_marker(unlisted)}" if unlisted > 0 else "")
    return head + "".join(f"\n- {line}" for line in lines)


def summary_note(summary: str) -> str:
    return f"{SUMMARY_HEADER}\n{summary}"


class _Packer:
    """One packing call: the transcript, its options and the note-sizing rule."""

    def __init__(self, t: Transcript, sizers: Sizers | None, pinned: list[int], summary: str | None) -> None:
        self.t = t
        self.pinned = pinned
        self.summary = summary
        self.by_length = sizers is None
        self._text_tokens = (lambda text: -(-utf16_len(text) // 4)) if sizers is None else sizers[1]

    def note_tokens(self, text: str) -> int:
        return self._text_tokens(text) + MESSAGE_OVERHEAD

    def fits_within(self, start: int, stop: int, budget: int) -> bool:
        total = 0
        tokens = self.t.tokens
        for i in range(stop - 1, start - 1, -1):
            total += tokens(i)
            if total > budget:
                return False
        return total <= budget

    def seg_tokens(self, seg: list[Any]) -> int:
        return self.t.sum(seg[0], seg[1])

    def item_segments(self, start: int, stop: int) -> list[list[Any]]:
        """Responses items: a run of reasoning items goes with the item after it; a call
        also takes its output (the first output after it with the same ``call_id``) and
        all that lies between."""
        kinds, messages = self.t.kinds or [], self.t.messages
        outputs: dict[str, list[int]] = {}
        for i in range(start, stop):
            if kinds[i] == OUTPUT and (call_id := str_value(entry(messages[i], "call_id"))) is not None:
                outputs.setdefault(call_id, []).append(i)
        out: list[list[Any]] = []
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
            out.append([i, end, False])
            i = end
        return out

    def segments(self, start: int, stop: int, dialect: str) -> list[list[Any]]:
        if dialect == "responses":
            return self.item_segments(start, stop)
        roles, messages = self.t.roles, self.t.messages
        out: list[list[Any]] = []
        i = start
        while i < stop:
            end = i + 1
            if roles[i] == "assistant":
                m = messages[i]
                if dialect == "openai" and _has_tool_calls(m):
                    while end < stop and roles[end] == "tool":
                        end += 1
                elif dialect == "anthropic" and _has_block(m, "tool_use"):
                    if end < stop and roles[end] == "user" and _has_block(messages[end], "tool_result"):
                        end += 1
            out.append([i, end, False])
            i = end
        return out

    def listing_cost(self, newest: list[str], total: int, lines_units: int) -> int:
        """Cost of the note listing ``newest``: from its length alone with the default
        estimate (no text built per candidate), else from the text."""
        if self.by_length:
            unlisted = total - len(newest)
            units = _HEADER_UNITS + (1 + utf16_len(elision_marker(unlisted)) if unlisted else 0) + lines_units
            return -(-units // 4) + MESSAGE_OVERHEAD
        return self.note_tokens(note_text(newest[::-1], total - len(newest)))

    def listing_note(self, dropped: list[int], room: int) -> tuple[str, int] | None:
        total = len(dropped)
        newest: list[str] = []
        best_cost = self.listing_cost(newest, total, 0)
        if best_cost > room:
            return None
        lines_units = 0
        for i in reversed(dropped[-NOTE_MAX_LINES:] if dropped else []):
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

    def note_for(self, dropped: list[int], room: int | None, chunk: int = 0) -> tuple[str, int] | None:
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
            room = max(chunk // 4, self.note_tokens(note_text([], len(dropped))))
        return self.listing_note(dropped, room)

    def greedy_tail(self, segs: list[list[Any]], room: int) -> tuple[int, int, tuple[str, int] | None]:
        total_dropped = sum(s[1] - s[0] for s in segs if not s[2])
        with_note = self.note_tokens(note_text([], total_dropped)) <= room
        start = len(segs)
        tail = 0
        dropped = total_dropped
        while start > 0:
            seg = segs[start - 1]
            if seg[2]:
                start -= 1
                continue
            cost = self.seg_tokens(seg)
            left = dropped - (seg[1] - seg[0])
            reserve = self.note_tokens(note_text([], left)) if with_note and left > 0 else 0
            if tail + cost + reserve > room:
                break
            tail += cost
            dropped = left
            start -= 1
        note = self.note_for(_dropped_before(segs, start), room - tail) if with_note else None
        return start, tail, note

    def chunked_tail(self, segs: list[list[Any]], room: int, chunk: int) -> tuple[int, int, tuple[str, int] | None]:
        chunk = max(chunk, 1)
        candidates: list[int] = []
        running = 0
        for k, seg in enumerate(segs):
            before = running
            running += self.seg_tokens(seg)
            if running // chunk > before // chunk:
                candidates.append(k + 1)
        candidates.append(len(segs))
        candidates = [c for i, c in enumerate(candidates) if i == 0 or c != candidates[i - 1]]
        suffix = [0] * (len(segs) + 1)
        for k in range(len(segs) - 1, -1, -1):
            seg = segs[k]
            suffix[k] = suffix[k + 1] + (0 if seg[2] else self.seg_tokens(seg))
        for c in candidates:
            tail = suffix[c]
            if tail > room:
                continue
            note = self.note_for(_dropped_before(segs, c), None, chunk)
            if note is None:
                return c, tail, None
            if tail + note[1] <= room:
                return c, tail, note
        c = next((c for c in candidates if suffix[c] <= room), len(segs))
        return c, suffix[c], None

    def pack_history(self, end: int, budget: int, dialect: str, chunk: int | None) -> dict[str, Any]:
        t = self.t
        roles = t.roles
        if self.fits_within(0, end, budget):
            return {"kept": list(range(end)), "note": None, "fits": True, "tokens": t.sum(0, end)}
        prefix = next((i for i in range(end) if roles[i] != "system"), end)
        segs = self.segments(prefix, end, dialect)
        directive = next(
            (
                i
                for i in range(end - 1, prefix - 1, -1)
                if roles[i] == "user"
                and not _is_volatile("user", t.messages[i])
                and not (dialect == "anthropic" and _only_tool_results(t.messages[i]))
            ),
            None,
        )
        pinned = [p for p in self.pinned if prefix <= p < end and roles[p] in ("user", "assistant")]
        # Each message's segment, so that marking a pin costs O(1) however many there are.
        segment_of = [0] * (end - prefix)
        for k, (start, stop, _) in enumerate(segs):
            segment_of[start - prefix : stop - prefix] = [k] * (stop - start)
        for i in ([] if directive is None else [directive]) + pinned:
            segs[segment_of[i - prefix]][2] = True
        core = t.sum(0, prefix)
        for seg in segs:
            if seg[2]:
                core += self.seg_tokens(seg)
        if core > budget:
            kept = list(range(prefix)) + [i for s in segs if s[2] for i in range(s[0], s[1])]
            return {"kept": kept, "note": None, "fits": False, "tokens": core}
        room = budget - core
        if chunk is None:
            tail_seg, tail_tokens, note = self.greedy_tail(segs, room)
        else:
            tail_seg, tail_tokens, note = self.chunked_tail(segs, room, chunk)
        kept = list(range(prefix)) + [i for s in segs[:tail_seg] if s[2] for i in range(s[0], s[1])]
        kept += [i for s in segs[tail_seg:] for i in range(s[0], s[1])]
        tokens = core + tail_tokens
        packed_note = None
        if note is not None:
            tokens += note[1]
            packed_note = (note[0], prefix)
        return {"kept": kept, "note": packed_note, "fits": True, "tokens": tokens}


def _dropped_before(segs: list[list[Any]], stop: int) -> list[int]:
    return [i for s in segs[:stop] if not s[2] for i in range(s[0], s[1])]


def pack_handoff(
    messages: Any,
    target_context_tokens: int,
    reserve_output_tokens: int,
    estimate_tokens: Estimator | str | None,
    pinned: Iterable[int],
    summary: str | None,
    system: str | list[Any] | None,
    shape: str,
    cut: str,
    chunk_tokens: int | None,
    tools: list[Any] | None = None,
    image_tokens: int | None = None,
) -> HandoffPack:
    args = pack_arguments(
        target_context_tokens,
        reserve_output_tokens,
        estimate_tokens,
        pinned,
        summary,
        system,
        shape,
        cut,
        chunk_tokens,
        tools,
    )
    system_tokens = _prompt_tokens((system, tools), args.sizers, image_tokens)
    summary = None if args.summary is None else _lossy(args.summary)
    return _pack(
        messages, args.budget, args.sizers, args.pinned, summary, system_tokens, shape, args.chunk_tokens, image_tokens
    )


def _pack(
    messages: Any,
    budget: int,
    sizing: Sizing,
    pinned: list[int],
    summary: str | None,
    system_tokens: int,
    dialect: str,
    chunk_tokens: int | None,
    image_tokens: int | None = None,
) -> HandoffPack:
    estimate = resolved(sizing)
    t = Transcript(messages, sizing, dialect, image_tokens)
    n = len(t)
    for p in pinned:
        if p >= n:
            raise ArgumentError(f"pinned index {p} is out of range for {n} messages")
    packer = _Packer(t, estimate, pinned, summary)
    available = budget - system_tokens
    if packer.fits_within(0, n, available):
        return HandoffPack(list(t.messages), 0, True, t.sum(0, n) + system_tokens, budget, None, list(range(n)))
    if t.kinds is not None:
        dialect = "responses"
    elif dialect == "auto":
        dialect = detect_dialect(t.messages)
    volatile = n
    while volatile > 0 and _is_volatile(t.roles[volatile - 1], t.messages[volatile - 1]):
        volatile -= 1
    packed = None
    if volatile < n:
        tail_tokens = t.sum(volatile, n)
        with_tail = packer.pack_history(volatile, available - tail_tokens, dialect, chunk_tokens)
        if with_tail["fits"]:
            packed = with_tail
            packed["kept"].extend(range(volatile, n))
            packed["tokens"] += tail_tokens
    if packed is None:
        packed = packer.pack_history(volatile, available, dialect, chunk_tokens)
    # The note's role is decided on the final output, the volatile tail put back.
    kept = packed["kept"]
    text, at = packed["note"] if packed["note"] is not None else (None, 0)
    following = t.roles[kept[at]] if text is not None and at < len(kept) else None
    role = "user" if following in (None, "assistant") else "assistant"
    out = [t.messages[i] for i in kept]
    if text is not None:
        out.insert(
            at,
            {"type": "message", "role": role, "content": text}
            if t.kinds is not None
            else {"role": role, "content": text},
        )
    return HandoffPack(out, n - len(kept), packed["fits"], packed["tokens"] + system_tokens, budget, text, kept)


def _prompt_tokens(parts: Iterable[Any], sizing: Sizing, image_tokens: int | None = None) -> int:
    """What a separate system prompt and the tool definitions cost: each what a system
    message with that content costs (past a u64 the sum saturates, as the core's does:
    nothing that large fits)."""
    total = sum(message_tokens(prompt_message(p), sizing, image_tokens) for p in parts if p is not None)
    return min(U64_MAX, total)


def pack_many(
    transcripts: list[Any],
    budget: int,
    systems: list[Any] | None,
    tools: list[Any] | None,
    dialect: str,
    chunk_tokens: int | None,
    threads: int,
    encoding: str | None = None,
) -> list[HandoffPack]:
    """One by one: pure Python has no GIL to release (``threads`` is accepted and unused)."""
    sizing = None if encoding is None else encoding_name(encoding)
    prompts = [
        _prompt_tokens((None if systems is None else systems[i], tools), sizing) for i in range(len(transcripts))
    ]
    out = []
    for i, (messages, system) in enumerate(zip(transcripts, prompts, strict=True)):
        try:
            out.append(_pack(messages, budget, sizing, [], None, system, dialect, chunk_tokens))
        except Exception as exc:
            add_note(exc, f"in transcript {i}")
            raise
    return out
