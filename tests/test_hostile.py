"""Hostile use of the boundary: interrupted batches, mutating callbacks and threads,
patched classes, small thread stacks. Each case gives the same outcome on both backends
(or, where only the native side can go wrong, checks that it does not)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import contextfold as cf
import pytest
from contextfold import _backend, _contract

from .conftest import ctrl_c_at_start, native_required, switch_to
from .hostile_types import LyingDict, LyingFloat, LyingInt, LyingList, LyingStr, OddHashKey, claiming


@pytest.mark.usefixtures("switch_interval_of_a_microsecond")
def test_interrupted_batches_release_every_string(monkeypatch: pytest.MonkeyPatch) -> None:
    native_required()
    probe = "λ-probe " * 80  # not Latin-1: the arena references it instead of copying it
    transcript = [{"role": "user" if i % 2 else "assistant", "content": probe} for i in range(30)]
    batch = [transcript] * 3_000
    before = sys.getrefcount(probe)

    def stopping_at(k: int) -> Callable[[], None]:
        # Where a batch lets the interpreter run signal handlers: a Ctrl-C that comes at
        # the batch's k-th stop raises here, in the middle of the batch.
        passed = 0

        def switch_point() -> None:
            nonlocal passed
            passed += 1
            if passed == k:
                raise KeyboardInterrupt

        return switch_point

    for k in range(1, 41):  # stops among the chunks in flight (a chunk is 32 transcripts)
        monkeypatch.setattr(_contract, "switch_point", stopping_at(k))
        with pytest.raises(KeyboardInterrupt):
            cf.pack_many(batch, target_context_tokens=600, threads=2)
    assert sys.getrefcount(probe) - before == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_ctrl_c_stops_a_batch_of_bodies(threads: int) -> None:
    """The results of a body batch are made as its runs are packed, the GIL taken back
    for each: a Ctrl-C meanwhile stops the batch, and the next one packs."""
    native = native_required()
    bodies = [json.dumps({"messages": _conversation(20)}).encode()] * 2_000
    options = cf.PackOptions(target_context_tokens=500)
    seen = ctrl_c_at_start(functools.partial(native.pack_requests, bodies, options, threads))
    assert seen.inside
    if threads == 1:  # a run is 32 bodies; with workers, the first run holds what they packed so far
        assert seen.objects < len(bodies), "the batch made every result before it stopped"
    again = cf.pack_requests(bodies[:40], target_context_tokens=500, threads=threads)
    assert again == [cf.pack_request(b, target_context_tokens=500) for b in bodies[:40]]


def _conversation(n: int, words: int = 20) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * words} for i in range(n)]


def _from_reading(pack: cf.HandoffPack, read: list[Any]) -> None:
    """Every field of ``pack`` comes from ``read``, the transcript as the call began."""
    assert pack.dropped == len(read) - len(pack.kept)
    kept = [m for m in pack.messages if not (pack.note is not None and m.get("content") is pack.note)]
    assert len(kept) == len(pack.kept)
    assert all(m is read[i] for m, i in zip(kept, pack.kept, strict=True))


@pytest.mark.parametrize("change", ["grow", "shrink"])
@pytest.mark.parametrize("budget", [300, 100_000])
def test_an_estimator_changing_the_list_does_not_reach_the_result(backend: str, change: str, budget: int) -> None:
    messages = _conversation(40)
    read = list(messages)

    def estimate(text: str) -> int:
        if change == "grow" and len(messages) < 1_000:
            messages.extend({"role": "user", "content": "late"} for _ in range(1_000))
        if change == "shrink" and len(messages) > 3:
            del messages[3:]
        return len(text) // 4

    pack = cf.pack_handoff(messages, target_context_tokens=budget, estimate_tokens=estimate)
    _from_reading(pack, read)
    assert pack.fits


def _results_in_one_message() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A transcript whose one user message answers two tool calls (``a``, then ``b``) in a
    block list long enough that an exact count releases the GIL for each; and that list."""
    results = [
        {"type": "tool_result", "tool_use_id": "a", "content": "A" * 4_000},
        {"type": "tool_result", "tool_use_id": "b", "content": "B" * 4_000},
    ]
    calls = [{"type": "tool_use", "id": i, "name": "read", "input": {}} for i in "ab"]
    messages = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": results},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    return messages, results


def test_an_estimator_reordering_a_planned_message_does_not_move_its_edit(backend: str) -> None:
    """An edit clears the result it planned to, whatever an estimator does to the caller's
    lists after: with a custom estimator both backends read copies of the lists edits
    index into, taken as the call began (``edited::frozen``). The native build
    applied the planned block positions to the caller's list as it was when the output was
    built: here it cleared the newest result, which ``keep=1`` keeps, and kept the older
    one whole."""
    messages, results = _results_in_one_message()
    reordered = []

    def estimate(text: str) -> int:
        if "[cleared]" in text and not reordered:  # the edit is decided: the message is sized as edited
            results.reverse()
            reordered.append(True)
        return len(text) // 4

    edits = [cf.ClearToolUses(keep=1, trigger=10)]
    pack = cf.pack_handoff(messages, target_context_tokens=2_500, estimate_tokens=estimate, edits=edits)
    assert reordered and pack.kept == [0, 1, 2, 3, 4]
    # The unedited messages are the caller's own, also those read from copies.
    assert all(pack.messages[i] is messages[i] for i in (0, 1, 3, 4))
    content = pack.messages[2]["content"]
    assert [(b["tool_use_id"], b["content"][:9]) for b in content] == [("a", "[cleared]"), ("b", "BBBBBBBBB")]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_thread_changing_transcripts_during_a_batch_does_not_reach_the_results(threads: int) -> None:
    batch = [_conversation(30) for _ in range(600)]
    huge = {"role": "assistant", "content": "x" * 40_016}
    stop = threading.Event()

    def meddle() -> None:
        while not stop.is_set():
            for transcript in batch:
                transcript.insert(1, huge)
                del transcript[1]

    meddler = threading.Thread(target=meddle)
    meddler.start()
    try:
        for _ in range(3):
            packs = cf.pack_many(batch, target_context_tokens=2_000, threads=threads)
            for pack in packs:
                assert pack.tokens == cf.tokens_of(pack.messages) <= pack.budget
                assert pack.dropped == 30 - len(pack.kept) or pack.dropped == 31 - len(pack.kept)
    finally:
        stop.set()
        meddler.join()


def test_the_first_read_in_a_process_lets_no_other_thread_change_the_messages() -> None:
    """The extension reads a list's messages without a reference to each while no other
    thread can run. Making a lazily made static (an interned key) released the GIL the
    first time, in the middle of that read: another thread freed the first message there,
    and its memory, reused for a new dict, was read as message 0 (a crash when it was
    not). Each interpreter makes those statics once, so each trial is a fresh one."""
    native_required()
    code = """
        import sys, threading
        from contextfold import _native
        first = {"role": "user", "content": "m" * 40}
        shared = [first] + [{"role": "user", "content": "c" * 8}] * 1_000_000
        del first
        replacements = [{"role": "user", "content": "z" * 400}] * 100
        armed = stop = False
        def replace():
            while not stop:
                if armed and shared:
                    # One C call: the messages freed, new dicts made in their memory.
                    shared.__init__(map(dict.copy, replacements))
        thread = threading.Thread(target=replace, daemon=True)
        sys.setswitchinterval(1e-6)
        thread.start()
        armed = True
        # The extension's own entry: no bytecode (so no switch of threads) runs between
        # arming the other thread and the read.
        try:
            total = _native.tokens_of(shared, None, None)
        finally:
            stop = True
        thread.join()
        print(total)
    """
    as_read = cf.message_tokens({"role": "user", "content": "m" * 40}) + 1_000_000 * cf.message_tokens(
        {"role": "user", "content": "c" * 8}
    )
    replaced = 100 * cf.message_tokens({"role": "user", "content": "z" * 400})
    for _ in range(5):
        done = _run_isolated(code)
        assert done.returncode == 0, done.stderr
        # Read before the other thread ran, or after: never a mix of the two lists.
        assert int(done.stdout) in (as_read, replaced), done.stdout


