"""Hostile numbers and shapes at the core's edge: sizes near and past 2**64, ints past what
the native core holds, many pins, malformed messages for handoff_line, the system prompt.

The rules, the same on both backends: every token total is exact (never wrapped or
clamped); an int argument past a u64 (an i64 for ``verbatim_start``'s ``i`` and
``pinned_directive_index``'s ``tail_start``) is an ``ArgumentError`` naming it; an
estimate past ``ESTIMATE_MAX`` (so that a message's size, the estimate plus 4, fits a u64)
is an ``EstimatorError``.
"""

from __future__ import annotations

from typing import Any

import contextfold as cf
import numpy as np
import pytest
from contextfold import _backend
from contextfold._contract import ESTIMATE_MAX, U64_MAX
from contextfold.errors import (
    ArgumentError,
    ArgumentTypeError,
    ContextfoldError,
    EstimatorError,
    MessageTypeError,
)
from contextfold.reference.pack import NOTE_HEADER

from .conftest import IMPLS
from .hostile_types import LyingInt

pytestmark = pytest.mark.usefixtures("backend")


def turns(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(n)]


@pytest.mark.parametrize("size", [2**62, 2**63, ESTIMATE_MAX])
def test_token_totals_are_exact_past_2_to_the_64(size: int) -> None:
    assert cf.tokens_of(turns(8), estimate_tokens=lambda _: size) == 8 * (size + 4)


def test_window_cut_points_are_found_past_2_to_the_64() -> None:
    # Running totals pass 2**64 from the second turn on: a wrapping sum would keep all.
    sizes = np.full(5, 2**62, dtype=np.int64)
    user = np.ones(5, dtype=bool)
    assert cf.window_start_array(sizes, user, window=80, token_budget=U64_MAX) == 2
    convo = [{"role": "user", "content": "x"}] * 5
    assert cf.window_start(convo, window=80, token_budget=U64_MAX, estimate_tokens=lambda _: 2**62 - 4) == 2


def test_compaction_tail_stops_at_the_budget_past_2_to_the_64() -> None:
    convo = [{"role": "user", "content": "x"}] * 12
    assert cf.compact_tail_start_for_budget(convo, U64_MAX, estimate_tokens=lambda _: 2**63 - 4) == 4


def test_an_overflowing_core_reports_its_exact_total() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    packed = cf.pack_handoff(messages, target_context_tokens=U64_MAX, estimate_tokens=lambda _: 2**63)
    assert (packed.fits, packed.tokens, packed.kept) == (False, 2 * (2**63 + 4), [0, 1])


@pytest.mark.parametrize("cut", ["greedy", "chunked"])
def test_a_note_costing_past_2_to_the_64_is_not_kept(cut: str) -> None:
    def estimate(text: str) -> int:
        return ESTIMATE_MAX if text.startswith(NOTE_HEADER) else 6

    packed = cf.pack_handoff(turns(9), target_context_tokens=40, estimate_tokens=estimate, cut=cut)  # type: ignore[arg-type]
    assert (packed.note, packed.fits, packed.tokens, packed.kept) == (None, True, 40, [5, 6, 7, 8])


def test_chunk_cut_points_past_2_to_the_64_are_counted() -> None:
    packed = cf.pack_handoff(
        turns(6), target_context_tokens=U64_MAX, estimate_tokens=lambda _: 2**62 - 4, cut="chunked", chunk_tokens=2**63
    )
    assert packed.kept == [4, 5]
    assert packed.fits and packed.note is not None
    assert packed.tokens == 3 * 2**62


def test_an_int64_array_refuses_a_size_it_cannot_hold() -> None:
    with pytest.raises(ArgumentError, match=r"^message 0 costs 9223372036854775812 tokens, more than an int64"):
        cf.message_tokens_array(turns(2), estimate_tokens=lambda _: 2**63)


# Ints past what the core holds --------------------------------------------------------
# (An index into a transcript is clamped whatever its size, as SPEC says:
# tests/test_window.py::test_an_index_of_any_size_is_clamped.)

