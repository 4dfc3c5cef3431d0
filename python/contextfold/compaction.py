"""Compaction: fold the bulky middle of a long run into one LLM-written note.

:func:`windowed` keeps a request inside the window by dropping the oldest turns, which
silently loses what the run learned. When a summariser is available,
:func:`build_working_transcript` instead compresses the older turns into ONE note and keeps
a token-sized tail verbatim, re-injecting the live directive when the note covers it. The
note is carried from request to request in a :class:`CompactMemo`, and each new fold
summarises only the previous note plus the messages since it, so a long run is never
re-summarised from scratch. :func:`summarize_transcript` calls any LLM chunk by chunk, so
no single call can overflow the summariser's own window.

``complete`` is any callable taking ONE dict ``{"system", "user", "max_tokens"[,
"signal"]}`` and returning the text (or None), or an awaitable of it (an ``async``
function; a plain one is taken too, as JavaScript's ``await`` takes a plain value): a
three-line adapter fits the OpenAI,
Anthropic or LiteLLM SDKs, e.g. for OpenAI::

    async def complete(req):
        r = await client.chat.completions.create(model="gpt-4o-mini", max_tokens=req["max_tokens"],
            messages=[{"role": "system", "content": req["system"]}, {"role": "user", "content": req["user"]}])
        return r.choices[0].message.content
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import GeneratorType
from typing import Any

from ._contract import check_callable, named_at, read_items, role_of, whole
from ._js import compact_json, entry, is_str, js_trim, listed, plain, str_value, utf16_cut, utf16_len
from .errors import ArgumentTypeError, MessageError
from .tokens import estimate_tokens, message_tokens, tokens_of
from .window import (
    COMPACT_TAIL_TOKEN_BUDGET,
    HISTORY_TOKEN_BUDGET,
    HISTORY_WINDOW,
    assembled,
    check_prompt,
    compact_tail_start_for_budget,
    fold_plan,
    verbatim_start,
    window_start,
    windowed,
)

__all__ = [
    "TRANSCRIPT_SUMMARY_INPUT_TOKENS",
    "TRANSCRIPT_SUMMARY_MAX_TOKENS",
    "TRANSCRIPT_SUMMARY_PROMPT",
    "CompactMemo",
    "TranscriptFold",
    "WorkingTranscriptState",
    "build_working_transcript",
    "render_for_summary",
    "still_in_working_context",
    "summarize_transcript",
    "summary_chunks",
]

TRANSCRIPT_SUMMARY_PROMPT = (
    "You compress the earlier part of an agent's conversation into working notes the agent will read in place of "
    "it. Keep what the remaining work depends on: the user's current instruction, word for word where it matters; "
    "every file path, function, class and other symbol that was found, read or changed, and what was learned about "
    "each; decisions made and why; commands run and their outcomes; open problems and the next step. Prefer exact "
    "names and facts over narrative, drop pleasantries and repetition, and do not invent anything. If a previous "
    "summary opens the input, fold it in: the result must stand alone. Write plain text, no preamble."
)
"""The summariser's instructions."""
TRANSCRIPT_SUMMARY_MAX_TOKENS = 2_500
"""The longest note a summariser call may write."""
TRANSCRIPT_SUMMARY_INPUT_TOKENS = 48_000
"""The most transcript one summariser call reads; longer input is summarised in chunks."""

_NOTE_HEADER = "Summary of the conversation so far (the earlier turns, compressed):\n"
_CLIPPED = "\n[…clipped]"

Message = dict[str, Any]
Summarize = Callable[[list[Message]], Awaitable[str | None] | str | None]
Complete = Callable[[dict[str, Any]], Awaitable[str | None] | str | None]


