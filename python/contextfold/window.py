"""Chunked history windowing, and the rules compaction uses to pick its verbatim tail.

:func:`windowed` keeps at most ``window`` messages and ``token_budget`` tokens of a
transcript. Its front moves in chunks (a quarter of each limit) at cut points fixed from
the transcript's start, so it stays put while messages are appended: a provider's prompt
cache keeps hitting. The window starts on a user turn and never drops the last one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _backend
from ._contract import I64_MAX, EncodingName, Estimator, sizers, whole
from ._js import is_list, is_str, read_once
from .errors import ArgumentError, ArgumentTypeError
from .tokens import Message

if TYPE_CHECKING:  # numpy is imported on first use: most callers never need it
    import numpy as np

__all__ = [
    "COMPACT_TAIL_MAX_MESSAGES",
    "COMPACT_TAIL_TOKEN_BUDGET",
    "COMPACT_TAIL_TURNS",
    "HISTORY_TOKEN_BUDGET",
    "HISTORY_WINDOW",
    "assemble_compacted",
    "compact_tail_start",
    "compact_tail_start_for_budget",
    "pinned_directive_index",
    "verbatim_start",
    "window_start",
    "window_start_array",
    "windowed",
]

HISTORY_WINDOW = 80
"""Messages :func:`windowed` keeps at most, by default."""
HISTORY_TOKEN_BUDGET = 64_000
"""Tokens :func:`windowed` keeps at most, by default."""
COMPACT_TAIL_TOKEN_BUDGET = 40_000
"""Token budget of the tail a compaction keeps verbatim."""
COMPACT_TAIL_TURNS = 8
"""Messages a compaction tail keeps at least, when they fit its budget."""
COMPACT_TAIL_MAX_MESSAGES = HISTORY_WINDOW // 2
"""Messages a compaction tail keeps at most."""


def window_start(
    convo: Sequence[Message],
    *,
    window: int = HISTORY_WINDOW,
    token_budget: int = HISTORY_TOKEN_BUDGET,
    estimate_tokens: Estimator | EncodingName | None = None,
) -> int:
    """Index where :func:`windowed`'s window starts."""
    window = whole("window", window, 4)
    token_budget = whole("token_budget", token_budget, 4)
    return int(_backend.impl.window_start(convo, window, token_budget, sizers(estimate_tokens)))


def windowed(
    convo: Sequence[Message],
    *,
    window: int = HISTORY_WINDOW,
    token_budget: int = HISTORY_TOKEN_BUDGET,
    estimate_tokens: Estimator | EncodingName | None = None,
) -> list[Message]:
    """The newest part of ``convo`` that the history window keeps (a new list of the same
    message objects).

    The front drops whole chunks: ``window // 4`` messages and ``token_budget // 4``
    tokens, at cut points counted from the transcript's start. The window then starts on
    a user turn, never after the last one. With no user turn at all, the whole transcript
    is kept when it fits ``token_budget``, else only its last message.
    """
    convo = read_once(convo)
    start = window_start(convo, window=window, token_budget=token_budget, estimate_tokens=estimate_tokens)
    return list(convo[start:])


def window_start_array(
    sizes: np.ndarray,
    user_mask: np.ndarray,
    *,
    window: int = HISTORY_WINDOW,
    token_budget: int = HISTORY_TOKEN_BUDGET,
) -> int:
    """:func:`window_start` over per-message token sizes and a mask of user turns."""
    window = whole("window", window, 4)
    token_budget = whole("token_budget", token_budget, 4)
    import numpy as np

    try:
        given, mask = np.asarray(sizes), np.asarray(user_mask)
    except (TypeError, ValueError) as exc:
        raise ArgumentError(f"sizes and user_mask must be 1-D numeric arrays: {exc}") from None
    if given.ndim != 1 or mask.ndim != 1:  # before a copy, which makes a 0-d array 1-D
        raise ArgumentError("sizes and user_mask must be 1-D arrays")
    # Taken only as the ints and bools they hold: a cast would cut 1.9 to 1, wrap a uint64
    # past 2**63 - 1 to a negative size, or read the str "no" as True.
    if given.size and given.dtype.kind not in "iu":
        raise ArgumentError(f"sizes must hold integers, got {given.dtype}")
    if mask.size and mask.dtype.kind not in "biu":
        raise ArgumentError(f"user_mask must hold bools (or ints), got {mask.dtype}")
    user_mask = np.ascontiguousarray(mask, dtype=np.bool_)
    if given.dtype.kind == "u" and given.size and given.max() > I64_MAX:
        raise ArgumentError(f"sizes[{int(given.argmax())}] is past 2**63 - 1")
    sizes = np.ascontiguousarray(given, dtype=np.int64)
    return int(_backend.impl.window_start_array(sizes, user_mask, window, token_budget))