PAST = [
    ("window", lambda: cf.window_start(turns(4), window=2**70), "window must be at most 18446744073709551615"),
    ("token_budget", lambda: cf.window_start(turns(4), token_budget=2**64), "token_budget must be at most"),
    (
        "window array",
        lambda: cf.window_start_array(np.zeros(2, dtype=np.int64), np.ones(2, dtype=bool), window=2**64),
        "window must be at most",
    ),
    ("budget", lambda: cf.compact_tail_start_for_budget(turns(4), 2**64), "budget must be at most"),
    ("target", lambda: cf.pack_handoff(turns(4), target_context_tokens=2**64), "target_context_tokens must be at most"),
    (
        "chunk",
        lambda: cf.pack_handoff(turns(4), target_context_tokens=9, cut="chunked", chunk_tokens=2**64),
        "chunk_tokens must be at most",
    ),
    ("pin", lambda: cf.pack_handoff(turns(4), target_context_tokens=9, pinned=[2**64]), "pinned index must be at most"),
    ("many", lambda: cf.pack_many([turns(4)], target_context_tokens=2**64), "target_context_tokens must be at most"),
]


@pytest.mark.parametrize(("call", "text"), [(call, text) for _, call, text in PAST], ids=[name for name, _, _ in PAST])
def test_ints_past_the_core_are_argument_errors_naming_them(call: Any, text: str) -> None:
    with pytest.raises(ArgumentError, match=rf"^{text}"):
        call()


@pytest.mark.parametrize("estimate", [ESTIMATE_MAX + 1, 2**64, 2**100])
def test_an_estimate_past_the_core_is_an_estimator_error(estimate: int) -> None:
    with pytest.raises(
        EstimatorError, match=rf"^message 0: estimate_tokens must return at most {ESTIMATE_MAX}, got {estimate}$"
    ):
        cf.tokens_of(turns(2), estimate_tokens=lambda _: estimate)
    with pytest.raises(EstimatorError, match=r"^message 1: estimate_tokens must return at most"):  # newest first
        cf.pack_handoff(turns(2), target_context_tokens=9, estimate_tokens=lambda _: estimate)


@pytest.mark.parametrize("images", [None, 85])
@pytest.mark.parametrize("answer", [-1, "3", None])
def test_an_estimate_that_is_no_count_names_its_message(backend: str, answer: Any, images: int | None) -> None:
    # SPEC §10: the error named neither the message nor its index.
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "b"},
    ]
    sizing = {} if images is None else {"sizing": "provider", "image_tokens": images}
    for call in (
        lambda: cf.tokens_of(messages, estimate_tokens=lambda t: answer if t == "x" else 1, **sizing),
        lambda: cf.pack_handoff(
            messages, target_context_tokens=100, estimate_tokens=lambda t: answer if t == "x" else 1, **sizing
        ),
    ):
        with pytest.raises(EstimatorError, match=r"^message 1: estimate_tokens must return a") as raised:
            call()
        assert raised.value.index == 1
    with pytest.raises(EstimatorError, match=r"^estimate_tokens must return a") as raised:
        cf.message_tokens(messages[1], estimate_tokens=lambda _: answer)
    assert raised.value.index is None


HUGE = 10**5000
"""More digits than Python writes in decimal (its own ValueError would replace the error)."""
HUGE_BITS = HUGE.bit_length()


