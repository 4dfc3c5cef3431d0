"""PackOptions: one value checked once, taken by every packing function on both backends,
equal in effect to the same options given as keywords."""

from __future__ import annotations

import dataclasses
import enum
import gc
import pickle
import re
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import contextfold as cf
import pytest
from contextfold import _contract as contract
from contextfold._contract import pack_options

from .conftest import native_required, openai_corpus
from .hostile_types import LyingStr

BODY = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "there"}]}'


def test_a_value_is_frozen_hashable_and_equal_by_its_options() -> None:
    a = cf.PackOptions(target_context_tokens=8_000, pinned=[2, 1], cut="chunked")
    b = cf.PackOptions(target_context_tokens=8_000, pinned=(2, 1), cut="chunked")
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a.pinned == (2, 1)  # stored as a tuple of ints, whatever iterable it was given as
    assert (a.budget, a.chunk, a.images, a.sizers) == (8_000, 2_000, None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.target_context_tokens = 1  # type: ignore[misc]
    assert not hasattr(a, "__dict__")
    assert pickle.loads(pickle.dumps(a)) == a
    assert a != cf.PackOptions(target_context_tokens=8_000, pinned=(1, 2), cut="chunked")


class _Route(cf.PackOptions):
    __slots__ = ()


@pytest.mark.parametrize("cls", [cf.PackOptions, _Route])
def test_a_value_with_a_custom_estimator_pickles_when_the_estimator_does(backend: str, cls: type) -> None:
    # For a process pool: the derived fields hold closures over the estimator, so the
    # value is written as the options given and built again (helper-80 found it refused).
    options = cls(target_context_tokens=60, estimate_tokens=len, edits=[cf.ClearToolUses()], pinned=[0])
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options and type(copy) is cls and copy.estimate_tokens is len
    messages = openai_corpus()[0]
    assert cf.pack_handoff(messages, options=copy) == cf.pack_handoff(messages, options=options)
    with pytest.raises((pickle.PicklingError, AttributeError)):  # the estimator's own refusal
        pickle.dumps(cf.PackOptions(target_context_tokens=60, estimate_tokens=lambda text: 1))


@pytest.mark.parametrize(
    ("keywords", "error", "words"),
    [
        ({"target_context_tokens": -1}, cf.ArgumentError, "target_context_tokens must be at least 0"),
        ({"target_context_tokens": 10, "reserve_output_tokens": 11}, cf.ArgumentError, "exceeds"),
        ({"target_context_tokens": True}, cf.ArgumentError, "must be an int, got bool"),
        ({"target_context_tokens": 10, "pinned": [1, "2"]}, cf.ArgumentError, "pinned index must be an int"),
        ({"target_context_tokens": 10, "summary": 3}, cf.ArgumentError, "summary must be a str or None"),
        ({"target_context_tokens": 10, "shape": "gemini"}, cf.ArgumentError, "shape must be"),
        ({"target_context_tokens": 10, "cut": "chunky"}, cf.ArgumentError, "cut must be"),
        ({"target_context_tokens": 10, "cut": "chunked", "chunk_tokens": 0}, cf.ArgumentError, "chunk_tokens"),
        ({"target_context_tokens": 10, "chunk_tokens": "8"}, cf.ArgumentError, "chunk_tokens must be an int"),
        ({"target_context_tokens": 10, "sizing": "exact"}, cf.ArgumentError, "sizing must be"),
        ({"target_context_tokens": 10, "estimate_tokens": "p50k_base"}, cf.ArgumentError, "unknown encoding"),
        ({"target_context_tokens": 10, "estimate_tokens": 3}, cf.EstimatorError, "must be callable"),
        ({"target_context_tokens": 10, "bogus": 1}, TypeError, "bogus"),
    ],
)
def test_bad_options_fail_when_the_value_is_built(keywords: dict[str, Any], error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        cf.PackOptions(**keywords)
    # Every function that takes the options raises the same, before reading its input.
    for call in (
        lambda: cf.pack_handoff(None, **keywords),  # type: ignore[arg-type]
        lambda: cf.pack_many(None, **keywords),  # type: ignore[arg-type]
        lambda: cf.pack_request(None, **keywords),  # type: ignore[arg-type]
        lambda: cf.pack_requests(None, **keywords),  # type: ignore[arg-type]
    ):
        with pytest.raises(error, match=words):
            call()


@pytest.mark.parametrize(
    ("name", "choice"),
    [("shape", "anthropic"), ("cut", "chunked"), ("sizing", "provider"), ("estimate_tokens", "cl100k_base")],
)
def test_a_str_option_is_read_by_the_text_it_holds(backend: str, name: str, choice: str) -> None:
    # A subclass that says it equals anything is no choice at all (read by its __eq__,
    # it passed as the first choice there is and packed as that).
    words = "unknown encoding" if name == "estimate_tokens" else f"{name} must be"
    with pytest.raises(cf.ArgumentError, match=words):
        cf.PackOptions(target_context_tokens=1_000, **{name: LyingStr("zzz")})
    with pytest.raises(cf.ArgumentError, match=words):
        cf.pack_handoff([{"role": "user", "content": "hi"}], target_context_tokens=1_000, **{name: LyingStr("zzz")})
    # A str enum names its choice, and the value holds the plain str.
    named = enum.Enum("Named", {"CHOICE": choice}, type=str).CHOICE  # type: ignore[misc]
    options = cf.PackOptions(target_context_tokens=1_000, **{name: named})
    assert type(getattr(options, name)) is str
    assert options == cf.PackOptions(target_context_tokens=1_000, **{name: choice})


def test_options_equal_the_same_keywords_on_every_function(backend: str) -> None:
    corpus = openai_corpus()[:6]
    keywords: dict[str, Any] = {"target_context_tokens": 3_000, "reserve_output_tokens": 200, "cut": "chunked"}
    options = cf.PackOptions(**keywords)
    for messages in corpus:
        assert cf.pack_handoff(messages, options=options) == cf.pack_handoff(messages, **keywords)
    assert cf.pack_many(corpus, options=options) == cf.pack_many(corpus, **keywords)
    assert cf.pack_request(BODY, options=options) == cf.pack_request(BODY, **keywords)
    assert cf.pack_requests([BODY], options=options) == cf.pack_requests([BODY], **keywords)


def test_keywords_beside_options_override_them() -> None:
    options = cf.PackOptions(target_context_tokens=100_000, cut="chunked")
    messages = openai_corpus()[0]
    assert cf.pack_handoff(messages, options=options, target_context_tokens=500) == cf.pack_handoff(
        messages, target_context_tokens=500, cut="chunked"
    )
    with pytest.raises(cf.ArgumentError, match="cut must be"):
        cf.pack_handoff(messages, options=options, cut="chunky")  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match="options must be a PackOptions, got dict"):
        cf.pack_handoff(messages, options={"target_context_tokens": 10})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["bogus", "budget", "native", "chunk", "images", "sizers"])
