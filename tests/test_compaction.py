"""Compaction (SPEC §7): summaries, chunking, folding, markers; and a scripted summariser
replaying the longest corpus transcripts turn by turn."""

from __future__ import annotations

import asyncio
import collections.abc
import types
from typing import Any

import contextfold as cf
import pytest

from .conftest import anthropic_corpus, openai_corpus, vectors


def long(n: int) -> list[dict[str, Any]]:
    return [{"role": "assistant" if i % 2 else "user", "content": f"turn {i} {'x' * 400}"} for i in range(n)]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def never(_msgs: list[dict[str, Any]]) -> str:
    raise AssertionError("summarize was called")


def test_render_for_summary() -> None:
    call = {"id": "1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    rendered = cf.render_for_summary(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call, {"function": {}}]},
            {"role": "tool", "content": [{"type": "text", "text": "é"}]},
        ]
    )
    assert rendered == 'user: hi\n\nassistant [called: read_file]: null\n\ntool: [{"type":"text","text":"é"}]'


def test_summary_chunk_vectors(backend: str) -> None:
    for case in vectors("summary_chunk_sizes"):
        roles, lengths, budget = case["args"]
        msgs = [{"role": r, "content": "x" * n} for r, n in zip(roles, lengths, strict=True)]
        assert [len(c) for c in cf.summary_chunks(msgs, budget)] == case["expected"], case


def test_chunks_lose_nothing() -> None:
    msgs = long(40)
    chunks = cf.summary_chunks(msgs, 1_000)
    assert len(chunks) > 1
    assert [m for c in chunks for m in c] == msgs
    assert cf.summary_chunks([{"role": "user", "content": "y" * 50_000}], 1_000) == [
        [{"role": "user", "content": "y" * 50_000}]
    ]


def test_summarize_never_clips_a_message_of_the_first_chunk_away() -> None:
    # Chunks are sized without the roles and blank lines the call reads, and the first one
    # was clipped as it came: a long role cut the chunk's last message off, and a note came
    # back for history it never read (helper-87).
    role = "r" * 30
    messages = [{"role": role, "content": "first"}, {"role": role, "content": "SECRET_LAST"}]
    assert cf.summary_chunks(messages, 16) == cf.summary_chunks(messages, 13) == [messages]
    inputs: list[str] = []

    async def complete(req: dict[str, Any]) -> str:
        inputs.append(req["user"])
        return "note"

    assert run(cf.summarize_transcript(complete, messages, None, 16)) == "note"
    assert len(inputs) == 2 and "first" in inputs[0] and "SECRET_LAST" in inputs[1]
    assert not any(text.endswith("[…clipped]") for text in inputs)
    # At 13 tokens the second message never fits beside a note: no note, not one that
    # skipped it.
    assert run(cf.summarize_transcript(complete, messages, None, 13)) is None


def test_a_note_that_leaves_no_room_for_the_next_message_gives_none() -> None:
    # A summariser answering more than a call holds: the next message, larger than a call
    # itself, was clipped away behind the note, and the note came back (helper-87).
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "SECRET" + "x" * 1_000}]

    async def complete(req: dict[str, Any]) -> str:
        return "N" * 600

    assert run(cf.summarize_transcript(complete, messages, None, 100)) is None


def test_summarize_folds_each_chunk_onto_the_note() -> None:
    inputs: list[dict[str, Any]] = []

    async def complete(req: dict[str, Any]) -> str:
        inputs.append(req)
        return f"note {len(inputs)}"

    out = run(cf.summarize_transcript(complete, long(40), None, 1_000))
    assert len(inputs) > 1 and out == f"note {len(inputs)}"
    assert "note " not in inputs[0]["user"]
    assert inputs[1]["user"].startswith("assistant: note 1")
    assert inputs[0]["system"] == cf.TRANSCRIPT_SUMMARY_PROMPT and inputs[0]["max_tokens"] == 2_500
    assert "signal" not in inputs[0]
    run(cf.summarize_transcript(complete, long(2), signal="abort-token"))
    assert inputs[-1]["signal"] == "abort-token"