def test_a_type_name_that_runs_code_frees_no_ranked_path(backend: str) -> None:
    """rank_by_count named the item that is no str while the keys before it still
    borrowed their strs: a type whose ``__name__`` is a str subclass ran its ``__str__``
    there, which cleared the list, and the ranking then compared freed text (a crash)."""
    done = _run_isolated(
        f"""
        import os
        os.environ["CONTEXTFOLD_BACKEND"] = {backend!r}
        import contextfold as cf

        class Name(str):
            def __str__(self):
                items.clear()
                junk = [bytes(400_000) for _ in range(8)]
                return "NotAStr"

        class NotAStr:
            pass

        NotAStr.__name__ = Name("NotAStr")
        items = ["a" * 400_000 + str(i) for i in range(4)] + [NotAStr()]
        try:
            cf.rank_by_count(items)
        except cf.ArgumentTypeError as exc:
            print(exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "items[4]: expected str, got NotAStr\n"


def _run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter (a crash must not take the test run with it)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


_MILLION = """
    import json, os
    os.environ["CONTEXTFOLD_BACKEND"] = {backend!r}
    import contextfold as cf
    call = {{"id": "c", "type": "function", "function": {{"name": "f", "arguments": "{{}}"}}}}
    messages = [
        {{"role": "system", "content": "rules"}},
        *({{"role": ("user", "assistant")[i % 2], "content": f"turn {{i}}"}} for i in range(1_000_000)),
        {{"role": "assistant", "content": "", "tool_calls": [call]}},
        {{"role": "tool", "tool_call_id": "c", "content": "ok"}},
    ]
    def seen(pack):
        return {{"length": len(pack.messages), "kept": pack.kept, "dropped": pack.dropped, "fits": pack.fits,
                "tokens": pack.tokens, "note": pack.note}}
    print(json.dumps({{
        "greedy": seen(cf.pack_handoff(messages, target_context_tokens=8_000)),
        "chunked": seen(cf.pack_handoff(messages, target_context_tokens=8_000, cut="chunked")),
        "edited": seen(cf.pack_handoff(messages, target_context_tokens=8_000,
                                       edits=[cf.ClearToolUses(keep=0, trigger=0)])),
        "many": [seen(p) for p in cf.pack_many([messages, messages[:500_000]], target_context_tokens=8_000,
                                               threads=2)],
        "tokens": cf.tokens_of(messages),
        "window_start": cf.window_start(messages),
        "windowed": len(cf.windowed(messages)),
        "compact_tail_start": cf.compact_tail_start_for_budget(messages, 8_000),
    }}))
"""


@pytest.mark.long
def test_a_million_message_transcript_is_packed_and_windowed_alike_on_both_backends() -> None:
    """SPEC §10: million-message transcripts are handled without a crash, a panic or
    unbounded recursion, on every path that reads a whole transcript."""
    native_required()
    seen = {}
    for backend in ("native", "python"):
        done = _run_isolated(_MILLION.format(backend=backend))
        assert done.returncode == 0, done.stderr
        seen[backend] = json.loads(done.stdout)
    assert seen["native"] == seen["python"]
    found = seen["native"]
    packs = [found["greedy"], found["chunked"], found["edited"]]
    assert all(pack["fits"] and pack["dropped"] > 990_000 for pack in packs) and found["tokens"] > 6_000_000
    # Folded to the budget, not copied whole.
    assert found["greedy"]["length"] < 1_200 and found["many"][1]["length"] < 1_200


@pytest.mark.parametrize("backend_name", ["native", "python"])
def test_a_patched_result_class_is_not_filled_blindly(backend_name: str) -> None:
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import os
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import sys
        from unittest import mock
        import contextfold as cf
        real = cf.HandoffPack
        module = sys.modules[real.__module__]
        class Impostor:
            __slots__ = ()
        with mock.patch.object(module, "HandoffPack", Impostor):
            pack = cf.pack_handoff([{{"role": "user", "content": "hi"}}], target_context_tokens=100)
        assert type(pack) is real, type(pack)
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize("backend_name", ["native", "python"])
def test_a_patched_error_class_is_not_an_abort(backend_name: str) -> None:
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import os
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import contextfold as cf, contextfold.errors as errors
        real = errors.MessageTypeError
        errors.MessageTypeError = 5
        errors.ArgumentError = None
        for call in (lambda: cf.tokens_of("nope"), lambda: cf.pack_handoff([], target_context_tokens=-1)):
            try:
                call()
            except (real, cf.ArgumentError.__mro__[0]) as exc:
                print(type(exc).__name__)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "MessageTypeError\nArgumentError\n"


def test_threads_past_the_cpus_are_capped(backend: str) -> None:
    batch = [_conversation(30) for _ in range(100)]
    expected = [cf.pack_handoff(m, target_context_tokens=500) for m in batch]
    for threads in (5_000, 2**64):
        assert cf.pack_many(batch, target_context_tokens=500, threads=threads) == expected


def test_deep_content_on_a_small_thread_stack() -> None:
    native_required()
    done = _run_isolated(
        """
        import threading
        import contextfold as cf
        deep = "x" * 300
        for _ in range(250):
            deep = [deep]
        batch = [[{"role": "user", "content": [deep]}, {"role": "assistant", "content": "y" * 900}]] * 64
        out = []
        def run():
            out.append(cf.pack_many(batch, target_context_tokens=100, threads=2))
            out.append([cf.pack_handoff(m, target_context_tokens=100) for m in batch])
        threading.stack_size(80 * 1024)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        assert len(out) == 2 and out[0] == out[1]
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


@pytest.mark.parametrize("backend_name", ["native", "python"])
def test_an_estimator_reentering_pack_handoff_on_a_small_stack(backend_name: str) -> None:
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import os
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import threading
        import contextfold as cf
        messages = [{{"role": "user", "content": "hello there"}}] * 3
        def estimate(text):
            return cf.pack_handoff(messages, target_context_tokens=2, estimate_tokens=estimate).tokens
        out = []
        def run():
            try:
                cf.pack_handoff(messages, target_context_tokens=2, estimate_tokens=estimate)
            except RecursionError:
                out.append("RecursionError")
        threading.stack_size(640 * 1024)
        t = threading.Thread(target=run)
        t.start()
        t.join()
        print(*out)
        """
    )
    assert done.returncode == 0 and done.stdout == "RecursionError\n", done.stderr


def test_an_estimator_error_passes_through_message_tokens_unchanged(backend: str) -> None:
    class Mine(cf.MessageTypeError):
        pass

    raised = Mine("message 0 of my own", 0, "x")

    def estimate(text: str) -> int:
        raise raised

    with pytest.raises(Mine) as info:
        cf.message_tokens({"role": "user", "content": "hi"}, estimate_tokens=estimate)
    assert info.value is raised
    assert (str(info.value), info.value.index) == ("message 0 of my own", 0)


@pytest.mark.parametrize(
    ("message", "text", "field"),
    [
        ({"role": 5}, "message, field 'role': expected str, got int", "role"),
        ({"role": "user", "content": [{1, 2}]}, "message, field 'content': expected ", "content"),
        ([], "message: expected a dict, got list", ""),
    ],
)
def test_a_lone_message_error_names_no_index(backend: str, message: Any, text: str, field: str) -> None:
    for estimate in (None, len):
        with pytest.raises(cf.MessageTypeError) as info:
            cf.message_tokens(message, estimate_tokens=estimate)
        assert str(info.value).startswith(text)
        assert (info.value.index, info.value.field) == (None, field)


def test_every_binding_error_is_a_contextfold_error(backend: str) -> None:
    with pytest.raises(cf.ArgumentTypeError, match=r"items\[1\]: expected str, got int"):
        cf.rank_by_count(["a", 1])  # type: ignore[list-item]
    assert issubclass(cf.ArgumentTypeError, TypeError) and issubclass(cf.ArgumentTypeError, cf.ContextfoldError)


def test_numpy_scalars_count_by_value(backend: str) -> None:
    np = pytest.importorskip("numpy")
    cases = [(np.float64(1.5), 1.5), (np.float64(1e21), 1e21), (np.float64(2.0), 2.0), (np.int64(-7), -7)]
    cases += [(np.int64(2**62), 2**62), (np.float64("nan"), float("nan"))]
    for value, plain in cases:
        odd = {"role": "user", "content": [{"type": "x", "v": value}], "tool_calls": [value]}
        same = {"role": "user", "content": [{"type": "x", "v": plain}], "tool_calls": [plain]}
        assert cf.message_tokens(odd) == cf.message_tokens(same), value
        assert cf.message_tokens(odd, estimate_tokens=len) == cf.message_tokens(same, estimate_tokens=len), value
        batch = [[odd, {"role": "assistant", "content": "z" * 400}]] * 100
        assert cf.pack_many(batch, target_context_tokens=60, threads=2) == [
            cf.pack_handoff(m, target_context_tokens=60) for m in batch
        ]


def test_an_index_that_raises_is_not_a_json_value(backend: str) -> None:
    class Broken:
        def __index__(self) -> int:
            raise ValueError("no")

    with pytest.raises(cf.MessageTypeError, match=r"field 'content': expected a JSON value .*, got Broken"):
        cf.message_tokens({"role": "user", "content": [Broken()]})


class _Stop(BaseException):
    """Neither an ``Exception`` nor one of Python's own: what only a bare ``except`` takes."""


class _RaisingKey:
    """A key that hashes as ``name`` does, so a lookup of ``name`` compares it; the compare
    raises ``error`` once armed (not while the dict is built)."""

    armed = False

    def __init__(self, name: str, error: BaseException) -> None:
        self.name, self.error = name, error

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        if _RaisingKey.armed:
            raise self.error
        return False


class _RaisingIndex:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __index__(self) -> int:
        raise self.error


_READERS: dict[str, Callable[[list[Any]], object]] = {
    "message_tokens": lambda ms: [cf.message_tokens(m) for m in ms],
    "tokens_of": cf.tokens_of,
    "message_tokens_array": cf.message_tokens_array,
    "window_start": lambda ms: cf.window_start(ms, token_budget=30),
    "pack_handoff": lambda ms: cf.pack_handoff(ms, target_context_tokens=30),
    "pack_handoff under budget": lambda ms: cf.pack_handoff(ms, target_context_tokens=2_000),
    "pack_many": lambda ms: cf.pack_many([ms] * 3, target_context_tokens=30),
    "custom estimator": lambda ms: cf.pack_handoff(ms, target_context_tokens=30, estimate_tokens=len),
}


def _with_raising_key(name: str, error: BaseException) -> list[Any]:
    # The newest message, which every reader reads.
    return [*_conversation(6), {_RaisingKey(name, error): "?", "role": "user", "content": "where is it"}]


@pytest.mark.parametrize("reader", sorted(_READERS))
@pytest.mark.parametrize("error", [KeyboardInterrupt("stop"), SystemExit(3), _Stop(), ValueError("no")], ids=repr)
@pytest.mark.parametrize("name", ["role", "content"])
def test_a_key_whose_compare_raises_raises_through_every_reader(
    backend: str, reader: str, error: BaseException, name: str
) -> None:
    """A lookup that raises is no missing key: the compare's exception comes out of the
    call, as ``dict.get`` raises it (not a "missing" error, not a result without the key)."""
    messages = _with_raising_key(name, error)
    with pytest.raises(type(error)) as raised:
        _RaisingKey.armed = True
        try:
            _READERS[reader](messages)
        finally:  # before pytest reads the dict for its report
            _RaisingKey.armed = False
    assert raised.value is error


@pytest.mark.parametrize("estimate", [None, "custom"])
def test_int_and_float_subclasses_are_read_through_their_storage(backend: str, estimate: str | None) -> None:
    """As ``json.dumps`` reads them: an int or float subclass's own methods never run
    (a huge int is written as the double nearest it, past a double's range ``null``)."""
    values = [7, -(2**53) - 1, 2**70, 10**400, -(10**400), 0.5, -1e-7, 1e21]
    texts: list[str] = []
    counter = None if estimate is None else (lambda text: len(texts.append(text) or text))
    for plain in values:
        liar = LyingFloat(plain) if isinstance(plain, float) else LyingInt(plain)
        got = cf.message_tokens({"role": "user", "content": [{"n": liar}]}, estimate_tokens=counter)
        want = cf.message_tokens({"role": "user", "content": [{"n": plain}]}, estimate_tokens=counter)
        assert got == want, plain
    assert texts[::2] == texts[1::2]


@pytest.mark.parametrize("estimate", [None, "custom"])
def test_a_block_type_subclass_is_read_through_its_storage_in_provider_sizing(
    backend: str, estimate: str | None
) -> None:
    """Provider sizing tells an image block by its ``type``: a str subclass (whose hash
    and compare lie) is read as the text it holds."""
    counter = None if estimate is None else len
    image = [{"type": "image", "source": {"data": "x" * 4_000}}]
    lying = [{"type": LyingStr("image"), "source": {"data": "x" * 4_000}}]
    got, want = (
        cf.message_tokens({"role": "user", "content": c}, estimate_tokens=counter, sizing="provider", image_tokens=99)
        for c in (lying, image)
    )
    assert got == want < 200


def test_pack_many_notes_the_transcript_a_raised_exception_came_from(backend: str) -> None:
    """A caller's exception raised while a transcript is read carries the note naming the
    transcript, as packing's own errors do; an interrupt carries none (it is no
    transcript's fault)."""
    error = ValueError("compare")
    transcripts = [_conversation(4), [*_conversation(4), {_RaisingKey("content", error): 1, "role": "user"}]]
    _RaisingKey.armed = True
    try:
        with pytest.raises(ValueError) as raised:
            cf.pack_many(transcripts, target_context_tokens=30)
    finally:
        _RaisingKey.armed = False
    assert raised.value is error
    assert error.__notes__ == ["in transcript 1"]

    def interrupted(text: str) -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stopped:
        cf.pack_many(transcripts[:1], target_context_tokens=30, estimate_tokens=interrupted)
    assert not hasattr(stopped.value, "__notes__")


def test_what_an_estimator_catches_stays_caught(backend: str) -> None:
    """A call made by an estimator raises what its own reading raised; once the estimator
    has caught it, the outer call does not raise it again."""
    hostile = {_RaisingKey("role", ValueError("inner")): "?", "role": "user", "content": "x"}

    def estimator(text: str) -> int:
        try:
            cf.message_tokens(hostile)
        except ValueError:
            return len(text)
        raise AssertionError("the inner call did not raise")

    messages = _conversation(6)
    _RaisingKey.armed = True
    try:
        pack = cf.pack_handoff(messages, target_context_tokens=300, estimate_tokens=estimator)
    finally:
        _RaisingKey.armed = False
    assert pack == cf.pack_handoff(messages, target_context_tokens=300, estimate_tokens=len)


@pytest.mark.parametrize("reader", sorted(_READERS))
@pytest.mark.parametrize("error", [KeyboardInterrupt("stop"), SystemExit(3), _Stop()], ids=repr)
def test_an_interrupt_in_an_index_raises_through_every_reader(backend: str, reader: str, error: BaseException) -> None:
    """A number's ``__index__`` that fails with an ``Exception`` makes it no JSON value
    (above); an interrupt (Ctrl-C in it, ``sys.exit``) is no answer about the value and
    stops the call."""
    number = _RaisingIndex(error)
    messages: list[Any] = [*_conversation(6), {"role": "user", "content": [{"type": "x", "n": number}]}]
    with pytest.raises(type(error)) as raised:
        _READERS[reader](messages)
    assert raised.value is error


def _as_plain(value: Any) -> Any:
    """The built-in value a (possibly lying) subclass holds, all the way down."""
    if isinstance(value, dict):
        return {str.__str__(k) if isinstance(k, str) else k: _as_plain(v) for k, v in dict.items(value)}
    if isinstance(value, list):
        return [_as_plain(v) for v in list.copy(value)]
    if isinstance(value, str):
        return str.__str__(value)
    return value


def _lying_transcript() -> list[Any]:
    calls = [{"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]
    return LyingList(
        [
            LyingDict({"role": LyingStr("system"), "content": "rules"}),
            {"role": "user", "content": LyingList([LyingDict({"type": "text", "text": LyingStr("find it " * 40)})])},
            LyingDict({"role": "assistant", "content": None, "tool_calls": LyingList([LyingDict(c) for c in calls])}),
            {"role": "tool", "tool_call_id": "c1", "content": LyingStr("found " * 60)},
            defaultdict(lambda: "made up", {"role": "user", "content": LyingStr("now fix it")}),
        ]
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_subclasses_are_read_through_their_storage(backend: str, threads: int) -> None:
    """Lying ``get``, ``__iter__``, ``__len__``, ``__eq__``, ``startswith`` … change nothing:
    every result equals the one for the plain values the subclasses hold, and a
    ``defaultdict`` gains no key."""
    lying = _lying_transcript()
    plain = _as_plain(lying)
    assert cf.tokens_of(lying) == cf.tokens_of(plain)
    assert [cf.handoff_line(m) for m in list.copy(lying)] == [cf.handoff_line(m) for m in plain]
    for budget in (60, 150, 10_000):
        got, want = (cf.pack_many([t] * 40, target_context_tokens=budget, threads=threads)[0] for t in (lying, plain))
        assert (got.kept, got.dropped, got.tokens, got.fits, got.note) == (
            want.kept,
            want.dropped,
            want.tokens,
            want.fits,
            want.note,
        )
        originals = list.copy(lying)
        returned = [m for m in got.messages if any(m is o for o in originals)]
        assert [id(m) for m in returned] == [id(originals[k]) for k in got.kept]
    assert set(dict.keys(list.copy(lying)[4])) == {"role", "content"}


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_list_subclass_is_read_through_its_storage(backend: str, threads: int) -> None:
    # The batch was copied with list(), which runs the subclass's own __iter__: one that
    # yields nothing gave no results for two transcripts, with no error.
    messages = [{"role": "user", "content": "a " * 300}, {"role": "user", "content": "do it"}]
    body = json.dumps({"messages": messages}).encode()
    packs = cf.pack_many(LyingList([messages, messages]), target_context_tokens=100, threads=threads)
    assert packs == cf.pack_many([messages, messages], target_context_tokens=100, threads=threads)
    packed = cf.pack_requests(LyingList([body, body]), target_context_tokens=100, threads=threads)
    assert packed == cf.pack_requests([body, body], target_context_tokens=100, threads=threads)
    systems = LyingList(["s1", "s2"])
    with_systems = cf.pack_many([messages, messages], systems=systems, target_context_tokens=100, threads=threads)
    assert with_systems == cf.pack_many([messages, messages], systems=["s1", "s2"], target_context_tokens=100)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_key_that_hashes_elsewhere_is_not_found(backend: str, threads: int) -> None:
    """Keys are found as ``dict.get`` finds them: a str subclass equal to "role" whose hash
    differs is not the role, on both backends and both batch paths."""
    odd = [{"role": "user", "content": "hi"}, {OddHashKey("role"): "user", "content": "hello"}]
    with pytest.raises(cf.MessageTypeError, match=r"^message 1, field 'role': missing\n"):
        cf.pack_many([odd] * 40, target_context_tokens=1_000, threads=threads)
    lost_content = [{"role": "user", OddHashKey("content"): "x" * 400}]
    assert cf.tokens_of(lost_content) == cf.tokens_of([{"role": "user"}])


class _ComparingMeta(type):
    """A metaclass that defines ``__eq__`` (so its classes have no hash) and raises in it."""

    def __eq__(cls, other: object) -> bool:
        raise RuntimeError("a metaclass's __eq__ ran")

    __hash__ = None  # type: ignore[assignment]


class _OddStr(str, metaclass=_ComparingMeta):
    pass


class _OddInt(int, metaclass=_ComparingMeta):
    pass


class _OddList(list, metaclass=_ComparingMeta):  # type: ignore[type-arg]
    pass


class _OddDict(dict, metaclass=_ComparingMeta):  # type: ignore[type-arg]
    pass


def test_values_whose_metaclass_compares_are_read_as_what_they_hold(backend: str) -> None:
    """A value's type is told apart by identity, never hashed or compared: the reference
    hashed it (``type(v) in`` a frozenset), a raw ``TypeError: unhashable type`` for a
    class whose metaclass defines ``__eq__``, and compared an edit's type with ``==``,
    which ran that ``__eq__``."""
    odd = [
        _OddDict(role=_OddStr("user"), content=_OddStr("hello there")),
        {"role": "assistant", "content": _OddList([{"type": "text", "text": "x", "n": _OddInt(3)}])},
    ]
    plain = [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": [{"type": "text", "text": "x", "n": 3}]},
    ]
    assert cf.tokens_of(odd) == cf.tokens_of(plain)
    assert cf.tokens_of(_OddList(odd)) == cf.tokens_of(plain)
    packed, want = (cf.pack_handoff(m, target_context_tokens=9) for m in (odd, plain))
    assert (packed.kept, packed.tokens, packed.note) == (want.kept, want.tokens, want.note)
    # A custom estimator is handed the content as JSON text, written from these values.
    seen: list[list[str]] = [[], []]
    for texts, messages in zip(seen, (odd, plain), strict=True):
        cf.tokens_of(messages, estimate_tokens=lambda text, texts=texts: texts.append(text) or 1)
    assert seen[0] == seen[1] and any('"n":3' in text for text in seen[0])

    class OddEdit(cf.ClearToolUses, metaclass=_ComparingMeta):
        pass

    with pytest.raises(
        cf.ArgumentTypeError, match="edits\\[0\\] must be a ClearToolUses or ClearThinking, got OddEdit"
    ):
        cf.pack_handoff(plain, target_context_tokens=9, edits=[OddEdit()])


class _ClaimsToBeAList:
    """Not a list, though its ``__class__`` says so (``isinstance(x, list)`` is True)."""

    __class__ = property(lambda self: list)  # type: ignore[assignment]

    def __iter__(self) -> Iterator[Any]:
        return iter([{"type": "text", "text": "x"}])

    def __len__(self) -> int:
        return 1


def test_an_object_claiming_to_be_a_list_is_read_as_what_it_is(backend: str) -> None:
    """Both backends read a value by its type, not by what its ``__class__`` claims: the
    reference took such an object for a list and failed inside ``list``'s own methods
    (a raw ``TypeError``), natively the batch did."""
    fake = _ClaimsToBeAList()
    assert isinstance(fake, list)
    user = {"role": "user", "content": "hi"}
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: cf.pack_handoff(fake, target_context_tokens=100), "messages: expected a list, got _ClaimsToBeAList"),
        (
            lambda: cf.pack_handoff(
                [{"role": "user", "content": fake}], target_context_tokens=100, edits=[cf.ClearThinking()]
            ),
            "message 0, field 'content': expected str, list or None, got _ClaimsToBeAList",
        ),
        (
            lambda: cf.tokens_of([user, {"role": "assistant", "content": "", "tool_calls": fake}]),
            "message 1, field 'tool_calls': expected list or None, got _ClaimsToBeAList",
        ),
        # A batch that is no list is iterated: its one item is no transcript.
        (lambda: cf.pack_many(fake, target_context_tokens=100), "messages: expected a list, got dict"),
    ]
    for call, words in cases:
        with pytest.raises(cf.MessageTypeError) as raised:
            call()
        assert str(raised.value) == words


class _ClearsOnCompare:
    """A key that hashes as "role" does, so a lookup of "role" compares it: the compare
    empties ``victim`` once set (and says it is not "role")."""

    def __init__(self) -> None:
        self.victim: list[Any] = []

    def __hash__(self) -> int:
        return hash("role")

    def __eq__(self, other: object) -> bool:
        self.victim.clear()
        return False


class _RaisesWhenCompared(str):
    """A block key that reads as "zz" and hashes as ``like`` does, so a lookup of
    ``like`` compares it, and the compare raises ``raised``."""

    def __new__(cls, like: str, raised: type[Exception]) -> _RaisesWhenCompared:
        key = str.__new__(cls, "zz")
        key.like, key.raised = like, raised  # type: ignore[attr-defined]
        return key

    def __hash__(self) -> int:
        return hash(self.like)  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        raise self.raised("a block key's __eq__ ran")  # type: ignore[attr-defined]


# StopIteration too: raised in a generator the reference read the blocks with, it became
# a RuntimeError (PEP 479).
@pytest.mark.parametrize("raised", [LookupError, StopIteration])
@pytest.mark.parametrize("tail", ["", " ", "  x", "x", "\U0001f600"])
@pytest.mark.parametrize("length", [78, 79, 80, 81])
@pytest.mark.parametrize("where", ["same block", "next block"])
def test_a_note_line_reads_a_block_only_while_it_has_room_on_both_backends(
    length: int, tail: str, where: str, raised: type[Exception]
) -> None:
    """A note line shows 80 UTF-16 units of a message's texts: natively it stops reading
    blocks there, and the reference looked up "text" and "content" in every block, so a
    block key whose compare raises, past that point, raised on the reference alone."""
    native_required()
    first = {"type": "text", "text": "w" * length + tail}
    blocks = [first] if where == "same block" else [first, {"type": "text", "text": "more"}]
    blocks[-1][_RaisesWhenCompared("content", raised)] = 1
    message = {"role": "assistant", "content": blocks}
    seen = []
    for impl in (cf._native, cf.reference):
        with _backend.using(impl):
            try:
                seen.append(cf.handoff_line(message))
            except raised as exc:
                seen.append(f"raised {exc}")
    assert seen[0] == seen[1]


class _ClearsOnIndex:
    """A number whose ``__index__`` empties ``victim`` once set."""

    def __init__(self) -> None:
        self.victim: list[Any] = []

    def __index__(self) -> int:
        self.victim.clear()
        return 7


@pytest.mark.parametrize("where", ["key", "number"])
@pytest.mark.parametrize("budget", [60, 100_000])
def test_python_code_run_while_reading_does_not_reach_the_result(backend: str, where: str, budget: int) -> None:
    """With no estimator, reading a message may still run Python code (a key's ``__eq__``,
    a number's ``__index__``) that empties the list, freeing messages nothing else holds:
    the result comes from the list as the call began, its messages alive."""
    messages: list[Any] = _conversation(30)
    meddler = _ClearsOnCompare() if where == "key" else _ClearsOnIndex()
    if where == "key":  # first, so a lookup of "role" meets it before the real key
        messages.append({meddler: "?", "role": "user", "content": [{"type": "x", "n": 1}]})
    else:
        messages.append({"role": "user", "content": [{"type": "x", "n": meddler}]})
    meddler.victim = messages
    copies = [dict(m) for m in messages]
    pack = cf.pack_handoff(messages, target_context_tokens=budget)
    assert messages == []
    kept = [m for m in pack.messages if not (pack.note is not None and m.get("content") is pack.note)]
    assert kept == [copies[i] for i in pack.kept]
    plain = [*copies[:-1], {"role": "user", "content": [{"type": "x", "n": 7 if where == "number" else 1}]}]
    want = cf.pack_handoff(plain, target_context_tokens=budget)
    assert (pack.kept, pack.tokens, pack.fits, pack.note) == (want.kept, want.tokens, want.fits, want.note)


class _ChangesPartOnIndex:
    """A number whose ``__index__`` changes the content part holding it, as ``change``
    says: a key popped and put back (the same contents, a new order), one taken out, or
    one added."""

    def __init__(self, change: str) -> None:
        self.change = change
        self.part: dict[str, Any] = {}

    def __index__(self) -> int:
        part, change = self.part, self.change
        if change.startswith("moved"):
            part["text"] = part.pop("text")
        elif change == "taken out":
            del part["type"]
        elif change == "added":
            part["extra"] = 1
        return 7


_PART_CHANGES = {
    # The text, read already, moved to the end: read twice (Python's iteration raises).
    "moved back": (["type", "text", "n"], 0, "dictionary keys changed during iteration"),
    # The same after two moves that leave the dict's entry table full: moving it once
    # more rebuilds the table, which passes the text over, unread, on either path.
    "moved back, table rebuilt": (["type", "text", "n"], 2, "dictionary keys changed during iteration"),
    "taken out": (["type", "text", "n"], 0, "dictionary changed size during iteration"),
    "added": (["type", "text", "n"], 0, "dictionary changed size during iteration"),
}


class _Part(dict[str, Any]):
    pass


def _sized(messages: list[Any], call: str, sizing: str) -> int:
    if call == "pack_handoff":
        return cf.pack_handoff(messages, target_context_tokens=10**6, sizing=sizing).tokens
    if call == "pack_many":
        return cf.pack_many([messages], target_context_tokens=10**6, sizing=sizing, threads=1)[0].tokens
    return cf.tokens_of(messages, sizing=sizing)


@pytest.mark.parametrize("call", ["pack_handoff", "pack_many", "tokens_of"])
@pytest.mark.parametrize("change", [*_PART_CHANGES, "moved ahead"])
@pytest.mark.parametrize("container", [dict, _Part], ids=["dict", "dict subclass"])
def test_a_dict_changed_while_it_is_read_raises_as_pythons_iteration_does(
    backend: str, call: str, change: str, container: type
) -> None:
    """Python code run while a message is read (a number's ``__index__``) that changes a
    dict being walked: what Python's own iteration raises is raised, and for an entry
    passed over too (helper-79 found the native count taking the text twice, 2,020
    tokens for 1,018, and the reference passing it over; helper-81 a dict subclass the
    reference walked a copy of). A change the walk reads whole (the text, not reached
    yet, moved to the end) is no error."""
    meddler = _ChangesPartOnIndex(change)
    keys, moves, error = _PART_CHANGES.get(change, (["type", "n", "text"], 0, None))
    values = {"type": "text", "text": "L" * 4_000, "n": meddler}
    part = meddler.part = container((key, values[key]) for key in keys)
    for _ in range(moves):
        part["text"] = part.pop("text")
    messages = [{"role": "user", "content": [part]}, {"role": "user", "content": "go"}]
    if error is None:
        plain = [{"role": "user", "content": [{**values, "n": 7}]}, messages[1]]
        assert _sized(messages, call, "seed") == cf.tokens_of(plain)
    else:
        with pytest.raises(RuntimeError, match=f"^{error}"):
            _sized(messages, call, "seed")


def test_windowed_reads_the_transcript_once(backend: str) -> None:
    """``windowed`` finds its start and slices at it on one reading of the transcript: an
    estimator that empties the caller's list mid-call changes nothing it returns (the
    slice was taken from the caller's list once the start was found: an empty result)."""
    messages = _conversation(40)
    read = list(messages)

    def estimate(text: str) -> int:
        messages.clear()
        return len(text) // 4

    kept = cf.windowed(messages, window=8, estimate_tokens=estimate)
    want = cf.windowed(read, window=8, estimate_tokens=lambda text: len(text) // 4)
    assert messages == [] and kept == want and kept and all(any(m is r for r in read) for m in kept)


def test_assemble_compacted_reads_the_transcript_once(backend: str) -> None:
    """``assemble_compacted`` finds the tail and the directive and copies them on one
    reading of the transcript: a key's ``__eq__``, run as a message's role is looked up,
    that empties the caller's list changes nothing it returns."""
    messages: list[Any] = _conversation(12)
    meddler = _ClearsOnCompare()
    messages[9] = {meddler: "?", **messages[9]}  # first, so a lookup of "role" meets it
    read = list(messages)
    meddler.victim = messages
    out = cf.assemble_compacted("sys", messages, "note", 6)
    assert messages == []
    want = cf.assemble_compacted("sys", read, "note", 6)
    assert out == want and len(out) > 2


class _GivesACompactionOnCompare:
    """A key that hashes as ``like`` does, so a lookup of ``like`` compares it: each
    compare after the first gives ``victim`` an Anthropic compaction block for content
    (and says the key is not ``like``)."""

    def __init__(self, like: str, victim: dict[str, Any]) -> None:
        self.like, self.victim = like, victim
        self.compares = 0

    def __hash__(self) -> int:
        return hash(self.like)

    def __eq__(self, other: object) -> bool:
        self.compares += 1
        if self.compares > 1:
            self.victim["content"] = [{"type": "compaction", "content": "all so far: " + "s " * 40}]
        return False


def _agent_run(n: int) -> list[dict[str, Any]]:
    # One request, then the agent's turns: every role back to it is read to find it.
    return [{"role": "user", "content": "the request"}] + [
        {"role": "assistant", "content": f"step {i} " * 40} for i in range(1, n)
    ]


def _compacted_mid_call(like: str, victim: int, meddler: int, first: bool) -> tuple[list[dict[str, Any]], Any]:
    messages = _agent_run(24)
    key = _GivesACompactionOnCompare(like, messages[victim])
    # First, or after the role (a walk over the message has then read the role).
    role, *rest = messages[meddler].items()
    messages[meddler] = dict([(key, "?"), role, *rest] if first else [role, (key, "?"), *rest])
    return messages, key


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("like", ["role", "content"])
@pytest.mark.parametrize("meddler", [2, 12, 20])
@pytest.mark.parametrize("victim", [1, 5, 11, 17, 22])
def test_a_compaction_a_key_compare_makes_mid_call_is_found_as_the_reference_finds_it(
    victim: int, meddler: int, like: str, first: bool
) -> None:
    """Natively the fold remembers whether each message's content is a list as it reads
    its role, so the check for a provider compaction skips the rest: a key's ``__eq__``
    (run as a role or content is looked up) that turns a message read before into a
    compaction leaves what was read before stale, and the compaction is found as the
    reference finds it; nor does reading a role look up a content the reference does not
    (a compare more, which here makes a compaction the reference never sees)."""
    native_required()
    budget = sum(cf.message_tokens(m) for m in _agent_run(24)) // 3
    # (With the shape named, nothing reads every message to find one before the fold.)
    options = cf.PackOptions(target_context_tokens=budget, shape="openai")
    seen = []
    for impl in (cf._native, cf.reference):
        messages, key = _compacted_mid_call(like, victim, meddler, first)
        pack = impl.pack_handoff(messages, options, {})
        seen.append((pack.kept, pack.tokens, pack.note, key.compares))
    assert seen[0] == seen[1]


_MEDDLE_IN_A_FRESH_INTERPRETER = """
    import gc, sys
    import contextfold as cf

    reused = []

    def meddle(victim):
        # Frees the messages nothing else holds, runs native code (which would take
        # references to a stale snapshot's items) and hands the freed blocks back out.
        victim.clear()
        cf.tokens_of([])
        reused.extend({} for _ in range(300))

    def conversation(n, last=None):
        out = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " * 20} for i in range(n)]
        return out if last is None else [*out, last]

    def check(ran):
        counts = {sys.getrefcount(d) for d in reused}
        assert len(counts) <= 1, counts  # a dict given a stray reference or release
        reused.clear()
        return ran
"""


def _meddle(script: str) -> None:
    """Runs ``script`` after the meddling helpers, in a fresh interpreter under the debug
    allocator (freed memory reads as garbage there); it must print ``ok``."""
    code = textwrap.dedent(_MEDDLE_IN_A_FRESH_INTERPRETER) + textwrap.dedent(script)
    env = {**os.environ, "PYTHONMALLOC": "debug"}
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_a_finaliser_emptying_the_list_while_the_result_is_built() -> None:
    """The collector may run a finaliser on any allocation, also while the result is
    built, after the messages were read without references (see the native ``snapshot``
    module): the finaliser empties the list, calls contextfold and reuses the freed
    memory. At every collector threshold, some run lands inside the call."""
    _meddle("""
        class Finaliser:
            def __init__(self, victim):
                self.victim, self.cycle = victim, self
            def __del__(self):
                meddle(self.victim)
                during.append(in_call)

        during, in_call = [], False
        for budget in (100, 150, 10**6):
            for threshold in range(1, 80):
                messages = conversation(200)
                expected = [dict(m) for m in messages]
                gc.collect()
                gc.set_threshold(threshold)
                for _ in range(3):
                    Finaliser(messages)
                in_call = True
                pack = cf.pack_handoff(messages, target_context_tokens=budget)
                in_call = False
                gc.set_threshold(700)
                kept = [m for m in pack.messages if m.get("content") is not pack.note]
                assert kept == [expected[i] for i in pack.kept], (budget, threshold)
                check(None)
        assert any(during), "no finaliser ran inside a call"
        print("ok")
    """)


def test_python_code_run_while_a_batch_error_is_noted() -> None:
    """A malformed transcript in ``pack_many`` gets a note naming it, which is Python code:
    a profiler hook there empties the transcript, calls contextfold and reuses the freed
    memory; the error still comes out whole."""
    _meddle("""
        victim = None

        def profiler(frame, event, arg):
            if event == "call" and frame.f_code.co_name == "add_note" and victim is not None:
                sys.setprofile(None)
                meddle(victim)

        for bad in ({"content": "x"}, {"role": "user", "content": 5}, {"role": "user", "tool_calls": 3}):
            victim = conversation(50, bad)
            sys.setprofile(profiler)
            try:
                cf.pack_many([victim], target_context_tokens=10**6, threads=1)
            except cf.MessageTypeError as error:
                assert error.__notes__ == ["in transcript 0"], error.__notes__
            else:
                raise AssertionError(bad)
            finally:
                sys.setprofile(None)
            assert victim == [] and check(True)
        print("ok")
    """)


class _InterruptedNaming(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise KeyboardInterrupt


class _InterruptingBody(metaclass=_InterruptedNaming):
    """No body: the error converting it names its type, and naming it is interrupted (the
    caller's own code, a metaclass's, is the one thing a conversion runs: a str or bytes
    subclass is read as stored)."""


def test_ctrl_c_while_a_body_is_converted_stops_the_batch(backend: str) -> None:
    # An exception converting one body is that body's outcome; an interrupt is not an
    # exception of the body's and stops the batch (it was kept as a result, and the call
    # returned normally).
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    bodies = [good, _InterruptingBody(), good]
    with pytest.raises(KeyboardInterrupt):
        cf.pack_requests(bodies, target_context_tokens=100)
    assert isinstance(cf.pack_requests([good, 3, good], target_context_tokens=100)[1], TypeError)  # type: ignore[list-item]


def test_a_batch_shortened_during_the_call_changes_no_result(backend: str) -> None:
    # The estimator empties the caller's batch while it is being packed: the call packs
    # the batch as it was when it began (natively it returned a silent prefix).
    batch = [_conversation(6) for _ in range(5)]
    original = list(batch)

    def estimate(text: str) -> int:
        del batch[1:]
        return len(text) // 4

    packs = cf.pack_many(batch, target_context_tokens=10**6, estimate_tokens=estimate)
    assert len(batch) == 1 and len(packs) == 5
    assert [p.messages for p in packs] == original


def _edits_hold_while_another_thread_meddles(
    runs: int, pack: Callable[[list[list[dict[str, Any]]]], list[cf.HandoffPack]]
) -> None:
    """Packs ``runs`` transcripts from ``_results_in_one_message`` with ``pack`` while
    another thread puts a text block at the front of each one's result list and takes it
    out, over and over: it runs whenever the packing thread releases the GIL, so each list
    is read with or without it. Each pack must clear ``a`` and keep ``b`` whole."""
    made = [_results_in_one_message() for _ in range(runs)]
    stop = threading.Event()
    aside = {"type": "text", "text": "aside"}

    def meddle() -> None:
        while not stop.is_set():
            for _, blocks in made:
                blocks.insert(0, aside)
            for _, blocks in made:
                del blocks[0]

    thread = threading.Thread(target=meddle)
    thread.start()
    try:
        packs = pack([messages for messages, _ in made])
    finally:
        stop.set()
        thread.join()
    planned = [("a", "[cleared]"), ("b", "BBBBBBBBB")]
    for packed in packs:
        assert packed.kept == [0, 1, 2, 3, 4]
        blocks = [(b.get("tool_use_id"), b.get("content", b.get("text"))[:9]) for b in packed.messages[2]["content"]]
        assert blocks in (planned, [(None, "aside"), *planned])


def _toggle_front(blocks: list[Any], aside: dict[str, Any]) -> None:
    """Puts ``aside`` at the front of ``blocks``, or takes it out when it is there."""
    if blocks and blocks[0] is aside:
        del blocks[0]
    else:
        blocks.insert(0, aside)


class _TogglesOnCompare:
    """A key that hashes as "content" does, so each lookup of "content" in its dict
    compares it: the compare toggles ``aside`` at the front of ``blocks`` (and says the
    key is not "content")."""

    def __init__(self, blocks: list[Any], aside: dict[str, Any]) -> None:
        self.blocks, self.aside = blocks, aside

    def __hash__(self) -> int:
        return hash("content")

    def __eq__(self, other: object) -> bool:
        _toggle_front(self.blocks, self.aside)
        return False


class _TogglingKey(str):
    """A str key that hashes as "type" does, so a copy of its dict that inserts it after
    "type" compares the two, which runs its ``__eq__`` (a subclass's reflected compare goes
    first): that toggles ``aside`` at the front of ``blocks``."""

    blocks: list[Any]
    aside: dict[str, Any]

    def __hash__(self) -> int:
        return hash("type")

    def __eq__(self, other: object) -> bool:
        _toggle_front(self.blocks, self.aside)
        return False


class _TogglesOnIndex:
    """A number whose ``__index__`` toggles ``aside`` at the front of ``blocks``."""

    def __init__(self, blocks: list[Any], aside: dict[str, Any]) -> None:
        self.blocks, self.aside = blocks, aside

    def __index__(self) -> int:
        _toggle_front(self.blocks, self.aside)
        return 1


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("where", ["message", "block", "number"])
def test_a_key_changing_blocks_mid_call_does_not_move_an_edit(backend: str, batch: bool, where: str) -> None:
    """A key's ``__eq__`` is the caller's code, which a lookup or a dict copy runs even
    with chars/4: here it puts a text block at the front of the results or takes it out,
    run by each lookup of "content" in the results message, or by the copy of the result
    the edit clears (a number's ``__index__``, in the oldest message, does the same as
    that message is sized). The edits clear what they planned to, on the lists as they were read.
    Natively with chars/4 the edits read the lists in place, and the output was built
    after such code ran again: it cleared the text block and kept ``a`` whole, or cleared
    ``b``, which ``keep=1`` keeps. Now the edits plan again on copies when the caller's
    code ran while they planned, or could run as the output is built (a dict it copies
    has a key that is not an exact str)."""
    messages, results = _results_in_one_message()
    aside = {"type": "text", "text": "aside"}
    if where == "message":
        messages[2] = {_TogglesOnCompare(results, aside): "?", **messages[2]}
    elif where == "number":  # in a message the edits leave alone, sized after the results
        messages[0] = {
            "role": "user",
            "content": [{"type": "text", "text": "start", "n": _TogglesOnIndex(results, aside)}],
        }
    else:  # the result the edit clears, which the output copies: the key is compared then
        key = _TogglingKey("x")
        key.blocks, key.aside = [], aside  # the results once the dict is made
        results[0] = {**results[0], key: "?"}
        key.blocks = results
    edits = [cf.ClearToolUses(keep=1, trigger=10)]
    if batch:
        (pack,) = cf.pack_many([messages], target_context_tokens=2_500, edits=edits, threads=1)
    else:
        pack = cf.pack_handoff(messages, target_context_tokens=2_500, edits=edits)
    assert pack.kept == [0, 1, 2, 3, 4]
    planned = [("a", "[cleared]"), ("b", "BBBBBBBBB")]
    blocks = [(b.get("tool_use_id"), b.get("content", b.get("text"))[:9]) for b in pack.messages[2]["content"]]
    assert blocks in (planned, [(None, "aside"), *planned])


class _TogglingNameKey(_TogglingKey):
    """A :class:`_TogglingKey` that hashes as "name" does."""

    def __hash__(self) -> int:
        return hash("name")


@pytest.mark.parametrize("batch", [False, True])
def test_a_key_changing_calls_mid_call_does_not_move_an_edit(backend: str, batch: bool) -> None:
    """As above for a call's arguments (OpenAI shape, ``clear_tool_inputs=True``): a key
    in the ``function`` of the call the edit clears toggles a call at the front of the
    calls as the output copies that ``function``. Reading the call for the plan walks
    past that key without a lookup, so only the check of what the output copies sees it
    (natively the calls were built while the list changed: ``a`` came out twice)."""
    calls = [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": f'{{"path": "{i}"}}'}} for i in "ab"
    ]
    key = _TogglingNameKey("x")
    key.blocks, key.aside = [], {"id": "aside", "type": "function", "function": {"name": "x", "arguments": "{}"}}
    calls[0]["function"] = {**calls[0]["function"], key: "?"}
    key.blocks = calls
    messages = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "A" * 4_000},
        {"role": "tool", "tool_call_id": "b", "content": "B" * 4_000},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    edits = [cf.ClearToolUses(keep=1, trigger=10, clear_tool_inputs=True)]
    if batch:
        (pack,) = cf.pack_many([messages], target_context_tokens=2_500, edits=edits, threads=1)
    else:
        pack = cf.pack_handoff(messages, target_context_tokens=2_500, edits=edits)
    assert pack.kept == [0, 1, 2, 3, 4, 5]
    planned = [("a", "{}"), ("b", '{"path": "b"}')]
    out = [(c["id"], c["function"]["arguments"]) for c in pack.messages[1]["tool_calls"]]
    assert out in (planned, [("aside", "{}"), *planned])


@pytest.mark.usefixtures("offline_tiktoken")
def test_a_thread_changing_blocks_during_an_exact_count_does_not_move_an_edit(backend: str) -> None:
    """An exact count releases the GIL for a long text, so another thread runs in the
    middle of the call: the edits clear what they planned to on the lists as the call
    read them. The native build applied the planned block positions to the caller's list
    as it was when the output was built: it cleared the text block, or ``b`` (the result
    ``keep=1`` keeps), whenever the other thread had changed the list in between; the
    reference, which any thread may interrupt, did the same between deciding an edit and
    copying the message."""
    edits = [cf.ClearToolUses(keep=1, trigger=10)]
    _edits_hold_while_another_thread_meddles(
        20,
        lambda transcripts: [
            cf.pack_handoff(t, target_context_tokens=2_000, estimate_tokens="o200k_base", edits=edits)
            for t in transcripts
        ],
    )


# Natively with chars/4 no worker starts for these transcripts (each is packed with the
# GIL held), so that pair is not run.
@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize(
    ("backend_name", "estimate"), [("native", "o200k_base"), ("python", None), ("python", "o200k_base")]
)
def test_a_thread_changing_blocks_during_a_batch_does_not_move_an_edit(
    backend_name: str, estimate: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, for pack_many on two threads: its workers pack copies with the GIL
    released, and the output is built once they are done. The native build applied the
    planned block positions to the caller's lists as they were then."""
    switch_to(backend_name, monkeypatch)
    edits = [cf.ClearToolUses(keep=1, trigger=10)]
    # The reference counting exactly lets the meddler run out its switch interval at each
    # call into tiktoken: 400 transcripts took 12 s there, and 100 meet as much meddling.
    _edits_hold_while_another_thread_meddles(
        100 if (backend_name, estimate) == ("python", "o200k_base") else 400,
        lambda transcripts: cf.pack_many(
            transcripts, target_context_tokens=2_000, estimate_tokens=estimate, edits=edits, threads=2
        ),
    )


@contextlib.contextmanager
def _at_collections_while_held(items: list[Any], act: Callable[[Any], None]) -> Iterator[None]:
    """Runs ``act(item)`` once for each of ``items``, at the start of the first garbage
    collection that finds it held beyond the test's own references (so while packing reads
    or copies it), with the collector's threshold at 1 (a collection whenever tracked
    allocations outnumber frees since the last): what a finaliser or a ``gc`` callback can
    do mid-call. On 3.10 and 3.11 an allocation inside a native call can run one; later
    versions wait for the interpreter's loop."""

    def held(k: int) -> int:
        item = items[k]
        refs = sys.getrefcount(item)
        del item
        return refs

    base = max(held(k) for k in range(len(items)))
    done: set[int] = set()

    def collecting(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            for k in range(len(items)):
                if k not in done and held(k) > base:
                    done.add(k)
                    act(items[k])

    threshold = gc.get_threshold()
    gc.callbacks.append(collecting)
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(collecting)


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize(
    ("how", "estimate"),
    [
        # Not pack_handoff with chars/4: no collection lands while it holds a result list
        # (natively the collector is paused; the reference's copy allocates first).
        ("pack_handoff", "o200k_base"),
        ("pack_many, 1 thread", None),
        ("pack_many, 1 thread", "o200k_base"),
        ("pack_many, 2 threads", None),
        ("pack_many, 2 threads", "o200k_base"),
    ],
)
def test_code_a_collection_runs_mid_call_does_not_move_an_edit(backend: str, estimate: str | None, how: str) -> None:
    """A collection an allocation runs in the middle of a call (on 3.10 and 3.11) may run
    Python code that puts a text block at the front of a result list the call holds: the
    edits clear what they planned to on the lists as they read them. Natively, ``pack_many``'s
    workers extracted a message and then copied it, allocating between the two, so an edit
    planned on the arena was applied to a copy that held the block; chars/4 in place
    applied the planned positions to the caller's list as the output was built. One by
    one, each call follows 0 to 3 new lists, so the collections fall at each parity."""
    made = [_results_in_one_message() for _ in range(200)]
    aside = {"type": "text", "text": "aside"}
    edits = [cf.ClearToolUses(keep=1, trigger=10)]
    options = cf.PackOptions(target_context_tokens=2_000, estimate_tokens=estimate, edits=edits)
    transcripts = [messages for messages, _ in made]
    with _at_collections_while_held([results for _, results in made], lambda blocks: blocks.insert(0, aside)):
        if how == "pack_handoff":
            packs = []
            for k, messages in enumerate(transcripts):
                shift = [[] for _ in range(k % 4)]
                packs.append(cf.pack_handoff(messages, options=options))
                del shift
        else:
            packs = cf.pack_many(transcripts, options=options, threads=1 if how == "pack_many, 1 thread" else 2)
    planned = [("a", "[cleared]"), ("b", "BBBBBBBBB")]
    for packed in packs:
        blocks = [(b.get("tool_use_id"), b.get("content", b.get("text"))[:9]) for b in packed.messages[2]["content"]]
        assert blocks in (planned, [(None, "aside"), *planned])


@pytest.mark.usefixtures("offline_tiktoken")
def test_code_a_collection_runs_mid_batch_does_not_mix_a_transcript(backend: str) -> None:
    """A transcript is read once, as it was at some moment: natively, with edits, ``pack_many``'s
    workers copied each message as they read the transcript list item by item, and code a
    collection ran there could insert a message mid-reading (one read twice, the newest
    lost)."""
    transcripts = [_results_in_one_message()[0] for _ in range(200)]
    originals = [list(t) for t in transcripts]
    inserted = {"role": "user", "content": "inserted"}
    by_second = {id(t[1]): t for t in transcripts}
    with _at_collections_while_held([t[1] for t in transcripts], lambda m: by_second[id(m)].insert(0, inserted)):
        packs = cf.pack_many(
            transcripts,
            target_context_tokens=10**6,
            estimate_tokens="o200k_base",
            edits=[cf.ClearToolUses(keep=1, trigger=10)],
            threads=2,
        )
    for packed, before in zip(packs, originals, strict=True):
        roles = [m["role"] for m in packed.messages]
        assert roles in ([m["role"] for m in before], ["user", *[m["role"] for m in before]])
        assert packed.messages[-1]["content"] == "next"


# The reference counts exactly with tiktoken, which a fresh interpreter cannot load
# offline, so it runs with chars/4 only.
@pytest.mark.parametrize(
    ("backend_name", "estimate"), [("native", "None"), ("native", "'o200k_base'"), ("python", "None")]
)
def test_a_list_emptied_by_a_collection_as_it_is_copied_is_no_crash(backend_name: str, estimate: str) -> None:
    """Copying a list with CPython's own slice allocates after taking its length: on 3.10
    and 3.11 a collection run there that empties the list left the copy reading items that
    were gone (python/cpython#75348), a crash natively with an exact count."""
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import gc, os, sys
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import contextfold as cf
        results = [
            {{"type": "tool_result", "tool_use_id": "a", "content": "A" * 4_000}},
            {{"type": "tool_result", "tool_use_id": "b", "content": "B" * 4_000}},
        ]
        calls = [{{"type": "tool_use", "id": i, "name": "read", "input": {{}}}} for i in "ab"]
        messages = [{{"role": "user", "content": "start"}}, {{"role": "assistant", "content": calls}},
                    {{"role": "user", "content": results}}, {{"role": "assistant", "content": "done"}}]
        base = sys.getrefcount(results)
        emptied = []
        def collecting(phase, info):
            if phase == "start" and not emptied and sys.getrefcount(results) > base:
                emptied.append(True)
                results.clear()
        gc.callbacks.append(collecting)
        gc.set_threshold(1)
        for _ in range(50):
            pack = cf.pack_handoff(messages, target_context_tokens=2_000, estimate_tokens={estimate},
                                   edits=[cf.ClearToolUses(keep=1, trigger=10)])
        gc.set_threshold(700, 10, 10)
        content = pack.messages[2]["content"]
        assert all(isinstance(b, dict) for b in content), content
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("enabled", [True, False])
def test_packing_with_edits_leaves_the_collector_as_it_found_it(backend: str, enabled: bool) -> None:
    """Natively, chars/4 packing with edits holds collections off while it reads the
    caller's lists in place; afterwards, a pack or an error alike, the collector is on or
    off as it was."""
    messages, _ = _results_in_one_message()
    edits = [cf.ClearToolUses(keep=1, trigger=10)]
    found = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        cf.pack_handoff(messages, target_context_tokens=2_000, edits=edits)
        assert gc.isenabled() is enabled
        bad = len(messages)
        wanted = rf"^message {bad}, field 'content': expected str, list or None, got int$"
        with pytest.raises(cf.MessageTypeError, match=wanted) as info:
            cf.pack_handoff([*messages, {"role": "user", "content": 7}], target_context_tokens=2_000, edits=edits)
        assert (info.value.index, info.value.field) == (bad, "content")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if found else gc.disable)()


@pytest.mark.parametrize(
    ("backend_name", "site", "call"),
    [
        ("native", "batch_of", "cf.pack_many(batch, options=options)"),
        ("python", "batch_of", "cf.pack_many(batch, options=options)"),
        ("python", "__init__", "cf.pack_handoff(batch[0], options=options)"),
        ("native", "windowed", "cf.windowed(batch[0], window=8)"),
    ],
    ids=["pack_many-native", "pack_many-python", "pack_handoff-python", "windowed"],
)
def test_a_list_emptied_by_a_collection_as_a_call_takes_it_is_no_crash(backend_name: str, site: str, call: str) -> None:
    """``pack_many``'s batch (both backends) and the reference's transcript were taken
    with ``list.copy``, and ``windowed`` sliced the caller's list: each allocates after
    reading the length, and on 3.10 and 3.11 a collection run there that empties the list
    crashed the interpreter (CPython issue 75348). Here a ``gc`` callback empties the list at each collection run
    inside the function that takes it, with every list allocation made to collect."""
    if backend_name == "native":
        native_required()
    done = _run_isolated(
        f"""
        import gc, os, sys
        os.environ["CONTEXTFOLD_BACKEND"] = {backend_name!r}
        import contextfold as cf
        victim = []
        hoard = []
        def collecting(phase, info):
            if phase != "start":
                return
            hoard.append([[] for _ in range(100)])  # no free lists: each new list is allocated, and collects
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_code.co_name == {site!r} and "contextfold" in frame.f_code.co_filename:
                    for items in victim:
                        items.clear()
                    return
                frame = frame.f_back
        keep = []
        options = cf.PackOptions(target_context_tokens=50_000)
        for rep in range(400):
            batch = [[{{"role": "user", "content": "hi"}} for _ in range(40)] for _ in range(3)]
            victim[:] = [batch] if {site!r} == "batch_of" else [batch[0]]
            gc.callbacks.append(collecting)
            gc.set_threshold(1)
            try:
                keep.append([[] for _ in range(100)])
                keep.append([{{}} for _ in range(rep % 7)])  # moves where the collections fall
                {call}
            finally:
                gc.set_threshold(700, 10, 10)
                gc.callbacks.remove(collecting)
                hoard.clear()
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _call_with(name: str, arguments: Any = "{}") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


_CLAIMED_AT: dict[str, Callable[[], Any]] = {
    "message": lambda: claiming(dict),
    "role": lambda: {"role": claiming(str), "content": "x"},
    "content": lambda: {"role": "user", "content": claiming(str)},
    "part": lambda: {"role": "user", "content": [claiming(dict)]},
    "part type": lambda: {"role": "user", "content": [{"type": claiming(str), "text": "x"}]},
    "part number": lambda: {"role": "user", "content": [{"type": "x", "n": claiming(int)}]},
    "tool_use input": lambda: {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t", "input": claiming(dict)}],
    },
    "tool_result id": lambda: {"role": "user", "content": [{"type": "tool_result", "tool_use_id": claiming(str)}]},
    "call": lambda: {"role": "assistant", "content": None, "tool_calls": [claiming(dict)]},
    "call function": lambda: {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "function": claiming(dict)}],
    },
    "call name": lambda: _call_with(claiming(str)),
    "call arguments": lambda: _call_with("f", claiming(str)),
    "tool_call_id": lambda: {"role": "tool", "tool_call_id": claiming(str), "content": "x"},
    "item type": lambda: {"type": claiming(str), "call_id": "c", "output": "x"},
    "item call_id": lambda: {"type": "function_call_output", "call_id": claiming(str), "output": "x"},
}

_CLAIM_READERS: dict[str, Callable[[list[Any]], object]] = {
    **_READERS,
    "edits": lambda ms: cf.pack_handoff(ms, target_context_tokens=30, edits=[cf.ClearToolUses(), cf.ClearThinking()]),
    "provider sizing": lambda ms: cf.pack_handoff(ms, target_context_tokens=30, sizing="provider"),
    "exact counts": lambda ms: cf.pack_handoff(ms, target_context_tokens=30, estimate_tokens="o200k_base"),
    "windowed": lambda ms: cf.windowed(ms, window=4, token_budget=30),
    "assemble_compacted": lambda ms: cf.assemble_compacted("system", ms, "note", 2),
    "summary_chunks": lambda ms: cf.summary_chunks(ms, 30),
    "render_for_summary": cf.render_for_summary,
}


@pytest.mark.usefixtures("offline_tiktoken")
@pytest.mark.parametrize("newest", [True, False], ids=["newest", "oldest"])
@pytest.mark.parametrize("at", sorted(_CLAIMED_AT))
def test_a_value_claiming_a_builtin_type_is_read_as_what_it_is(at: str, newest: bool) -> None:
    """A message, or a value in it, whose ``__class__`` claims dict, str or int is read
    by its type on both backends, by every reader: refused with the index and field (or,
    where the call does not read it, passed over) alike. The reference took it for what
    it claimed and failed inside dict's, str's or int's own methods, a raw ``TypeError``
    where the native backend named the message; or raised where the native one passed."""
    from contextfold import reference

    native = native_required()
    history = _conversation(4)
    claimed = _CLAIMED_AT[at]()
    messages = [*history, claimed] if newest else [history[0], claimed, *history[1:]]
    for reader, read in _CLAIM_READERS.items():
        outcomes: list[object] = []
        for impl in (native, reference):  # the same objects to both: results compare equal
            with _backend.using(impl):
                try:
                    result = read(messages)
                    outcomes.append(("read", result.tolist() if hasattr(result, "tolist") else result))
                except (cf.MessageTypeError, cf.MessageValueError) as error:
                    outcomes.append((type(error).__name__, str(error), error.index, error.field))
        assert outcomes[0] == outcomes[1], reader
    assert messages == ([*history, claimed] if newest else [history[0], claimed, *history[1:]])


@pytest.mark.parametrize(
    "call",
    [
        lambda: cf.pack_handoff([], target_context_tokens=claiming(int)),
        lambda: cf.pack_handoff([], target_context_tokens=100, reserve_output_tokens=claiming(int)),
        lambda: cf.pack_handoff([], target_context_tokens=100, pinned=[claiming(int)]),
        lambda: cf.pack_handoff([], target_context_tokens=100, shape=claiming(str)),
        lambda: cf.pack_handoff([], target_context_tokens=100, summary=claiming(str)),
        lambda: cf.pack_handoff([], target_context_tokens=100, edits=claiming(list)),
        lambda: cf.ClearToolUses(keep=claiming(int)),
        lambda: cf.ClearToolUses(clear_tool_inputs=claiming(bool)),
        lambda: cf.ClearToolUses(exclude_tools=claiming(tuple)),
        lambda: cf.pack_many([], target_context_tokens=100, threads=claiming(int)),
    ],
    ids=["window", "reserve", "pin", "shape", "summary", "edits", "edit field", "edit flag", "edit tools", "threads"],
)
def test_an_option_claiming_a_builtin_type_is_refused_by_name(backend: str, call: Callable[[], object]) -> None:
    """An option whose ``__class__`` claims int, str, bool or a sequence is refused naming
    the option, not with that type's own ``TypeError`` about a descriptor (natively, a
    summary claiming str was dropped without a word, and a flag claiming bool accepted
    until the pack)."""
    with pytest.raises(cf.ArgumentError, match=r"^\w+(\.\w+| index)? must be"):
        call()


@pytest.mark.parametrize("where", ["system", "tools"])
def test_a_prompt_claiming_a_builtin_type_is_refused_by_name(backend: str, where: str) -> None:
    """``system=`` claiming str and ``tools=`` claiming list are refused by both backends
    as the field they are (the reference read past them, to a raw TypeError or an error
    naming a message's content)."""
    value = claiming(str if where == "system" else list)
    with pytest.raises(cf.MessageTypeError) as raised:
        cf.pack_handoff([{"role": "user", "content": "x"}], target_context_tokens=100, **{where: value})
    assert raised.value.field == where and str(raised.value).startswith(f"{where}: expected")


_EDGE_CALLS: dict[str, tuple[Callable[[], object], type[Exception]]] = {
    "estimate_tokens": (lambda: cf.estimate_tokens(claiming(str)), cf.MessageTypeError),
    "count_tokens": (lambda: cf.count_tokens(claiming(str), "o200k_base"), cf.MessageTypeError),
    "pack_request": (lambda: cf.pack_request(claiming(str), target_context_tokens=100), cf.ArgumentTypeError),
    "rank_by_count": (lambda: cf.rank_by_count(claiming(list)), cf.ArgumentTypeError),
    "canonical_path": (lambda: cf.canonical_path(claiming(str)), cf.ArgumentTypeError),
    "summary_chunks": (lambda: cf.summary_chunks(claiming(list)), cf.ArgumentTypeError),
    "CompactMemo": (lambda: cf.CompactMemo(note=claiming(str), covered_end=1), cf.ArgumentTypeError),
    "consolidation_metadata": (lambda: cf.consolidation_metadata(auto=claiming(dict)), cf.ArgumentTypeError),
    "set_task": (lambda: cf.WorkingMemory().set_task(claiming(str)), cf.ArgumentTypeError),
    "observe": (lambda: cf.WorkingMemory().observe("read", claiming(str)), cf.ArgumentTypeError),
    "SQLiteCodeMapStore": (lambda: cf.SQLiteCodeMapStore(claiming(str)), cf.ArgumentTypeError),
}


@pytest.mark.parametrize("name", sorted(_EDGE_CALLS))
def test_the_python_edges_refuse_a_value_claiming_a_builtin_type(backend: str, name: str) -> None:
    """The functions around the packers read their arguments by type too: each refused a
    value claiming str, list or dict with that type's own error (or, natively, another)."""
    call, error = _EDGE_CALLS[name]
    with pytest.raises(error, match=r"expected|must be"):
        call()


def test_a_row_is_read_as_a_mapping_only_when_it_is_one() -> None:
    """A stored row is a mapping or an object with fields: one whose ``__class__`` claims
    dict without being one is read by its attributes (it was an AttributeError), while a
    proxy that forwards a real mapping's ``get`` is still read through it."""
    marker = cf.consolidation_metadata()
    plain = claiming(dict)
    assert cf.last_consolidation_index([{"metadata": None}, plain]) == -1
    plain.metadata = marker
    assert cf.last_consolidation_index([{"metadata": None}, plain]) == 1

    class Proxy:
        """Forwards everything, ``__class__`` included, to the dict it wraps."""

        def __init__(self, wrapped: dict[str, Any]) -> None:
            object.__setattr__(self, "_wrapped", wrapped)

        __class__ = property(lambda self: type(self._wrapped))  # type: ignore[assignment]

        def __getattr__(self, name: str) -> Any:
            return getattr(self._wrapped, name)

    assert cf.last_consolidation_index([{"metadata": None}, Proxy({"metadata": marker})]) == 1
    assert cf.consolidated_facts_for([Proxy({"key": "codemap:src"})], ["src"]) != []
    assert cf.consolidation_marker_of({"metadata": claiming(str)}) is None


class _GrowsOnCompare:
    """A key that hashes as "content" does, so a lookup of "content" compares it: each
    compare appends another message like its own to ``victim`` (at most ``cap``)."""

    def __init__(self, victim: list[Any], cap: int = 500) -> None:
        self.victim, self.cap = victim, cap

    def __hash__(self) -> int:
        return hash("content")

    building = False  # the new message's own "content" key compares with its grower

    def __eq__(self, other: object) -> bool:
        if not _GrowsOnCompare.building and len(self.victim) < self.cap:
            _GrowsOnCompare.building = True
            try:
                self.victim.append({_GrowsOnCompare(self.victim, self.cap): 1, "role": "user", "content": "more"})
            finally:
                _GrowsOnCompare.building = False
        return False


def test_the_summariser_reads_the_transcript_once(backend: str) -> None:
    """``summary_chunks``, ``render_for_summary`` and ``summarize_transcript`` read the
    list once, when the call begins: a key whose compare appends a message while a
    message is read added to what they walked (endlessly, without the cap here)."""
    import asyncio

    def growing() -> list[Any]:
        messages: list[Any] = []
        _GrowsOnCompare.building = True
        messages.append({_GrowsOnCompare(messages): 1, "role": "user", "content": "hello"})
        _GrowsOnCompare.building = False
        return messages

    assert [len(chunk) for chunk in cf.summary_chunks(growing(), 10)] == [1]
    assert cf.render_for_summary(growing()).count("user:") == 1
    asked: list[str] = []

    async def complete(request: dict[str, Any]) -> str:
        asked.append(request["user"])
        return "noted"

    assert asyncio.run(cf.summarize_transcript(complete, growing(), budget=10)) == "noted"
    assert len(asked) == 1 and asked[0].count("user:") == 1


class _ShownOtherwise(str):
    __slots__ = ()

    def __format__(self, spec: str) -> str:
        return "something else"

    def __str__(self) -> str:
        return "something else"


def test_a_summary_subclass_is_read_by_the_text_it_holds(backend: str) -> None:
    """``summary=`` as a str subclass is the text it holds on both backends: the reference
    wrote it with an f-string (its own ``__format__``), natively its stored text."""
    messages = [
        {"role": "user", "content": "hi " * 50},
        {"role": "assistant", "content": "yo " * 50},
        {"role": "user", "content": "go"},
    ]
    pack = cf.pack_handoff(messages, target_context_tokens=60, summary=_ShownOtherwise("the real summary"))
    assert pack.note is not None and "the real summary" in pack.note and "something else" not in pack.note
    body = json.dumps({"messages": messages}).encode()
    packed = cf.pack_request(body, target_context_tokens=60, summary=_ShownOtherwise("the real summary"))
    assert b"the real summary" in packed.body and b"something else" not in packed.body


class _IteratesOtherwise(list):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[Any]:
        return iter([])


def test_a_list_subclass_argument_is_read_through_its_storage(backend: str) -> None:
    """Lists given as arguments are read as stored on both backends: the reference
    iterated ``rank_by_count``'s items and ``tools=`` by their own ``__iter__``."""
    assert cf.rank_by_count(_IteratesOtherwise(["a", "b", "a"])) == [("a", 2), ("b", 1)]
    with pytest.raises(cf.MessageTypeError, match=r"tools\[0\]: expected a dict, got str"):
        cf.tokens_of([{"role": "user", "content": "x"}], tools=_IteratesOtherwise(["no tool"]))
    with pytest.raises(cf.MessageTypeError, match=r"tools\[0\]: expected a dict, got str"):
        cf.pack_handoff([{"role": "user", "content": "x"}], target_context_tokens=100, tools=_IteratesOtherwise(["x"]))


async def _no_summary(messages: list[Any]) -> None:
    return None


_ASKED = {"role": "user", "content": "go"}


_BAD_EDGE_CALLS: dict[str, tuple[Callable[[], object], str]] = {
    "consolidated_area": (lambda: cf.consolidated_area(None), "key: expected str"),  # type: ignore[arg-type]
    "consolidated_key": (lambda: cf.consolidated_key(None), "area: expected str"),  # type: ignore[arg-type]
    "merge_consolidated": (lambda: cf.merge_consolidated("codemap:x", 5, "- a.py"), "prior: expected str"),  # type: ignore[arg-type]
    "consolidated_files": (lambda: cf.consolidated_files(None), "content: expected str"),  # type: ignore[arg-type]
    "area_of_path": (lambda: cf.area_of_path(None), "path: expected str"),  # type: ignore[arg-type]
    "areas_named_in": (lambda: cf.areas_named_in("run store", ["a", None]), r"areas\[1\]: expected str"),  # type: ignore[list-item]
    "volatile_tail str": (lambda: cf.volatile_tail("tests pass"), "sections must be an iterable"),
    "volatile_tail int": (lambda: cf.volatile_tail([5]), r"sections\[0\] must be a str or None"),  # type: ignore[list-item]
    "compact_tail_start": (lambda: cf.compact_tail_start(None, 1), "messages: expected a list"),  # type: ignore[arg-type]
    "last_consolidation_index": (lambda: cf.last_consolidation_index(None), "rows must be an iterable"),  # type: ignore[arg-type]
    "scope_to_consolidation": (lambda: cf.scope_to_consolidation(None), "rows must be an iterable"),  # type: ignore[arg-type]
    "render_for_summary": (lambda: cf.render_for_summary(None), "messages must be an iterable"),  # type: ignore[arg-type]
    "assemble_compacted prompt": (
        lambda: cf.assemble_compacted(None, [], "n", 0),
        "system_prompt must be a str or a list",
    ),  # type: ignore[arg-type]
    "assemble_compacted note": (lambda: cf.assemble_compacted("s", [], None, 0), "note must be a str"),  # type: ignore[arg-type]
    "consolidation_metadata": (
        lambda: cf.consolidation_metadata({"keep_from_id": 10**5000}),
        "keep_from_id is too long an int to write: an int of 16610 bits",
    ),
    "consolidated_facts_for": (lambda: cf.consolidated_facts_for(None, ["a"]), "facts must be an iterable"),  # type: ignore[arg-type]
    "build_working_transcript": (
        lambda: asyncio.run(cf.build_working_transcript(claiming(cf.WorkingTranscriptState), "s", _no_summary)),
        "state must be a WorkingTranscriptState",
    ),
    "compact_memo": (
        lambda: cf.still_in_working_context(cf.WorkingTranscriptState([_ASKED], claiming(cf.CompactMemo)), _ASKED),
        "compact_memo must be a CompactMemo",
    ),
    "consolidate at claiming": (
        lambda: cf.consolidate({"read": ["src/a.py", "src/b.py", "src/c.py"]}, at=claiming(datetime.datetime)),
        "at must be a datetime",
    ),
    "consolidate at": (
        lambda: cf.consolidate(
            {"read": ["src/a.py", "src/b.py", "src/c.py"]},
            at=datetime.datetime(9999, 12, 31, 23, tzinfo=datetime.timezone(datetime.timedelta(hours=-5))),
        ),
        "at is out of range in UTC",
    ),
}


@pytest.mark.parametrize("name", sorted(_BAD_EDGE_CALLS))
def test_the_code_map_and_compaction_edges_refuse_bad_arguments_by_name(backend: str, name: str) -> None:
    """Each was a raw AttributeError, TypeError, ValueError or OverflowError from deep
    inside (or, for a str of sections, one section a letter)."""
    call, words = _BAD_EDGE_CALLS[name]
    with pytest.raises(cf.ContextfoldError, match=words):
        call()


def test_facts_are_matched_against_every_area_of_an_iterator(backend: str) -> None:
    """``areas`` is read once: an iterator was used up by the first fact."""
    facts = [{"key": "codemap:a"}, {"key": "codemap:b"}]
    assert cf.consolidated_facts_for(facts, iter(["b", "a"])) == facts


def test_a_fold_assembles_from_the_messages_as_they_were_before_the_summariser_ran(backend: str) -> None:
    """``build_working_transcript`` reads the messages' roles before it awaits the
    summariser: a run that retagged the tail meanwhile silently lost it from the request
    (the tail was found again, after the await, from the changed roles)."""
    import asyncio

    convo = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i} " + "x" * 2_000} for i in range(100)]

    async def summarize(messages: list[Any]) -> str:
        for message in convo[60:]:
            message["role"] = "tool"
        return "the note"

    state = cf.WorkingTranscriptState(convo)
    out = asyncio.run(cf.build_working_transcript(state, "system", summarize))
    assert state.compact_memo is not None
    tail = convo[state.compact_memo.covered_end :]
    assert len(tail) == 40 and all(a is b for a, b in zip(out[-len(tail) :], tail, strict=True))


class _StripsOtherwise(str):
    __slots__ = ()

    def strip(self, chars: str | None = None) -> str:
        return "LIE"


def test_a_trimmed_str_subclass_is_read_by_the_text_it_holds(backend: str) -> None:
    """Trims read the text a str subclass holds, its own ``strip`` never run (volatile
    tail sections, observations, summariser answers)."""
    tail = cf.volatile_tail([_StripsOtherwise(" tests pass ")])
    assert tail is not None and tail["content"] == "<run-state>\ntests pass\n</run-state>"
    memory = cf.WorkingMemory()
    memory.observe("read", _StripsOtherwise(" src/a.py "))
    assert memory.snapshot.read == ("src/a.py",)

    async def complete(request: dict[str, Any]) -> str:
        return _StripsOtherwise(" the note ")

    assert asyncio.run(cf.summarize_transcript(complete, [{"role": "user", "content": "hi"}])) == "the note"


def test_the_edges_take_what_they_took_before(backend: str) -> None:
    """The checks refuse only what was never usable: a system prompt of content blocks, a
    marker id past 64 bits, and rows given as an old-style sequence (``__getitem__``
    only) are taken as before."""

    class OldSequence:
        def __init__(self, items: list[Any]) -> None:
            self.items = items

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, i: int) -> Any:
            return self.items[i]

    blocks = [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]
    convo = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert cf.assemble_compacted(blocks, convo, "note", 1)[0] == {"role": "system", "content": blocks}
    built = asyncio.run(cf.build_working_transcript(cf.WorkingTranscriptState(convo), blocks, _no_summary))
    assert built[0] == {"role": "system", "content": blocks}
    assert cf.consolidation_metadata({"folded": 2**64 - 1}).endswith('"folded":18446744073709551615}')
    marker = {"metadata": cf.consolidation_metadata()}
    assert cf.last_consolidation_index(OldSequence([{}, marker])) == 1


class _EncodesOtherwise(str):
    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b'{"messages": [{"role": "user", "content": "not what it holds"}]}'


class _BytesOtherwise(bytes):
    def __bytes__(self) -> bytes:
        return b'{"messages": [{"role": "user", "content": "not what it holds"}]}'


@pytest.mark.parametrize("kind", [_EncodesOtherwise, lambda text: _BytesOtherwise(text.encode())])
def test_a_body_subclass_is_read_by_what_it_holds(backend: str, kind: Callable[[str], Any]) -> None:
    """A str or bytes subclass body is packed from the text it holds: its own ``encode``
    or ``__bytes__`` ran, and its result was trusted (a str from it reached the native
    batch as a raw TypeError, and the reference's batch raised out whole)."""
    text = json.dumps({"messages": [{"role": "user", "content": "what it holds"}]})
    want = cf.pack_request(text, target_context_tokens=100)
    assert cf.pack_request(kind(text), target_context_tokens=100) == want
    assert cf.pack_requests([kind(text)], target_context_tokens=100) == [want]


@pytest.mark.parametrize(
    "call",
    [
        lambda: cf.pack_requests(None, target_context_tokens=100),
        lambda: cf.pack_requests(b'{"messages": []}', target_context_tokens=100),
        lambda: cf.pack_requests(bytearray(b'{"messages": []}'), target_context_tokens=100),
        lambda: cf.pack_many(None, target_context_tokens=100),
        lambda: cf.pack_many([[]], target_context_tokens=100, systems=5),
    ],
    ids=["bodies none", "one bytes body", "one bytearray body", "transcripts none", "systems int"],
)
def test_a_batch_that_is_no_batch_is_refused_by_name(backend: str, call: Callable[[], object]) -> None:
    """A raw TypeError ("'NoneType' object is not iterable") named nothing; one body given
    as the batch was packed byte by byte, a RequestError for each."""
    with pytest.raises(cf.ArgumentTypeError, match=r"^(bodies|transcripts|systems) must be an iterable"):
        call()