def test_a_keyword_that_is_no_option_is_refused_by_name_with_or_without_options(name: str) -> None:
    # The derived fields are no options: given beside options= they reached dataclasses'
    # replace(), which raised its own ValueError; alone, __init__'s TypeError.
    options = cf.PackOptions(target_context_tokens=100)
    for call in (
        lambda: cf.pack_handoff([], target_context_tokens=100, **{name: 1}),
        lambda: cf.pack_handoff([], options=options, **{name: 1}),
        lambda: cf.pack_request(BODY, options=options, **{name: 1}),
        lambda: cf.pack_many([], options=options, **{name: 1}),
    ):
        with pytest.raises(cf.ArgumentTypeError, match=f"unexpected option {name!r}; the options are target_context"):
            call()


def test_a_missing_budget_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="target_context_tokens"):
        cf.pack_handoff([])  # type: ignore[call-arg]


def test_the_extension_refuses_anything_but_a_value() -> None:
    # The public functions always hand the backends a PackOptions; the extension, which
    # reads its fields in place, refuses anything else rather than misread it.
    native = native_required()
    for call in (
        lambda: native.pack_handoff([], {"target_context_tokens": 10}, {}, None, None),
        lambda: native.pack_request(BODY, object(), {}),
    ):
        with pytest.raises(cf.ArgumentTypeError, match="options must be a PackOptions, got"):
            call()


class _LyingInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