@dataclass(frozen=True, slots=True)
class CompactMemo:
    """A held note: it summarises ``convo[:covered_end]`` (an int of 0 or more; one past
    the transcript's end is a stale memo, ignored)."""

    note: str
    covered_end: int

    def __post_init__(self) -> None:
        if not is_str(self.note):
            raise ArgumentTypeError(f"note must be a str, got {type(self.note).__name__}")
        object.__setattr__(self, "covered_end", whole("covered_end", self.covered_end))


@dataclass(frozen=True, slots=True)
class TranscriptFold:
    """What one fold did, for ``on_folded``: how many messages it newly folded, the new
    note, and where the verbatim part now starts."""

    dropped_messages: int
    note: str
    covered_end: int


@dataclass(slots=True)
class WorkingTranscriptState:
    """A run's transcript and the note held for it (mutable: a fold updates the memo)."""

    transcript: list[Message]
    compact_memo: CompactMemo | None = field(default=None)


def _fits_verbatim(messages: Sequence[Message], extra_tokens: int = 0) -> bool:
    return len(messages) <= HISTORY_WINDOW and tokens_of(messages) + extra_tokens <= HISTORY_TOKEN_BUDGET


def _live_memo(state: WorkingTranscriptState, convo: list[Message]) -> CompactMemo | None:
    """The state's held note when it covers no more than ``convo`` (the transcript as
    read), else None."""
    memo = state.compact_memo
    if memo is None:
        return None
    if not issubclass(type(memo), CompactMemo):
        raise ArgumentTypeError(f"compact_memo must be a CompactMemo or None, got {type(memo).__name__}")
    return memo if memo.covered_end <= len(convo) else None


def _transcript_of(state: Any) -> list[Message]:
    """The state's transcript, read once (:func:`~contextfold._contract.read_items`); the
    state checked."""
    if not issubclass(type(state), WorkingTranscriptState):
        raise ArgumentTypeError(f"state must be a WorkingTranscriptState, got {type(state).__name__}")
    return read_items("state.transcript", state.transcript, "messages")


def still_in_working_context(state: WorkingTranscriptState, message: Message) -> bool:
    """Whether ``message`` (by identity) is still sent verbatim: after the held note's
    coverage when there is one, else inside :func:`windowed`."""
    convo = _transcript_of(state)
    index = next((i for i, m in enumerate(convo) if m is message), -1)
    if index < 0:
        return False
    memo = _live_memo(state, convo)
    if memo is not None:
        return index >= verbatim_start(convo, memo.covered_end)
    return index >= window_start(convo)


async def build_working_transcript(
    state: WorkingTranscriptState,
    system_prompt: str,
    summarize: Summarize,
    on_folded: Callable[[TranscriptFold], Any] | None = None,
) -> list[Message]:
    """The request to send: the system prompt, then the transcript, folded when needed.

    - Fits verbatim (at most 80 messages and 64k tokens): system + :func:`windowed`, and
      the memo is cleared.
    - A held note whose remainder fits is reused as it is.
    - Otherwise the held note plus exactly the messages since it are folded, by
      ``summarize`` (a callable returning the note, or an awaitable of it),
      into a new note up to a token-sized tail; the live directive is
      re-injected right before the tail when the note covers it, and ``on_folded`` hears of
      it. Nothing new to fold: ``summarize`` is not called and the held note is kept. No
      summary (None or empty): the held note is kept, else the oldest turns are dropped.
      Any answer but a str or None raises :class:`~contextfold.ArgumentTypeError`, as do
      a ``compact_memo`` that is not a :class:`CompactMemo` and a ``summarize`` or
      ``on_folded`` that cannot be called (refused before anything is read or changed).
    """
    # Read once: the run may go on while the summariser is awaited, and what it adds or
    # takes away meanwhile belongs to the next request.
    convo = _transcript_of(state)
    check_prompt(system_prompt)
    check_callable("summarize", summarize)
    check_callable("on_folded", on_folded, optional=True)
    system: Message = {"role": "system", "content": system_prompt}
    memo = _live_memo(state, convo)  # checked before the state is changed
    if _fits_verbatim(convo):
        state.compact_memo = None
        return [system, *windowed(convo)]
    # Every outcome is read from the messages before the summariser is awaited (below): a
    # role the run changes meanwhile would move a tail or a directive.
    if memo is None:
        fallback = [system, *windowed(convo)]
    else:
        held_plan = fold_plan(convo, memo.covered_end)
        fallback = assembled(system_prompt, convo, memo.note, held_plan)
        if _fits_verbatim(convo[held_plan[0] :], estimate_tokens(memo.note)):
            return fallback

    start = 0 if memo is None else memo.covered_end
    end = compact_tail_start_for_budget(convo, COMPACT_TAIL_TOKEN_BUDGET)
    if end <= start:
        return fallback
    held = [] if memo is None else [{"role": "assistant", "content": memo.note}]
    plan = fold_plan(convo, end)
    summary = await _answer(summarize, [*held, *convo[start:end]])
    if summary is not None and not is_str(summary):
        raise ArgumentTypeError(f"summarize must return a str or None, got {type(summary).__name__}")
    if not summary:
        return fallback
    note = _NOTE_HEADER + summary
    state.compact_memo = CompactMemo(note, end)
    if on_folded is not None:
        on_folded(TranscriptFold(end - start, note, end))
    return assembled(system_prompt, convo, note, plan)