def _index(name: str, value: Any) -> int:
    """``value``, an int of any size, as the backends take an index into a transcript:
    from -1 to :data:`I64_MAX`, where every int past either end acts as that end does."""
    return min(max(whole(name, value, None, None), -1), I64_MAX)


def verbatim_start(convo: Sequence[Message], i: int) -> int:
    """``i`` clamped to ``[0, len(convo)]``, then moved forward past ``tool`` messages."""
    return int(_backend.impl.verbatim_start(convo, _index("i", i)))


def compact_tail_start(convo: Sequence[Message], n: int) -> int:
    """Start of a verbatim tail of about the last ``n`` messages."""
    n = whole("n", n, 0, None)
    convo = read_once(convo)
    # Anything but a list is the backend's to refuse, as it refuses it everywhere.
    return verbatim_start(convo, len(convo) - n if is_list(convo) else 0)


def compact_tail_start_for_budget(
    convo: Sequence[Message],
    budget: int = COMPACT_TAIL_TOKEN_BUDGET,
    *,
    estimate_tokens: Estimator | EncodingName | None = None,
) -> int:
    """Start of the verbatim tail a compaction keeps under ``budget`` tokens.

    Walking back from the newest message, it stops at 40 messages, or once 8 are taken
    and the next would overflow ``budget``; then moves past ``tool`` messages (which may
    leave fewer than 8).
    """
    return int(_backend.impl.compact_tail_start_for_budget(convo, whole("budget", budget), sizers(estimate_tokens)))


def pinned_directive_index(convo: Sequence[Message], tail_start: int) -> int:
    """Index of the last user message when it lies before ``tail_start``, else -1."""
    return int(_backend.impl.pinned_directive_index(convo, _index("tail_start", tail_start)))


def assemble_compacted(
    system_prompt: str | list[Any], convo: Sequence[Message], note: str, covered_end: int
) -> list[Any]:
    """The request after a fold: system prompt, the note, the directive when the note
    covers it (the same object), then the verbatim messages from ``covered_end`` on."""
    check_prompt(system_prompt)
    if not is_str(note):
        raise ArgumentTypeError(f"note must be a str, got {type(note).__name__}")
    convo = read_once(convo)
    return assembled(system_prompt, convo, note, fold_plan(convo, covered_end))


def check_prompt(system_prompt: Any) -> None:
    """A fold's system prompt: a str, or a list of content blocks (``cache_control``
    marks on them included), the system message's content as given."""
    if not issubclass(type(system_prompt), (str, list)):
        raise ArgumentTypeError(f"system_prompt must be a str or a list of blocks, got {type(system_prompt).__name__}")


def fold_plan(convo: Sequence[Message], covered_end: int) -> tuple[int, int]:
    """Where :func:`assemble_compacted` takes the verbatim tail from, and the directive it
    re-injects (-1: none), read from the messages now: a caller that awaits a summariser
    in between assembles from what it read before."""
    tail = verbatim_start(convo, covered_end)
    return tail, pinned_directive_index(convo, tail)


def assembled(system_prompt: str | list[Any], convo: Sequence[Message], note: str, plan: tuple[int, int]) -> list[Any]:
    """:func:`assemble_compacted`'s request from a :func:`fold_plan` of ``convo``."""
    tail, directive = plan
    out: list[Any] = [{"role": "system", "content": system_prompt}, {"role": "assistant", "content": note}]
    if directive >= 0:
        out.append(convo[directive])
    out.extend(convo[tail:])
    return out