def test_keyword_values_are_reused_only_when_they_cannot_lie() -> None:
    # Plain keywords come back as the same value (a dict lookup, not a check a call).
    assert pack_options(None, {"target_context_tokens": 77}) is pack_options(None, {"target_context_tokens": 77})
    # A bool is an int that equals 1, a subclass may say it equals anything: neither is
    # reused, so each is checked (and read) as what it is.
    cached = pack_options(None, {"target_context_tokens": 1})
    with pytest.raises(cf.ArgumentError, match="got bool"):
        pack_options(None, {"target_context_tokens": True})
    lying = pack_options(None, {"target_context_tokens": _LyingInt(5)})
    assert lying is not cached and lying.budget == 5


def test_a_call_reuses_options_only_for_the_same_plain_keywords(backend: str) -> None:
    # The native backend finds the options made before of the same plain keywords in
    # pack_options' cache, by a lookup of the keywords: a value that equals a kept one
    # without being of its type is made into options again, whatever came before.
    messages = [{"role": "user", "content": "x" * 396}] * 3  # 104 tokens each

    def packed(**keywords: Any) -> tuple[int, bool, str | None]:
        pack = cf.pack_handoff(messages, **keywords)
        return pack.budget, pack.fits, pack.note

    for _ in range(2):
        for budget in range(300, 320):
            assert packed(target_context_tokens=budget)[0] == budget
    assert packed(target_context_tokens=400) == (400, True, None)
    assert packed(target_context_tokens=_LyingInt(150))[:2] == (150, True)
    assert packed(target_context_tokens=1)[:2] == (1, False)
    with pytest.raises(cf.ArgumentError, match="got bool"):
        packed(target_context_tokens=True)
    # The same keywords in another order, and beside a value: each what it says.
    assert packed(target_context_tokens=500, reserve_output_tokens=300)[0] == 200
    assert packed(reserve_output_tokens=300, target_context_tokens=500)[0] == 200
    assert packed(options=cf.PackOptions(target_context_tokens=900), reserve_output_tokens=300)[0] == 600
    # A str that equals every str is read as the text it holds.
    assert str(packed(target_context_tokens=150, summary="first")[2]).endswith("\nfirst")
    assert str(packed(target_context_tokens=150, summary=LyingStr("second"))[2]).endswith("\nsecond")
    # The bytes path refuses a custom estimator however the options come.
    for call in (
        lambda: cf.pack_request(BODY, target_context_tokens=100, estimate_tokens=len),
        lambda: cf.pack_request(BODY, options=cf.PackOptions(target_context_tokens=100, estimate_tokens=len)),
    ):
        with pytest.raises(cf.ArgumentError, match="not builtin_function_or_method: a custom estimator"):
            call()


def test_keywords_that_are_the_last_calls_objects_find_only_that_calls_options(backend: str) -> None:
    # Natively, keywords that are the same objects as those of the thread's last call
    # that found its options in pack_options' cache (a call site's names and constants)
    # find those options by identity: each name and each value must be the same, in the
    # same order, and no more or fewer.
    messages = [{"role": "user", "content": "hi"}]
    target, other = int("900"), int("300")  # made at run time: no constants shared
    calls = [
        ({"target_context_tokens": target}, 900),
        ({"target_context_tokens": target, "reserve_output_tokens": other}, 600),  # the last call's and one more
        ({"target_context_tokens": target}, 900),  # the last call's but one
        ({"target_context_tokens": other}, 300),  # the same name, another value
        ({"target_context_tokens": target, "reserve_output_tokens": other}, 600),
        ({"target_context_tokens": target, "chunk_tokens": other}, 900),  # the same values, another name
        ({"chunk_tokens": target, "target_context_tokens": other}, 300),  # the same names and values, paired otherwise
        ({"target_context_tokens": int("900")}, 900),  # equal, not the same
    ]
    # Each in the cache first, so that every call finds its options there and is
    # remembered, whatever ran before.
    for keywords, _ in calls:
        pack_options(None, keywords)
    for keywords, budget in calls + calls:
        assert cf.pack_handoff(messages, **keywords).budget == budget