class SaysItIsNegative(int):
    """An int whose comparisons and repr lie: the error reads the int as int does."""

    def __lt__(self, other: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "-1"

    __str__ = __repr__


TOO_LONG_TO_WRITE = [
    (
        "target",
        lambda: cf.pack_handoff(turns(4), target_context_tokens=HUGE),
        ArgumentError,
        f"target_context_tokens must be at most {U64_MAX}, got an int of {HUGE_BITS} bits",
    ),
    (
        "negative target",
        lambda: cf.pack_handoff(turns(4), target_context_tokens=-HUGE),
        ArgumentError,
        f"target_context_tokens must be at least 0, got a negative int of {HUGE_BITS} bits",
    ),
    (
        "edit",
        lambda: cf.ClearToolUses(keep=HUGE),
        ArgumentError,
        f"ClearToolUses.keep must be from 0 to {U64_MAX}, got an int of {HUGE_BITS} bits",
    ),
    (
        "estimate",
        lambda: cf.tokens_of(turns(2), estimate_tokens=lambda _: HUGE),
        EstimatorError,
        f"message 0: estimate_tokens must return at most {ESTIMATE_MAX}, got an int of {HUGE_BITS} bits",
    ),
    (
        "negative estimate",
        lambda: cf.pack_handoff(turns(2), target_context_tokens=9, estimate_tokens=lambda _: -HUGE),
        EstimatorError,
        f"message 1: estimate_tokens must return a non-negative int, got a negative int of {HUGE_BITS} bits",
    ),
    (
        "elision marker",
        lambda: cf.elision_marker(HUGE),
        ArgumentError,
        f"n must be at most {U64_MAX}, got an int of {HUGE_BITS} bits",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [(call, error, text) for _, call, error, text in TOO_LONG_TO_WRITE],
    ids=[name for name, *_ in TOO_LONG_TO_WRITE],
)
@pytest.mark.usefixtures("python_writes_4300_digits")
def test_an_int_too_long_to_write_is_named_by_its_size(call: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value) == text


def _middleware(**options: Any) -> Any:
    from contextfold.integrations.asgi import PackingMiddleware

    return PackingMiddleware(lambda *_: None, target_context_tokens=300, **options)  # type: ignore[arg-type]


def _pack_lines(**options: Any) -> Any:
    from contextfold.integrations.dask import pack_lines

    return pack_lines([], target_context_tokens=300, **options)


def _edit_settings(fields: Any) -> Any:
    from contextfold.integrations._common import edits_from_settings

    return edits_from_settings([{"clear_tool_uses": fields}])


QUOTED_BY_SIZE = [
    ("cut", lambda: cf.pack_handoff(turns(4), target_context_tokens=9, cut=HUGE), "cut must be 'greedy' or"),
    ("sizing", lambda: cf.PackOptions(target_context_tokens=9, sizing=HUGE), "sizing must be 'seed' or"),
    ("kind", lambda: cf.WorkingMemory().observe(HUGE, "a"), "unknown observation kind"),
    ("flag", lambda: _middleware(report_headers=HUGE), "report_headers must be True or False, got"),
    ("errors", lambda: _pack_lines(errors=HUGE), "errors must be 'line' or 'raise', not"),
    ("edit fields", lambda: _edit_settings(HUGE), "edits[0].clear_tool_uses must map fields to values, got"),
    ("encoding", lambda: cf.count_tokens("a", HUGE), "unknown encoding"),
]


@pytest.mark.parametrize(("call", "words"), [(c, w) for _, c, w in QUOTED_BY_SIZE], ids=[n for n, *_ in QUOTED_BY_SIZE])
@pytest.mark.usefixtures("python_writes_4300_digits")
def test_an_int_too_long_to_write_given_for_a_choice_is_named_by_its_size(call: Any, words: str) -> None:
    # Each quoted the value with repr, whose ValueError replaced the error.
    with pytest.raises(ArgumentError) as raised:
        call()
    assert str(raised.value).startswith(words)
    assert f"an int of {HUGE_BITS} bits" in str(raised.value)


def test_a_choice_whose_repr_raises_is_named_by_its_type() -> None:
    class Unwritable:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    words = r"^cut must be 'greedy' or 'chunked', not a value of type Unwritable whose repr raises RuntimeError$"
    with pytest.raises(ArgumentError, match=words):
        cf.pack_handoff(turns(4), target_context_tokens=9, cut=Unwritable())  # type: ignore[arg-type]


def test_a_str_given_for_a_choice_is_quoted_by_what_it_stores() -> None:
    class Disguised(str):
        def __repr__(self) -> str:
            return "'greedy'"

    with pytest.raises(ArgumentError, match=r"^cut must be 'greedy' or 'chunked', not 'zzz'$"):
        cf.pack_handoff(turns(4), target_context_tokens=9, cut=Disguised("zzz"))  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"^unexpected option 'bogus'; the options are"):
        cf.pack_handoff(turns(4), target_context_tokens=9, **{Disguised("bogus"): 1})


@pytest.mark.parametrize(
    ("windows", "error", "words"),
    [
        ({HUGE: 1000}, ArgumentTypeError, "windows must map model names to token counts, got a key of type int"),
        ({5: 1000}, ArgumentTypeError, "windows must map model names to token counts, got a key of type int"),
        ({"gpt-4o": HUGE}, ArgumentError, f"windows['gpt-4o'] must be at most {U64_MAX}, got an int of 16610 bits"),
    ],
    ids=["huge key", "int key", "huge size"],
)
@pytest.mark.usefixtures("python_writes_4300_digits")
def test_a_gateway_window_table_is_checked_key_by_key(windows: Any, error: type[Exception], words: str) -> None:
    # A key was written with repr before its size was checked: a huge one raised Python's
    # own ValueError, and a key of any type was taken.
    with pytest.raises(error) as raised:
        _middleware(windows=windows)
    assert str(raised.value) == words


def test_the_largest_values_the_core_holds_are_accepted() -> None:
    assert cf.window_start(turns(6), window=U64_MAX, token_budget=U64_MAX) == 0
    assert cf.verbatim_start(turns(4), 2**63 - 1) == 4
    assert cf.compact_tail_start_for_budget(turns(4), U64_MAX) == 0
    packed = cf.pack_handoff(turns(2), target_context_tokens=U64_MAX, estimate_tokens=lambda _: ESTIMATE_MAX)
    assert (packed.fits, packed.tokens, packed.kept) == (True, U64_MAX, [0])


def test_a_message_of_the_largest_size_is_sized_once(backend: str) -> None:
    """A custom estimator sees each message once (docs/packing.md), also one whose size
    is the largest the core holds (``ESTIMATE_MAX`` + 4 = 2**64 - 1), which a fold over
    budget reads again and again: natively such a size was kept as "not sized" (the
    size + 1 wrapped to 0) and estimated anew each time."""
    seen: list[str] = []

    def estimate(text: str) -> int:
        seen.append(text)
        return ESTIMATE_MAX

    packed = cf.pack_handoff(turns(6), target_context_tokens=U64_MAX, estimate_tokens=estimate)
    assert packed.dropped == 5
    sized = [text for text in seen if text.startswith("turn ")]
    assert sorted(sized) == sorted(set(sized))


@pytest.mark.skipif(IMPLS["native"] is None, reason="the native extension is not built")
@pytest.mark.usefixtures("python_writes_4300_digits")
def test_the_extension_itself_names_an_int_it_cannot_hold() -> None:
    native = IMPLS["native"]
    with pytest.raises(
        ArgumentError, match=r"^window must be at most 18446744073709551615, got 1180591620717411303424"
    ):
        native.window_start(turns(4), 2**70, 64, None)
    with pytest.raises(ArgumentError, match=r"^token_budget must be at least 0, got -1$"):
        native.window_start_array(np.zeros(1, dtype=np.int64), np.ones(1, dtype=bool), 8, -1)
    with pytest.raises(ArgumentError, match=r"^i must be at most 9223372036854775807, got 9223372036854775808$"):
        native.verbatim_start(turns(4), 2**63)
    with pytest.raises(ArgumentError, match=r"^budget must be at most"):
        native.compact_tail_start_for_budget(turns(4), 2**64, None)
    with pytest.raises(ArgumentError) as raised:
        native.window_start(turns(4), -HUGE, 64, None)
    assert str(raised.value) == f"window must be at least 0, got a negative int of {HUGE_BITS} bits"
    with pytest.raises(ArgumentError) as raised:
        native.window_start(turns(4), SaysItIsNegative(HUGE), 64, None)
    assert str(raised.value) == f"window must be at most {U64_MAX}, got an int of {HUGE_BITS} bits"
    with pytest.raises(ArgumentError) as raised:
        native.window_start(turns(4), SaysItIsNegative(2**64), 64, None)
    assert str(raised.value) == f"window must be at most {U64_MAX}, got {2**64}"


# Many pins ------------------------------------------------------------------------------


def test_pinning_every_one_of_200_000_messages_keeps_them_all() -> None:
    # Each pin finds its segment in O(1) (it once scanned them all: 19 s natively).
    messages = turns(200_000)
    packed = cf.pack_handoff(messages, target_context_tokens=1_000, pinned=range(len(messages)))
    assert (packed.fits, packed.kept, packed.note) == (False, list(range(len(messages))), None)
    assert packed.tokens == cf.tokens_of(messages)


def test_pins_keep_their_whole_tool_exchange_and_nothing_else() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "a" * 400},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "b" * 400},
        {"role": "assistant", "content": "c" * 400},
        {"role": "user", "content": "d" * 400},
        {"role": "assistant", "content": "e" * 400},
        {"role": "user", "content": "go"},
    ]
    packed = cf.pack_handoff(messages, target_context_tokens=300, pinned=[1, 1, 3, 2])
    assert packed.kept == [1, 2, 3, 6]
    assert (packed.fits, packed.dropped) == (True, 3)