async def _answer(call: Callable[[Any], Any], argument: Any) -> Any:
    """What ``call`` answers for ``argument``: awaited when ``await`` takes it, else as it
    is (the seed awaits its summariser, and JavaScript's ``await`` takes a plain value
    so). Awaited once: an awaitable that gives another is its answer, as Python's
    ``await`` has it (JavaScript's would wait for that one too)."""
    answer = call(argument)
    return await answer if _awaitable(answer) else answer


def _awaitable(value: Any) -> bool:
    """Whether ``await`` takes ``value``, as ``await`` decides it: by its type (a
    coroutine, a future, any ``__await__``) or a ``types.coroutine`` generator.
    ``inspect.isawaitable`` believes a ``__class__`` that lies and ``Awaitable.register``,
    and the ``await`` then raised a bare TypeError."""
    kind = type(value)
    if kind is GeneratorType:
        return bool(value.gi_code.co_flags & inspect.CO_ITERABLE_COROUTINE)
    return getattr(kind, "__await__", None) is not None


def render_for_summary(messages: Sequence[Message]) -> str:
    """The transcript as the summariser reads it: ``role [called: a, b]: content`` per
    message, separated by a blank line; non-string content as compact JSON. Values are
    read as stored (a subclass's own ``get`` or formatting is not what is sent); a message
    that is not a dict, or whose role is missing or not a str, is a
    :class:`~contextfold.MessageTypeError` naming it."""
    out = []
    # Read once (a list subclass as stored): a key's `__eq__` that grows the list while
    # a message is read changes nothing read, and cannot make the walk endless.
    for i, m in enumerate(read_items("messages", messages, "messages")):
        role = role_of(m, i)  # a str, as every reader of a message takes it
        calls = plain(entry(m, "tool_calls"))
        names = []
        if type(calls) is list:
            for call in listed(calls):
                function: Any = entry(call, "function") if issubclass(type(call), dict) else None
                name = str_value(entry(function, "name")) if issubclass(type(function), dict) else None
                if name is not None:
                    names.append(name)
        called = f" [called: {', '.join(names)}]" if type(calls) is list and calls else ""
        content = entry(m, "content")
        text = str_value(content)
        out.append(f"{role}{called}: {compact_json(content, 'content', i) if text is None else text}")
    return "\n\n".join(out)