def test_options_are_made_in_python_never_under_the_extension() -> None:
    # Keywords the extension has not seen make it return None: the caller makes the
    # options and calls again with them. Python code run under the extension (making
    # them there) could end the thread as the interpreter shuts down, which aborted the
    # process when the thread was packing with new keywords.
    native = native_required()
    messages = [{"role": "user", "content": "hi"}]
    keywords = {"target_context_tokens": 987_651}
    assert native.pack_handoff(messages, None, keywords) is None
    made = pack_options(None, keywords)
    assert native.pack_handoff(messages, made, {}) == cf.pack_handoff(messages, options=made)
    assert native.pack_handoff(messages, None, dict(keywords)) == cf.pack_handoff(messages, options=made)
    assert native.pack_request(BODY, None, {"target_context_tokens": 987_652}) is None


def test_daemon_threads_packing_with_new_keywords_let_the_process_exit() -> None:
    # (Without the fix above, two to five runs in six aborted: "FATAL: exception not
    # rethrown", exit status 134.)
    script = """
import threading
import contextfold as cf
messages = [{"role": "user", "content": "hello " * 50}]
def loop(packing):
    i = 0
    while True:
        cf.pack_handoff(messages, target_context_tokens=300 + i % 13)
        i += 1
        if i == 20:
            packing.set()
running = [threading.Event() for _ in range(4)]
for packing in running:
    threading.Thread(target=loop, args=(packing,), daemon=True).start()
for packing in running:  # every thread is packing as the interpreter shuts down
    packing.wait(60)
"""
    for _ in range(4):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr


def test_a_kept_value_holds_no_estimator_and_reads_edits_as_they_are(backend: str) -> None:
    # The extension keeps the last options it read, for the next call: never one with a
    # custom estimator (it kept it alive, and a finaliser dropping it mid-call that packed
    # again panicked), nor edits, which can be changed behind their frozen backs.
    messages = [{"role": "user", "content": "hello " * 50}]
    inner: list[Any] = []

    class Estimator:
        def __call__(self, text: str) -> int:
            return len(text) // 4

        def __del__(self) -> None:
            inner.append(cf.pack_handoff(messages, target_context_tokens=77).budget)

    estimator = Estimator()
    alive = weakref.ref(estimator)
    options = cf.PackOptions(target_context_tokens=1_000, estimate_tokens=estimator)
    cf.pack_handoff(messages, options=options)
    del options, estimator
    gc.collect()
    assert alive() is None and inner == [77]
    results = [{"role": "assistant", "content": "", "tool_calls": [_call(k)]} for k in range(6)]
    transcript = [m for k, call in enumerate(results) for m in (call, _result(k))]
    edits = cf.PackOptions(target_context_tokens=10_000, chunk_tokens=1, edits=[cf.ClearToolUses(trigger=0, keep=6)])
    assert cf.pack_handoff(transcript, options=edits).applied_edits == ()
    object.__setattr__(edits.edits[0], "keep", 0)
    assert cf.pack_handoff(transcript, options=edits).applied_edits[0].cleared_tool_uses == 6