# Malformed messages ---------------------------------------------------------------------

MALFORMED = [
    ({"role": 5, "content": "hello"}, "role", "message, field 'role': expected str, got int"),
    ({"content": "hello"}, "role", "message, field 'role': missing"),
    ({"role": "user", "content": 3}, "content", "message, field 'content': expected str, list or None, got int"),
    (
        {"role": "assistant", "tool_calls": {}},
        "tool_calls",
        "message, field 'tool_calls': expected list or None, got dict",
    ),
]


@pytest.mark.parametrize(("message", "field", "text"), MALFORMED)
def test_handoff_line_raises_what_packing_raises_for_a_malformed_message(
    message: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(MessageTypeError) as raised:
        cf.handoff_line(message)
    assert (str(raised.value), raised.value.index, raised.value.field) == (text, None, field)
    with pytest.raises(MessageTypeError, match=f"^message 1, field '{field}'"):
        cf.tokens_of([{"role": "user"}, message])


# A separate system prompt, sized by the core as a system message's content -------------

SYSTEMS = ["be brief", [{"type": "text", "text": "be brief"}], [], ""]


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_system_prompt_costs_a_system_message_with_it_as_content(system: Any) -> None:
    messages = turns(3)
    as_message = {"role": "system", "content": system}
    for estimate in (None, len):
        packed = cf.pack_handoff(messages, target_context_tokens=10**6, estimate_tokens=estimate, system=system)
        cost = cf.message_tokens(as_message, estimate_tokens=estimate)
        assert packed.tokens == cf.tokens_of(messages, estimate_tokens=estimate) + cost


@pytest.mark.parametrize("estimate", [None, len])
def test_a_system_prompt_without_a_json_form_fails_the_same_way_on_both_backends(estimate: Any) -> None:
    outcomes = []
    for which in ("native", "python"):
        with _backend.using(which), pytest.raises(ContextfoldError) as raised:
            cf.pack_handoff(turns(2), target_context_tokens=99, estimate_tokens=estimate, system=[{1, 2}])
        outcomes.append((type(raised.value), str(raised.value)))
    assert outcomes[0] == outcomes[1]


def test_a_system_prompt_and_tools_past_a_u64_saturate_alike(backend: str) -> None:
    """The system prompt and the tool definitions each cost ESTIMATE_MAX + 4: their sum
    saturates at a u64 on both backends (nothing that large fits)."""
    pack = cf.pack_handoff(
        [{"role": "user", "content": "hi"}],
        target_context_tokens=100,
        system="rules",
        tools=[{"name": "grep"}],
        estimate_tokens=lambda text: ESTIMATE_MAX,
    )
    assert (pack.fits, pack.tokens) == (False, U64_MAX + ESTIMATE_MAX + 4)


def _outcome(call: Any) -> Any:
    """What ``call()`` returns, or the type and message of what it raises."""
    try:
        return call()
    except Exception as error:
        return type(error), str(error)


# Each call given an int argument (or an estimate) by a function of it.
STORED: list[tuple[str, Any]] = [
    ("budget", lambda n: cf.pack_handoff(turns(6), target_context_tokens=n)),
    ("reserve", lambda n: cf.pack_handoff(turns(6), target_context_tokens=20, reserve_output_tokens=n)),
    ("chunk", lambda n: cf.pack_handoff(turns(6), target_context_tokens=20, cut="chunked", chunk_tokens=n)),
    ("pin", lambda n: cf.pack_handoff(turns(6), target_context_tokens=20, pinned=[n])),
    ("image", lambda n: cf.PackOptions(target_context_tokens=20, sizing="provider", image_tokens=n).images),
    ("estimate", lambda n: cf.pack_handoff(turns(6), target_context_tokens=20, estimate_tokens=lambda _: n)),
    ("message", lambda n: cf.message_tokens(turns(1)[0], estimate_tokens=lambda _: n)),
    ("keep", lambda n: cf.pack_handoff(turns(6), target_context_tokens=20, edits=[cf.ClearToolUses(keep=n)])),
    ("thinking", lambda n: cf.ClearThinking(keep=n).keep),
    ("window", lambda n: cf.window_start(turns(6), window=n, token_budget=20)),
    ("verbatim", lambda n: cf.verbatim_start(turns(6), n)),
    ("tail", lambda n: cf.compact_tail_start_for_budget(turns(6), n)),
    ("threads", lambda n: cf.pack_many([turns(6)], target_context_tokens=20, threads=n)),
]


@pytest.mark.parametrize("value", [0, 1, 3, 10, -1, 2**70])
@pytest.mark.parametrize("call", [call for _, call in STORED], ids=[name for name, _ in STORED])
def test_an_int_subclass_is_read_by_its_stored_value(call: Any, value: int) -> None:
    # Its own __int__, __index__, comparisons and repr (all lies) never run: the call
    # returns (or raises, naming the stored value) what it does for the plain int.
    assert _outcome(lambda: call(LyingInt(value))) == _outcome(lambda: call(value))


def test_an_int_subclass_sets_the_count_cache_by_its_stored_value() -> None:
    before = cf.count_cache_info().max_bytes
    try:
        cf.set_count_cache(LyingInt(1 << 20))
        assert cf.count_cache_info().max_bytes == 1 << 20
    finally:
        cf.set_count_cache(before)


@pytest.mark.parametrize(
    ("pinned", "words"),
    [
        (None, "pinned must be an iterable of ints, got NoneType"),
        (5, "pinned must be an iterable of ints, got int"),
        (1.5, "pinned must be an iterable of ints, got float"),
        ("12", "pinned index must be an int, got str"),
    ],
)
def test_pins_that_are_no_ints_are_refused_naming_pinned(pinned: Any, words: str) -> None:
    with pytest.raises(ArgumentError, match=rf"^{words}$"):
        cf.pack_handoff(turns(4), target_context_tokens=9, pinned=pinned)


def test_an_output_cap_is_read_by_its_stored_value() -> None:
    # A request's max_tokens as an int subclass (the LiteLLM hook's output reserve).
    from contextfold._contract import first_count

    assert first_count([LyingInt(-5), LyingInt(7)], 100) == 7
    assert type(first_count([LyingInt(7)], 100)) is int