def summary_chunks(messages: Sequence[Message], budget: int = TRANSCRIPT_SUMMARY_INPUT_TOKENS) -> list[list[Message]]:
    """Consecutive chunks of at most ``budget`` tokens; a message larger than the budget is
    a chunk of its own. Nothing is lost: the chunks concatenate to ``messages``."""
    budget = whole("budget", budget)
    chunks: list[list[Message]] = []
    chunk: list[Message] = []
    used = 0
    for i, m in enumerate(read_items("messages", messages, "messages")):  # read once, as above
        try:
            cost = message_tokens(m)
        except MessageError as exc:
            raise named_at(exc, i) from None
        if chunk and used + cost > budget:
            chunks.append(chunk)
            chunk, used = [], 0
        chunk.append(m)
        used += cost
    if chunk:
        chunks.append(chunk)
    return chunks


def _clip(text: str, budget: int) -> str:
    limit = budget * 4
    return utf16_cut(text, limit) + _CLIPPED if utf16_len(text) > limit else text


def _beside(note: Message | None, chunk: list[Message], budget: int) -> tuple[list[Message], list[Message]]:
    """The messages of ``chunk`` that go into one call unclipped (after ``note``, the note
    so far, when there is one), and the rest, for the next call: chunks are sized without
    the roles and blank lines a call reads. A message that alone overflows the call goes
    as it is, to be clipped: the first of the history, or one larger than a whole call
    (a chunk of its own) after a note that leaves room for some of it; else nothing goes
    when even the first message does not fit."""
    limit = budget * 4
    used = -2 if note is None else utf16_len(render_for_summary([note]))
    room = used + 2 < limit
    for k, m in enumerate(chunk):
        used += 2 + utf16_len(render_for_summary([m]))  # each after a blank line
        if used > limit:
            if k == 0 and (note is None or (len(chunk) == 1 and room and message_tokens(m) > budget)):
                return chunk[:1], chunk[1:]
            return chunk[:k], chunk[k:]
    return chunk, []


async def summarize_transcript(
    complete: Complete,
    messages: Sequence[Message],
    signal: Any = None,
    budget: int = TRANSCRIPT_SUMMARY_INPUT_TOKENS,
) -> str | None:
    """A note for ``messages``: one ``complete`` call per chunk of ``budget`` tokens, each
    folding the next chunk onto the note so far. None when any call fails or answers
    nothing (the caller then falls back), never a note that skipped part of the history.
    One message longer than a whole call reads is clipped, with a marker (so is the first
    message when it alone, with its role, overflows the call). Chunks are sized without the
    roles and blank lines a call reads, and the note so far shares its call's budget: a
    chunk that would not fit unclipped goes over more calls, and when the note leaves no
    room for the next message the result is None
    (the chunks and calls are SPEC §7's whenever nothing would be clipped). ``budget`` is at
    least 1 and ``complete`` must be callable (:class:`~contextfold.ArgumentError` and
    :class:`~contextfold.ArgumentTypeError` otherwise)."""
    check_callable("complete", complete)
    budget = whole("budget", budget, 1)  # no room for input would clip every message away
    chunks = summary_chunks(messages, budget)  # the list read once, before any call awaits
    if not chunks:
        return None
    note: str | None = None
    pending = chunks[::-1]  # the next chunk last
    while pending:
        # Clipping a call's text cut its last messages, and the note then covered less
        # than the history it stood for: a chunk goes over as many calls as it needs.
        carried = None if note is None else {"role": "assistant", "content": note}
        chunk, rest = _beside(carried, pending.pop(), budget)
        if not chunk:
            return None
        if rest:
            pending.append(rest)
        given = chunk if carried is None else [carried, *chunk]
        request: dict[str, Any] = {
            "system": TRANSCRIPT_SUMMARY_PROMPT,
            "user": _clip(render_for_summary(given), budget),
            "max_tokens": TRANSCRIPT_SUMMARY_MAX_TOKENS,
        }
        if signal is not None:
            request["signal"] = signal
        try:
            answer = await _answer(complete, request)
        except Exception:  # any failure of the model call reads as "no summary"
            return None
        text = js_trim(answer or "") if is_str(answer) or answer is None else ""
        if not text:
            return None
        note = text
    return note