def _call(k: int) -> dict[str, Any]:
    return {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": "{}"}}


def _result(k: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{k}", "content": "r" * 400}


class _EmptiesTheCallsKeywords:
    """Pins that, as they are read, take themselves out of the keywords of the call they
    were passed to: every keyword left is then plain."""

    def __iter__(self) -> Iterator[int]:
        frame = sys._getframe(1)
        while not isinstance(frame.f_locals.get("keywords"), dict):
            frame = frame.f_back  # type: ignore[assignment]
        del frame.f_locals["keywords"]["pinned"]
        return iter([0])


def test_keywords_emptied_while_their_options_are_made_change_no_later_call(backend: str) -> None:
    # A native memory of options by keywords (since replaced by pack_options' cache)
    # kept those made with the pins under the keywords as the pins left them (the budget
    # alone), and packed later calls with the pins.
    messages = [{"role": "user", "content": "x" * 396}] * 4  # 104 tokens each
    first = cf.pack_handoff(messages, target_context_tokens=250, pinned=_EmptiesTheCallsKeywords())
    assert first.kept == [0, 3]
    assert cf.pack_handoff(messages, target_context_tokens=250).kept == [2, 3]


class _ChangesTheKeywordsWhenLookedUp(dict[Any, Any]):
    """A cache that, as it is looked up, changes the budget of the keywords being made:
    what code run at that moment (a finaliser, a gc callback) could do."""

    def __init__(self, keywords: dict[str, Any]) -> None:
        super().__init__()
        self.keywords = keywords

    def get(self, key: Any, default: Any = None) -> Any:
        self.keywords["target_context_tokens"] = 1_000
        return super().get(key, default)


def test_options_are_kept_under_the_keywords_they_were_made_of(monkeypatch: pytest.MonkeyPatch) -> None:
    # The value was made of the keywords read a second time, after the key: a change in
    # between was kept under the key, and later calls with a budget of 250 (on both
    # backends: the native one finds values in this cache) packed to 1,000.
    keywords = {"target_context_tokens": 250}
    cache = _ChangesTheKeywordsWhenLookedUp(keywords)
    monkeypatch.setattr(contract, "_BUILT", cache)
    made = pack_options(None, keywords)
    assert made.budget == 250 and cache[(("target_context_tokens", 250),)] is made


class _ComparingMeta(type):
    def __eq__(cls, other: object) -> bool:
        raise RuntimeError("a metaclass's __eq__ ran")

    __hash__ = type.__hash__


class _OddlyTypedInt(int, metaclass=_ComparingMeta):
    pass


def test_a_keyword_value_of_an_odd_metaclass_runs_none_of_its_code() -> None:
    # A value's type is told apart by identity: telling it by `in` a tuple of types
    # compared it with `==`, which ran the metaclass's __eq__ (here a raw RuntimeError).
    value, pins = _OddlyTypedInt(900), [_OddlyTypedInt(0)]
    options = pack_options(None, {"target_context_tokens": value, "pinned": pins})
    assert options.budget == 900 and options.pinned == (0,)
    assert pack_options(None, {"target_context_tokens": value}) is not pack_options(
        None, {"target_context_tokens": 900}
    )


def test_keyword_edits_are_reused_when_equal_and_never_confused() -> None:
    # Edits are frozen values of exact fields: equal ones act alike, so a call that passes
    # an equal list of edits (as an agent loop does each turn) reuses the checked options.
    first = pack_options(None, {"target_context_tokens": 900, "edits": [cf.ClearToolUses(keep=2)]})
    again = pack_options(None, {"target_context_tokens": 900, "edits": (cf.ClearToolUses(keep=2),)})
    assert again is first and first.edits == (cf.ClearToolUses(keep=2),)
    other = pack_options(None, {"target_context_tokens": 900, "edits": [cf.ClearToolUses(keep=3)]})
    thinking = pack_options(None, {"target_context_tokens": 900, "edits": [cf.ClearThinking(keep=2)]})
    assert other.edits == (cf.ClearToolUses(keep=3),) and thinking.edits == (cf.ClearThinking(keep=2),)
    # A list of pins is not a list of edits, nor the other way round: each is checked.
    with pytest.raises(cf.ArgumentTypeError, match=r"edits\[0\] must be a ClearToolUses or ClearThinking, got int"):
        pack_options(None, {"target_context_tokens": 900, "edits": [1, 2]})
    with pytest.raises(cf.ArgumentError, match="pinned index must be an int, got ClearToolUses"):
        pack_options(None, {"target_context_tokens": 900, "pinned": [cf.ClearToolUses()]})


def test_an_edit_made_unhashable_behind_its_back_is_built_uncached() -> None:
    edit = cf.ClearToolUses(exclude_tools=["g"])
    object.__setattr__(edit, "exclude_tools", ["g"])  # a list: no longer hashable
    options = pack_options(None, {"target_context_tokens": 900, "edits": [edit]})
    # Built uncached, from the edit checked again: its list is a tuple there.
    assert options.edits == (cf.ClearToolUses(exclude_tools=["g"]),)
    assert pack_options(None, {"target_context_tokens": 900, "edits": [edit]}) is not options


@pytest.mark.parametrize(
    ("edit", "field", "value", "error", "words"),
    [
        (cf.ClearToolUses(), "keep", 2**70, cf.ArgumentError, "ClearToolUses.keep must be from 0"),
        (cf.ClearToolUses(), "keep", -1, cf.ArgumentError, "ClearToolUses.keep must be from 0"),
        (cf.ClearToolUses(), "trigger", "a", cf.ArgumentTypeError, "ClearToolUses.trigger must be an int"),
        (cf.ClearToolUses(), "exclude_tools", 5, cf.ArgumentTypeError, "ClearToolUses.exclude_tools must be"),
        (cf.ClearToolUses(), "clear_tool_inputs", 2, cf.ArgumentTypeError, "clear_tool_inputs must be a bool"),
        (cf.ClearThinking(), "keep", 2**70, cf.ArgumentError, "ClearThinking.keep must be from 0"),
    ],
)
def test_an_edit_changed_behind_its_frozen_back_is_checked_again(
    backend: str, edit: Any, field: str, value: Any, error: type, words: str
) -> None:
    # object.__setattr__ passes by the checks an edit's constructor ran: the backends
    # read what it holds (natively a bare OverflowError or TypeError; the reference took
    # it, or failed with an IndexError), so the options check each edit's fields again.
    object.__setattr__(edit, field, value)
    messages = [{"role": "user", "content": "x" * 400}, {"role": "user", "content": "hi"}]
    with pytest.raises(error, match=words):
        cf.pack_handoff(messages, target_context_tokens=50, edits=[edit])
    with pytest.raises(error, match=words):
        cf.PackOptions(target_context_tokens=50, edits=[edit])


class _LikeX:
    """Not a str, but hashed and compared as "x" is."""

    def __hash__(self) -> int:
        return hash("x")

    def __eq__(self, other: object) -> bool:
        return other == "x"


@pytest.mark.parametrize(
    ("make", "field", "value", "words"),
    [
        (lambda: cf.ClearThinking(keep=1), "keep", True, "ClearThinking.keep must be an int, got bool"),
        (lambda: cf.ClearToolUses(keep=0), "keep", 0.0, "ClearToolUses.keep must be an int, got float"),
        (
            lambda: cf.ClearToolUses(clear_tool_inputs=True),
            "clear_tool_inputs",
            1,
            "ClearToolUses.clear_tool_inputs must be a bool, got int",
        ),
        (
            lambda: cf.ClearToolUses(exclude_tools=["x"]),
            "exclude_tools",
            (_LikeX(),),
            "ClearToolUses.exclude_tools[0] must be a str, got _LikeX",
        ),
    ],
)
def test_an_edit_changed_to_an_equal_value_is_refused_whatever_came_before(
    backend: str, make: Callable[[], Any], field: str, value: Any, words: str
) -> None:
    # The changed edit compared equal to one built from its old fields (True == 1), so
    # once a call had packed with such an edit, its options were found for the changed
    # one, unchecked: the same call passed or failed by what ran before it.
    messages = [{"role": "user", "content": "hi"}]
    for through_request in (False, True):
        cf.pack_handoff(messages, target_context_tokens=50, edits=[make()])
        changed = make()
        object.__setattr__(changed, field, value)
        with pytest.raises(cf.ArgumentTypeError, match=f"^{re.escape(words)}$"):
            if through_request:
                cf.pack_request(
                    b'{"messages": [{"role": "user", "content": "hi"}]}', target_context_tokens=50, edits=[changed]
                )
            else:
                cf.pack_handoff(messages, target_context_tokens=50, edits=[changed])


class _NameThatCompares(str):
    """A keyword name (``**{name: value}``) whose comparisons are noted."""

    compared: list[str] = []  # noqa: RUF012 (shared on purpose)

    def __eq__(self, other: object) -> bool:
        self.compared.append(str(other))
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_keyword_name_of_a_str_subclass_is_never_kept_in_the_cache(backend: str) -> None:
    # pack_options kept the subclass as the name in its cache key, and the extension's
    # lookup of the same plain keywords then ran its __eq__ under Rust frames (what let
    # daemon threads abort the process at exit).
    messages = [{"role": "user", "content": "hi"}]
    name = _NameThatCompares("target_context_tokens")
    budget = 4_321 if backend == "native" else 4_322
    assert cf.pack_handoff(messages, **{name: budget}).budget == budget
    _NameThatCompares.compared.clear()
    assert cf.pack_handoff(messages, target_context_tokens=budget).budget == budget
    assert _NameThatCompares.compared == []