def test_a_plain_function_summarises_as_an_async_one_does() -> None:
    # The seed awaits what the summariser returns, and JavaScript's await takes a plain
    # value as it is: a synchronous summariser worked there, and here every call read as a
    # failed one (summarize_transcript gave None) or raised a bare TypeError.
    inputs: list[dict[str, Any]] = []

    def complete(req: dict[str, Any]) -> str:
        inputs.append(req)
        return f"note {len(inputs)}"

    async def completed(req: dict[str, Any]) -> str:
        return complete(req)

    out = run(cf.summarize_transcript(complete, long(40), None, 1_000))
    calls = len(inputs)
    assert calls > 1 and out == f"note {calls}"
    assert run(cf.summarize_transcript(completed, long(40), None, 1_000)) == f"note {2 * calls}"

    def summarize(msgs: list[dict[str, Any]]) -> str:
        return f"summary of {len(msgs)}"

    state = cf.WorkingTranscriptState(long(100))
    out = run(cf.build_working_transcript(state, "sys", summarize))
    memo = state.compact_memo
    assert memo is not None and memo.note.endswith(f"summary of {memo.covered_end}") and out[1]["content"] == memo.note


class _ClaimsAFuture:
    """Claims to be a Future (isinstance believes it); ``await`` does not."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return asyncio.Future


class _RegisteredAwaitable:
    """Registered as an Awaitable, with no ``__await__``."""


collections.abc.Awaitable.register(_RegisteredAwaitable)


@pytest.mark.parametrize("answer", [_ClaimsAFuture, _RegisteredAwaitable])
def test_an_answer_await_would_refuse_is_a_plain_one(answer: type) -> None:
    # inspect.isawaitable believed these (a __class__ that lies, Awaitable.register), and
    # the await raised a bare TypeError (helper-88).
    assert run(cf.summarize_transcript(lambda _req: answer(), long(40))) is None
    state = cf.WorkingTranscriptState(long(100))
    with pytest.raises(cf.ArgumentTypeError, match=f"summarize must return a str or None, got {answer.__name__}"):
        run(cf.build_working_transcript(state, "sys", lambda _msgs: answer()))

    @types.coroutine
    def generated(text: str) -> Any:
        yield from ()
        return text

    # A generator-based coroutine is awaited.
    assert run(cf.summarize_transcript(lambda _req: generated("note"), long(40))) == "note"


def test_the_note_so_far_never_clips_a_chunk_it_goes_with() -> None:
    # The note shares its call's budget: clipped together, a full chunk lost its last
    # messages and the note went on as if it covered them.
    messages = [{"role": "user", "content": f"<m{i}>" + "x" * 4_000} for i in range(150)]
    inputs: list[str] = []

    async def complete(req: dict[str, Any]) -> str:
        inputs.append(req["user"])
        return "n" * 10_000  # the most a call may answer: 2,500 tokens

    assert run(cf.summarize_transcript(complete, messages)) == "n" * 10_000
    assert not any(text.endswith("[…clipped]") for text in inputs)
    seen = [i for text in inputs for i in range(150) if f"<m{i}>" in text]
    assert seen == list(range(150))  # each message in one call, in order
    # Short notes leave SPEC §7's chunks as they are: one call a chunk.
    short: list[str] = []

    async def brief(req: dict[str, Any]) -> str:
        short.append(req["user"])
        return "n"

    run(cf.summarize_transcript(brief, messages))
    assert len(short) == len(cf.summary_chunks(messages))
    # A note that leaves no room for the next message: no note that skipped it.
    calls = 0

    async def verbose(_req: dict[str, Any]) -> str:
        nonlocal calls
        calls += 1
        return "n" * 1_000

    assert run(cf.summarize_transcript(verbose, long(6), None, 150)) is None
    assert calls == 1
    # A message larger than a whole call is clipped, the note before it.
    huge = [{"role": "user", "content": "a"}, {"role": "user", "content": "h" * 8_000}]
    clipped: list[str] = []

    async def keep(req: dict[str, Any]) -> str:
        clipped.append(req["user"])
        return "n" * 40

    assert run(cf.summarize_transcript(keep, huge, None, 100)) == "n" * 40
    assert len(clipped) == 2 and clipped[1].startswith("assistant: " + "n" * 40) and clipped[1].endswith("[…clipped]")


@pytest.mark.parametrize("failure", ["", None, "   ", "raise"])
def test_any_failing_chunk_gives_none(failure: Any) -> None:
    calls = 0

    async def complete(_req: dict[str, Any]) -> str | None:
        nonlocal calls
        calls += 1
        if calls == 2:
            if failure == "raise":
                raise RuntimeError("model down")
            return failure  # type: ignore[no-any-return]
        return "n"

    assert run(cf.summarize_transcript(complete, long(40), None, 1_000)) is None
    assert run(cf.summarize_transcript(complete, [], None, 1_000)) is None


def test_one_oversized_message_is_clipped() -> None:
    seen = ""

    async def complete(req: dict[str, Any]) -> str:
        nonlocal seen
        seen = req["user"]
        return "n"

    run(cf.summarize_transcript(complete, [{"role": "user", "content": "y" * 50_000}], None, 1_000))
    assert len(seen) < 5_000 and seen.endswith("\n[…clipped]") and len(seen) == 4_000 + len("\n[…clipped]")


def test_fits_verbatim_clears_the_memo() -> None:
    state = cf.WorkingTranscriptState(long(10), cf.CompactMemo("old", 4))

    out = run(cf.build_working_transcript(state, "sys", never))
    assert out[0] == {"role": "system", "content": "sys"} and out[1:] == state.transcript
    assert state.compact_memo is None


def test_fold_report_and_reuse() -> None:
    convo = long(100)  # > 80 messages: a message-count overflow folds too
    state = cf.WorkingTranscriptState(convo)
    folds: list[cf.TranscriptFold] = []
    calls: list[list[dict[str, Any]]] = []

    async def summarize(msgs: list[dict[str, Any]]) -> str:
        calls.append(msgs)
        return f"summary {len(calls)}"

    out = run(cf.build_working_transcript(state, "sys", summarize, folds.append))
    assert len(folds) == 1 and out[1] == {"role": "assistant", "content": folds[0].note}
    memo = state.compact_memo
    assert memo is not None and memo.covered_end == folds[0].covered_end == folds[0].dropped_messages
    # the directive (index 98) is in the tail, so nothing is re-injected: the tail follows the note
    assert all(a is b for a, b in zip(out[2:], convo[memo.covered_end :], strict=True))
    # a live memo whose remainder fits is reused: no new call
    again = run(cf.build_working_transcript(state, "sys", summarize, folds.append))
    assert again == out and len(calls) == 1
    assert cf.still_in_working_context(state, convo[-1]) and not cf.still_in_working_context(state, convo[0])
    # by identity (SPEC §7): an equal copy of a message in the tail is not in the transcript
    assert convo[-1] == dict(convo[-1]) and not cf.still_in_working_context(state, dict(convo[-1]))
    # The directive covered by the note (one request, then a long run of replies) is
    # re-injected, the same object, right before the tail.
    convo = [{"role": "user", "content": "the task"}] + [
        {"role": "assistant", "content": f"step {i} " + "x" * 400} for i in range(100)
    ]
    state = cf.WorkingTranscriptState(convo)
    out = run(cf.build_working_transcript(state, "sys", summarize))
    memo = state.compact_memo
    assert memo is not None and memo.covered_end > 0
    assert out[2] is convo[0]
    assert len(out) == 3 + len(convo) - memo.covered_end
    assert all(a is b for a, b in zip(out[3:], convo[memo.covered_end :], strict=True))


def test_refold_summarises_the_note_plus_only_what_is_new() -> None:
    convo = long(100)
    state = cf.WorkingTranscriptState(convo)
    seen: list[list[dict[str, Any]]] = []

    async def summarize(msgs: list[dict[str, Any]]) -> str:
        seen.append(msgs)
        return f"s{len(seen)}"

    run(cf.build_working_transcript(state, "sys", summarize))
    first_end = state.compact_memo.covered_end  # type: ignore[union-attr]
    convo.extend(long(60))
    run(cf.build_working_transcript(state, "sys", summarize))
    assert len(seen) == 2
    assert seen[1][0]["role"] == "assistant" and seen[1][0]["content"].endswith("s1")
    assert seen[1][1:] == convo[first_end : state.compact_memo.covered_end]  # type: ignore[union-attr]


def test_no_summary_falls_back() -> None:
    convo = long(100)

    async def nothing(_msgs: list[dict[str, Any]]) -> None:
        return None

    state = cf.WorkingTranscriptState(convo)
    out = run(cf.build_working_transcript(state, "sys", nothing))  # type: ignore[arg-type]
    assert out == [{"role": "system", "content": "sys"}, *cf.windowed(convo)] and state.compact_memo is None
    held = cf.WorkingTranscriptState(convo, cf.CompactMemo("held note", 30))
    out = run(cf.build_working_transcript(held, "sys", nothing))  # type: ignore[arg-type]
    assert out[1] == {"role": "assistant", "content": "held note"} and held.compact_memo == cf.CompactMemo(
        "held note", 30
    )
    stale = cf.WorkingTranscriptState(convo, cf.CompactMemo("stale", 10_000))  # past the end: ignored
    out = run(cf.build_working_transcript(stale, "sys", nothing))  # type: ignore[arg-type]
    assert out[1:] == cf.windowed(convo)


@pytest.mark.parametrize("change", ["extend", "truncate"])
def test_the_transcript_is_read_once_while_the_summariser_runs(change: str) -> None:
    # The request was assembled from state.transcript read again after the summariser
    # returned: 100 messages appended meanwhile all went out (141 messages, 139,823
    # tokens, past the 80-message, 64k-token window); a truncated one left the memo
    # covering past its end.
    def run_with(edit: bool) -> tuple[list[Any], Any]:
        state = cf.WorkingTranscriptState(long(100))

        async def summarize(msgs: list[dict[str, Any]]) -> str:
            if edit:
                if change == "extend":
                    state.transcript.extend(long(100))
                else:
                    del state.transcript[5:]
            return "summary"

        return run(cf.build_working_transcript(state, "sys", summarize)), state.compact_memo

    assert run_with(True) == run_with(False)


def test_nothing_new_to_fold_keeps_the_note_without_a_call() -> None:
    convo = long(100)
    end = cf.compact_tail_start_for_budget(convo, cf.COMPACT_TAIL_TOKEN_BUDGET)
    state = cf.WorkingTranscriptState(convo, cf.CompactMemo("n" * 300_000, end))  # too big to reuse

    out = run(cf.build_working_transcript(state, "sys", never))
    assert out[1]["content"] == "n" * 300_000


def row(i: int, content: str, metadata: str | None = None) -> dict[str, Any]:
    return {"id": i, "content": content, "metadata": metadata}


def test_markers() -> None:
    assert cf.consolidation_metadata() == '{"consolidation":true}'
    auto = cf.consolidation_metadata({"keep_from_id": 3, "folded": 7})
    assert auto == '{"consolidation":true,"auto":true,"keepFromId":3,"folded":7}'
    assert cf.consolidation_metadata({}) == '{"consolidation":true,"auto":true}'
    assert cf.consolidation_marker_of(row(1, "x", auto)) == {
        "consolidation": True,
        "auto": True,
        "keepFromId": 3,
        "folded": 7,
    }
    for bad in (None, "", "nope", "[1]", '{"consolidation":1}', '{"consolidation":true,"x":NaN}'):
        assert not cf.is_consolidation_marker(row(1, "x", bad))
    rows = [row(1, "a"), row(2, "m", cf.consolidation_metadata()), row(3, "b")]
    assert cf.last_consolidation_index(rows) == 1 and cf.last_consolidation_index(rows[:1]) == -1
    assert cf.scope_to_consolidation(rows) == rows[1:] and cf.scope_to_consolidation(rows[:1]) == rows[:1]


def test_auto_marker_scope() -> None:
    listing = [
        row(1, "old"),
        row(2, "user turn"),
        row(3, "narration"),
        row(4, "note", cf.consolidation_metadata({"keep_from_id": 2})),
        row(5, "final reply"),
    ]
    assert [r["content"] for r in cf.scope_to_consolidation(listing)] == [
        "note",
        "user turn",
        "narration",
        "final reply",
    ]
    gone = [row(1, "a"), row(2, "note", cf.consolidation_metadata({"keep_from_id": 99})), row(3, "b")]
    assert [r["content"] for r in cf.scope_to_consolidation(gone)] == ["a", "b"]
    after = [row(1, "a"), row(2, "note", cf.consolidation_metadata({"keep_from_id": 3})), row(3, "b")]
    assert [r["content"] for r in cf.scope_to_consolidation(after)] == ["a", "b"]
    fallback = [
        row(1, "old"),
        row(2, "manual", cf.consolidation_metadata()),
        row(3, "kept"),
        row(4, "auto", cf.consolidation_metadata({"keep_from_id": 99})),
        row(5, "new"),
    ]
    assert [r["content"] for r in cf.scope_to_consolidation(fallback)] == ["manual", "kept", "new"]


class Scripted:
    """A summariser that names what it was given, and can be told to fail."""

    def __init__(self, fail_every: int = 0) -> None:
        self.calls = 0
        self.fail_every = fail_every

    async def __call__(self, msgs: list[dict[str, Any]]) -> str | None:
        self.calls += 1
        if self.fail_every and self.calls % self.fail_every == 0:
            return None
        return f"[{len(msgs)} messages folded, call {self.calls}]"


def check_request(convo: list[dict[str, Any]], out: list[dict[str, Any]], state: cf.WorkingTranscriptState) -> None:
    body = out[1:]
    memo = state.compact_memo
    directive = max((i for i, m in enumerate(convo) if m["role"] == "user"), default=-1)
    if directive >= 0:
        assert any(m is convo[directive] for m in body)  # the live directive is always there
    if memo is not None and out[1].get("content") == memo.note:
        start = cf.verbatim_start(convo, memo.covered_end)
        assert start == memo.covered_end  # no message is in neither the note nor the verbatim part
        verbatim = [m for m in body[1:] if m is not convo[directive] or directive >= start]
        assert verbatim == convo[start:]
        assert cf.tokens_of(verbatim) <= cf.HISTORY_TOKEN_BUDGET + cf.tokens_of(body[1:2])
    previous = None
    for m in body:  # no orphaned tool result
        if m.get("role") == "tool":
            assert previous is not None and (previous["role"] == "tool" or previous.get("tool_calls"))
        previous = m


def replay(full: list[dict[str, Any]], summarize: Scripted, check: bool) -> None:
    state = cf.WorkingTranscriptState([])
    for message in full:
        state.transcript.append(message)
        out = run(cf.build_working_transcript(state, "sys", summarize))
        if check:
            check_request(state.transcript, out, state)
        else:
            directive = max((i for i, m in enumerate(state.transcript) if m["role"] == "user"), default=-1)
            assert directive < 0 or any(m is state.transcript[directive] for m in out)


def corpus_transcripts() -> list[list[dict[str, Any]]]:
    return openai_corpus() + [r["messages"] for r in anthropic_corpus()]


def test_replay_every_corpus_transcript() -> None:
    for full in corpus_transcripts():
        replay(full, Scripted(), check=True)


def test_replay_with_a_failing_summariser() -> None:
    for full in sorted(corpus_transcripts(), key=len, reverse=True)[:3]:
        replay(full, Scripted(fail_every=3), check=False)


@pytest.mark.parametrize(
    ("note", "covered_end", "error", "words"),
    [
        ("old", -5, cf.ArgumentError, "covered_end must be at least 0, got -5"),
        ("old", 2.5, cf.ArgumentError, "covered_end must be an int, got float"),
        ("old", True, cf.ArgumentError, "covered_end must be an int, got bool"),
        (None, 3, cf.ArgumentTypeError, "note must be a str, got NoneType"),
    ],
)
def test_a_memo_that_covers_no_prefix_is_refused(note: Any, covered_end: Any, error: type, words: str) -> None:
    # A negative end summarised convo[-5:...] (nothing), while the fold reported the 61
    # messages before the verbatim part as folded: lost from the summary unseen.
    with pytest.raises(error, match=words):
        cf.CompactMemo(note, covered_end)


@pytest.mark.parametrize("answer", [b"summary", {"text": "summary"}, 5])
def test_a_summary_that_is_no_str_is_refused_by_name(answer: Any) -> None:
    # An SDK object or bytes raised a bare TypeError from joining it to the note's header.
    async def summarize(_msgs: list[dict[str, Any]]) -> Any:
        return answer

    state = cf.WorkingTranscriptState(long(100))
    with pytest.raises(cf.ArgumentTypeError, match=f"summarize must return a str or None, got {type(answer).__name__}"):
        run(cf.build_working_transcript(state, "sys", summarize))
    assert state.compact_memo is None


@pytest.mark.parametrize("length", [1, 100])
def test_a_memo_that_is_no_compact_memo_is_refused_by_name(length: int) -> None:
    # A (note, end) tuple raised a bare AttributeError on covered_end; beside a transcript
    # that fits, it was thrown away unchecked (helper-87).
    state = cf.WorkingTranscriptState(long(length), ("note", 3))  # type: ignore[arg-type]
    for call in (
        lambda: run(cf.build_working_transcript(state, "sys", never)),
        lambda: cf.still_in_working_context(state, state.transcript[-1]),
    ):
        with pytest.raises(cf.ArgumentTypeError, match="compact_memo must be a CompactMemo or None, got tuple"):
            call()


def test_a_marker_too_deep_to_read_is_no_marker() -> None:
    # Stored text nested 10,000 deep raised a bare RecursionError out of json.loads.
    rows = [{"id": 0, "metadata": None}, {"id": 1, "metadata": "[" * 10_000 + "]" * 10_000}]
    assert not cf.is_consolidation_marker(rows[1])
    assert cf.last_consolidation_index(rows) == -1
    assert cf.scope_to_consolidation(rows) == rows


@pytest.mark.parametrize(
    ("auto", "error", "words"),
    [
        ({"keep_from_id": float("nan")}, cf.ArgumentError, "keep_from_id must be an int or None, got float"),
        ({"keep_from_id": True}, cf.ArgumentError, "keep_from_id must be an int or None, got bool"),
        ({"folded": "3"}, cf.ArgumentError, "folded must be an int or None, got str"),
        ([("folded", 3)], cf.ArgumentTypeError, "auto must be a mapping or None, got list"),
    ],
)
def test_a_marker_is_written_only_as_it_can_be_read(auto: Any, error: type, words: str) -> None:
    # keepFromId NaN was written (not JSON; no reader takes it), and read back as no marker.
    with pytest.raises(error, match=words):
        cf.consolidation_metadata(auto)


def test_summary_inputs_of_the_wrong_type_are_named() -> None:
    # Bare AttributeError / TypeError before; a str budget was taken as is.
    with pytest.raises(cf.MessageTypeError, match="message 1: expected a dict, got NoneType"):
        cf.render_for_summary([{"role": "user", "content": "hi"}, None])  # type: ignore[list-item]
    with pytest.raises(cf.ArgumentError, match="budget must be an int, got str"):
        cf.summary_chunks([{"role": "user", "content": "x"}], "5")  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match="messages must be an iterable of messages, got NoneType"):
        cf.summary_chunks(None)  # type: ignore[arg-type]


def test_a_summary_chunk_error_names_the_message(backend: str) -> None:
    # Each message is sized alone, and its error named no index ("message, field ...").
    messages: list[Any] = [{"role": "user", "content": "x"}] * 50
    for bad, field, words in (
        ({"role": 5, "content": "x"}, "role", "message 50, field 'role': expected str, got int"),
        (None, "", "message 50: expected a dict, got NoneType"),
    ):
        with pytest.raises(cf.MessageTypeError, match=words) as caught:
            cf.summary_chunks([*messages, bad])
        assert (caught.value.index, caught.value.field) == (50, field)


def test_render_for_summary_names_the_message_whose_content_has_no_json_form() -> None:
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    messages.append({"role": "user", "content": {1}})
    with pytest.raises(cf.MessageTypeError, match=r"^message 2, field 'content': ") as raised:
        cf.render_for_summary(messages)
    assert (raised.value.index, raised.value.field) == (2, "content")


@pytest.mark.parametrize(
    ("role", "words"),
    [
        (10**5000, "expected str, got int"),  # Python's own ValueError writing it replaced the render
        (3.5, "expected str, got float"),
        (None, "expected str, got NoneType"),
        (object(), "expected str, got object"),  # it was written by its own __format__
    ],
    ids=["huge int", "float", "None", "object"],
)
def test_render_for_summary_takes_a_role_as_every_reader_does(role: Any, words: str) -> None:
    messages: list[Any] = [{"role": "user", "content": "a"}, {"role": role, "content": "b"}]
    with pytest.raises(cf.MessageTypeError, match=rf"^message 1, field 'role': {words}$") as raised:
        cf.render_for_summary(messages)
    assert (raised.value.index, raised.value.field) == (1, "role")
    with pytest.raises(cf.MessageTypeError, match=r"^message 0, field 'role': missing$"):
        cf.render_for_summary([{"content": "a"}])


def test_render_for_summary_reads_values_as_stored() -> None:
    # A dict subclass's own get and a str subclass's own formatting are not what the
    # summariser is sent (every other reader goes to the storage).
    class Tampered(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            return "EVIL"

    class Loud(str):
        def __format__(self, spec: str) -> str:
            return "EVIL"

        def __str__(self) -> str:
            return "EVIL"

    call = Tampered(function=Tampered(name=Loud("read_file")))
    message = Tampered(role=Loud("assistant"), content=Loud("done"), tool_calls=[call])
    assert cf.render_for_summary([message]) == "assistant [called: read_file]: done"


@pytest.mark.parametrize(
    ("summarize", "on_folded", "words"),
    [
        (None, None, "summarize must be callable, got NoneType"),
        ("summarise", None, "summarize must be callable, got str"),
        (never, 5, "on_folded must be callable or None, got int"),
    ],
)
def test_a_summariser_or_fold_hook_that_cannot_be_called_is_refused_first(
    summarize: Any, on_folded: Any, words: str
) -> None:
    # Raw "'str' object is not callable" before, and a hook that could not be called
    # raised only after the state's memo had been replaced by the new fold.
    calls: list[Any] = []

    async def summarise(msgs: list[dict[str, Any]]) -> str:
        calls.append(msgs)
        return "summary"

    state = cf.WorkingTranscriptState(long(100))
    with pytest.raises(cf.ArgumentTypeError, match=words):
        run(cf.build_working_transcript(state, "sys", summarise if summarize is never else summarize, on_folded))
    assert (state.compact_memo, calls) == (None, [])


def test_summarize_transcript_refuses_what_cannot_summarise() -> None:
    # A zero budget clipped every message to nothing but the clip marker, and the model
    # was asked to summarise that; a complete that could not be called read as "no summary".
    messages = [{"role": "user", "content": "x" * 100}]

    async def complete(_request: dict[str, Any]) -> str:
        raise AssertionError("complete was called")

    with pytest.raises(cf.ArgumentError, match="budget must be at least 1, got 0"):
        run(cf.summarize_transcript(complete, messages, budget=0))
    with pytest.raises(cf.ArgumentTypeError, match="complete must be callable, got NoneType"):
        run(cf.summarize_transcript(None, messages))  # type: ignore[arg-type]


def test_a_bool_row_id_is_no_keep_from_id() -> None:
    # True == 1 in Python, so a row whose id was True was taken as the row keepFromId 1
    # names; a stored id is compared as the number it is, never as a bool.
    rows = [row(0, "a"), {"id": True, "content": "b", "metadata": None}, row(2, "c")]
    note = row(3, "note", cf.consolidation_metadata({"keep_from_id": 1}))
    assert cf.scope_to_consolidation([*rows, note]) == rows  # unplaceable: passed over
    assert cf.scope_to_consolidation([*rows, row(1, "one"), note]) == [note, row(1, "one")]


@pytest.mark.parametrize("written", ["5", "5.0", "5e0", "50e-1"])
def test_a_keep_from_id_is_the_number_the_json_writes(written: str) -> None:
    # JSON.parse reads each of these as the number 5, which === a row id of 5: another
    # writer's 5.0 placed the marker on the host and was passed over here (helper-82).
    rows = [row(i, f"m{i}") for i in range(10)]
    metadata = f'{{"consolidation":true,"auto":true,"keepFromId":{written}}}'
    note = {"id": 100, "content": "note", "metadata": metadata}
    assert cf.scope_to_consolidation([*rows, note]) == [note, *rows[5:]]
    assert cf.scope_to_consolidation([*rows, {**note, "metadata": metadata.replace(written, "5.5")}]) == rows


class CountedRow:
    """A stored row that counts how often its metadata is read."""

    reads = 0

    def __init__(self, id: int, metadata: str | None) -> None:
        self.id, self._metadata = id, metadata

    @property
    def metadata(self) -> str | None:
        CountedRow.reads += 1
        return self._metadata


def test_unplaceable_auto_markers_are_passed_over_in_one_walk() -> None:
    # Each unplaceable auto marker restarted the search for the newest marker and copied
    # the rows: n of them read n*n/2 metadata fields (2,000 rows took seconds).
    n = 400
    unplaceable = cf.consolidation_metadata({"keep_from_id": -1})
    rows = [CountedRow(i, unplaceable if i % 2 else None) for i in range(n)]
    CountedRow.reads = 0
    assert cf.scope_to_consolidation(rows) == [r for r in rows if r.id % 2 == 0]
    assert CountedRow.reads <= 2 * n
    placed = [*rows, CountedRow(n, cf.consolidation_metadata({"keep_from_id": 2})), CountedRow(n + 1, None)]
    CountedRow.reads = 0
    assert cf.scope_to_consolidation(placed) == [placed[-2], *(r for r in rows[2:] if r.id % 2 == 0), placed[-1]]
    assert CountedRow.reads <= 2 * n


def test_still_in_working_context_without_a_memo_follows_the_window(backend: str) -> None:
    # SPEC §7: no memo: whether windowed(convo) still holds the message (by identity).
    convo = long(100)  # 100 > 80 messages: the front is the first multiple of 20 past 100 - 80
    state = cf.WorkingTranscriptState(convo)
    start = 20
    assert convo[start]["role"] == "user"
    assert cf.still_in_working_context(state, convo[start])
    assert not cf.still_in_working_context(state, convo[start - 1])
    assert not cf.still_in_working_context(state, dict(convo[start]))  # an equal copy is another message


def test_a_memo_is_reused_exactly_while_its_remainder_and_note_fit_the_budget(backend: str) -> None:
    # SPEC §7: a memo's remainder fits when it fits verbatim with the note's estimate_tokens added.
    def costing(i: int, tokens: int) -> dict[str, Any]:
        return {"role": "assistant" if i % 2 else "user", "content": "x" * (4 * (tokens - 4))}

    convo = [costing(i, 100) for i in range(10)] + [costing(i, 3_190) for i in range(20)]
    assert cf.tokens_of(convo[10:]) == 63_800 and cf.tokens_of(convo) > cf.HISTORY_TOKEN_BUDGET
    for note_tokens, reused in ((200, True), (201, False)):  # 64,000 and 64,001 with the note
        note = "n" * (4 * note_tokens)
        calls: list[list[dict[str, Any]]] = []

        async def summarize(msgs: list[dict[str, Any]], calls: list[Any] = calls) -> str:
            calls.append(msgs)
            return "fresh"

        state = cf.WorkingTranscriptState(convo, cf.CompactMemo(note, 10))
        out = run(cf.build_working_transcript(state, "sys", summarize))
        assert (not calls, out[1]["content"] == note) == (reused, reused), note_tokens
        assert (state.compact_memo == cf.CompactMemo(note, 10)) is reused


def test_the_summary_clip_counts_utf16_units_and_never_splits_a_pair(backend: str) -> None:
    # SPEC §7 and §12: the input is clipped to budget*4 UTF-16 units; a cut inside a pair falls before it.
    seen: list[str] = []

    async def complete(req: dict[str, Any]) -> str:
        seen.append(req["user"])
        return "n"

    for content in ("a" * 33 + "😀" + "b" * 20, "😀" * 17, "😀" * 18):  # "user: " is 6 of the 40 units
        run(cf.summarize_transcript(complete, [{"role": "user", "content": content}], None, 10))
    assert seen == [
        "user: " + "a" * 33 + "\n[…clipped]",  # the pair at units 39-40 falls before the cut
        "user: " + "😀" * 17,  # 40 units: not clipped
        "user: " + "😀" * 17 + "\n[…clipped]",  # 42 units
    ]
