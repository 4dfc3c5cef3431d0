"""The floor both backends stand on: what a call takes, what it returns, and the rules
that are not hot paths.

Everything here is shared, so the native and reference backends cannot drift apart on
it: the result types (:class:`HandoffPack`, :class:`PackedRequest`), the options value
(:class:`PackOptions`, where every packing option is checked, once), a message's field
checks, the custom-estimator adapter (:func:`sizers`), and the wire constants. The
reference backend imports this module, :mod:`contextfold._js` and
:mod:`contextfold.errors`, and nothing else of the package; the extension reads a
:class:`PackOptions` as it is and never calls back here to check an argument.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypedDict, cast

from ._edits import AppliedEdit, ClearThinking, ClearToolUses, Edit, check_edits, has_exact_fields, iterable_of
from ._js import (
    OPAQUE,
    Visit,
    compact_json,
    entry,
    is_int,
    is_list,
    is_str,
    listed,
    plain,
    quoted,
    shown,
    stored,
    str_value,
)
from .errors import ArgumentError, ArgumentTypeError, EstimatorError, MessageError, MessageTypeError, RequestError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

MESSAGE_OVERHEAD = 4
"""Tokens every message costs on top of its text's estimate (role and framing)."""

VOLATILE_TAIL_TAG = "<run-state>"
"""Opens a volatile tail's content (wire format: stays byte-exact)."""
VOLATILE_TAIL_CLOSE = "</run-state>"
"""Closes a volatile tail's content."""

Estimator = Callable[[str], int]
"""A custom token estimator: ``estimate(text) -> int``."""
PerMessage = Callable[[int | None, Any, bool], int]
PerText = Callable[[str], int]
Sizers = tuple[PerMessage, PerText]
"""What the backends take for a custom estimator: per-message and per-text sizing."""
EncodingName = Literal["o200k_base", "cl100k_base"]
"""An OpenAI encoding whose vocabulary the extension embeds."""
ENCODINGS: tuple[EncodingName, ...] = ("o200k_base", "cl100k_base")
Counting = Sizers | EncodingName | None
"""How the backends count: None (chars/4), an embedded encoding's name (counted exactly),
or a custom estimator's pair (``PackOptions.sizers``; ``Counting`` in pack.rs)."""


DEFAULT_COUNT_CACHE_BYTES = 64 * 2**20
"""The count cache's bound when a process starts (64 MiB; the extension's is the same)."""

U64_MAX = 2**64 - 1
"""The largest count, index, budget or size the native core holds (a u64). Both backends
refuse larger ints with an :class:`ArgumentError` naming the argument, rather than one
computing and the other failing."""
I64_MAX = 2**63 - 1
"""The largest signed index the native core holds (``verbatim_start``'s ``i``)."""
ESTIMATE_MAX = U64_MAX - MESSAGE_OVERHEAD
"""The largest estimate a custom estimator may return: a message's size, the estimate
plus its overhead, must fit a u64."""


def whole(name: str, value: Any, minimum: int | None = 0, maximum: int | None = U64_MAX) -> int:
    """``value`` as an int from ``minimum`` to ``maximum`` (``None``: no bound, for a number
    the backends cap or clamp themselves); bools and floats are refused."""
    if not is_int(value):
        raise ArgumentError(f"{name} must be an int, got {type(value).__name__}")
    number = stored(value)
    if minimum is not None and number < minimum:
        raise ArgumentError(f"{name} must be at least {minimum}, got {shown(number)}")
    if maximum is not None and number > maximum:
        raise ArgumentError(f"{name} must be at most {maximum}, got {shown(number)}")
    return number


def check_callable(name: str, value: Any, optional: bool = False) -> None:
    """Refuse a ``value`` that cannot be called (None too, when ``optional``) before any
    work starts, rather than with Python's bare error halfway through it."""
    if not (callable(value) or (optional and value is None)):
        allowed = "callable or None" if optional else "callable"
        raise ArgumentTypeError(f"{name} must be {allowed}, got {type(value).__name__}")


def thread_count(threads: int | None, name: str = "threads") -> int:
    """The threads a batch asks for: ``threads`` checked (at least 1; a maximum, so any
    larger count is capped, not refused), or one a CPU for None."""
    return (os.cpu_count() or 1) if threads is None else min(whole(name, threads, 1, None), sys.maxsize)


def read_items(name: str, items: Any, what: str) -> list[Any]:
    """``items`` checked as an iterable of ``what`` (:func:`iterable_of`) and read once
    (:func:`batch_of`): a caller's list that grows while it is walked changes nothing."""
    return batch_of(iterable_of(name, items, what))


def batch_of(items: Iterable[Any]) -> list[Any]:
    """A batch read once, as a new list: a list subclass through its storage (its own
    ``__iter__`` never runs, as for a transcript), anything else by iterating it."""
    return listed(items) if is_list(items) else list(items)


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on Python 3.10 (which shows no notes, but keeps them)."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:
        notes = getattr(exc, "__notes__", None)
        setattr(exc, "__notes__", [*notes, note] if isinstance(notes, list) else [note])  # noqa: B010


# A message's fields -------------------------------------------------------------------


_MISSING: Any = object()


def where(index: int | None) -> str:
    """How an error names a message: ``message 3``, or ``message`` when it is alone."""
    return "message" if index is None else f"message {index}"


def named_at(error: MessageError, index: int) -> MessageError:
    """``error``, raised for a message read alone, as it names message ``index`` of a
    transcript: the same class and field, the text led by ``message {index}``."""
    text, alone = str(error), where(None)
    return type(error)(where(index) + text.removeprefix(alone), index, error.field)


def role_of(message: Any, index: int | None = None) -> str:
    """The message's role, checked: a dict whose ``role`` is a str."""
    if not issubclass(type(message), dict):
        raise MessageTypeError(f"{where(index)}: expected a dict, got {type(message).__name__}", index, "")
    role = entry(message, "role", _MISSING)
    text = str_value(role)
    if text is not None:
        return text
    if role is _MISSING:
        raise MessageTypeError(f"{where(index)}, field 'role': missing", index, "role")
    raise MessageTypeError(f"{where(index)}, field 'role': expected str, got {type(role).__name__}", index, "role")


def check_pinned(pinned: Iterable[int], n: int) -> None:
    """Every pinned index is one of the ``n`` messages (the core's ``check_pinned``)."""
    for p in pinned:
        if p >= n:
            raise ArgumentError(f"pinned index {p} is out of range for {n} messages")


def content_and_calls(message: dict[str, Any], index: int | None = None) -> tuple[Any, list[Any] | None]:
    """The message's content (checked: str, list or None) and tool_calls (list or None)."""
    content = entry(message, "content")
    if type(content) is not str and content is not None and type(content) is not list:
        if not issubclass(type(content), (str, list)):  # by its type: `__class__` may claim one
            raise MessageTypeError(
                f"{where(index)}, field 'content': expected str, list or None, got {type(content).__name__}",
                index,
                "content",
            )
        content = plain(content)
    calls = entry(message, "tool_calls")
    if calls is not None and type(calls) is not list:
        if not is_list(calls):
            raise MessageTypeError(
                f"{where(index)}, field 'tool_calls': expected list or None, got {type(calls).__name__}",
                index,
                "tool_calls",
            )
        calls = listed(calls)
    return content, calls


def is_volatile_content(content: Any) -> bool:
    """True when content (a str, or a list whose first part's ``text`` is one) opens with
    :data:`VOLATILE_TAIL_TAG`."""
    if type(content) is not str and type(content) is not list:
        content = plain(content)
    if type(content) is str:
        return content.startswith(VOLATILE_TAIL_TAG)
    if type(content) is list and content and issubclass(type(content[0]), dict):
        text = plain(entry(content[0], "text"))
        return type(text) is str and text.startswith(VOLATILE_TAIL_TAG)
    return False


def check_system(system: Any) -> None:
    """A separate system prompt is None, a str or a list of blocks."""
    if system is not None and not issubclass(type(system), (str, list)):
        raise MessageTypeError(f"system: expected str, list or None, got {type(system).__name__}", None, "system")


def check_tools(tools: Any) -> None:
    """Tool definitions are None or a list of dicts."""
    if tools is None:
        return
    if not is_list(tools):
        raise MessageTypeError(f"tools: expected a list or None, got {type(tools).__name__}", None, "tools")
    for i, tool in enumerate(listed(tools)):  # a subclass through its storage, as sized
        if not issubclass(type(tool), dict):
            raise MessageTypeError(f"tools[{i}]: expected a dict, got {type(tool).__name__}", i, "tools")


@contextmanager
def named_prompt(name: str, sizing: Counting) -> Iterator[None]:
    """Sizing a separate system prompt or the tools (``name``), as a system message's
    content (:func:`prompt_message`): a value in it with no JSON form, or nested too
    deep, is named by that argument, as the core names it, not as a message's content.
    With a custom estimator (``sizing`` a pair) what its adapter raises passes through as
    raised, as what every callback raises does natively."""
    try:
        yield
    except MessageError as exc:
        if exc.index is not None or exc.field != "content" or isinstance(sizing, tuple):
            raise
        problem = str(exc).partition(": ")[2]  # what follows "message, field 'content'"
        raise type(exc)(f"{name}: {problem}", None, name) from None


def prompt_message(content: Any) -> dict[str, Any]:
    """What a separate system prompt or the tool definitions cost as: a system message
    with that content (a list, such as the tools, is sized as its compact JSON)."""
    return {"role": "system", "content": content}


def spelled(value: Any, choices: tuple[str, ...]) -> str | None:
    """The one of ``choices`` that ``value`` spells, as a plain str; None when it spells
    none or is no str. A str subclass (a str enum) is read by the text it holds, not by
    its ``__eq__``, which could say it equals anything."""
    if not is_str(value):
        return None
    text = str.__str__(value)
    return text if text in choices else None


def choice_error(name: str, value: Any, choices: tuple[str, ...]) -> ArgumentError:
    """``name must be 'a', 'b' or 'c', not value``."""
    listed = ", ".join(map(repr, choices[:-1])) + f" or {choices[-1]!r}"
    return ArgumentError(f"{name} must be {listed}, not {quoted(value)}")


# Sizing ------------------------------------------------------------------------------

SIZINGS = ("seed", "provider")
"""How messages are sized: by length as the seeds do, or opaque payloads not by length."""
DEFAULT_IMAGE_TOKENS = 1_600
"""What an image or document block costs with ``sizing="provider"``: what a provider bills
for a large image (Anthropic about width × height / 750, near 1,600 for the largest image
it keeps; OpenAI 1,105 for a 1024 × 1024 image at high detail), so a screenshot's
estimate stays on the safe side."""


OPAQUE_BLOCKS = frozenset(
    {"image_url", "file", "image", "document", "input_image", "input_file", "computer_screenshot"}
)
"""Block types provider sizing sizes as a flat ``image_tokens`` (``computer_screenshot``: a
Responses computer-use call's output)."""
LEFT_OUT = {"thinking": "signature", "redacted_thinking": "data", "reasoning": "encrypted_content"}
"""The entry provider sizing measures each block type without."""


class Opaque:
    """How provider sizing reads an object (a ``visit`` for :func:`~._js.json_length` and
    :func:`~._js.compact_json`): an opaque block not at all, counted in ``blocks``; a
    block with a left-out entry without it."""

    __slots__ = ("blocks",)

    def __init__(self) -> None:
        self.blocks = 0

    def billed(self, tokens: int, image_tokens: int) -> int:
        """``tokens`` of the text read, plus ``image_tokens`` for each opaque block; past a
        u64 the cost saturates, as the core's sums do."""
        return min(U64_MAX, tokens + self.blocks * image_tokens)

    def __call__(self, obj: dict[str, Any]) -> Any:
        kind = dict.get(obj, "type")  # a subclass through its storage
        if not issubclass(type(kind), str):
            return None
        kind = str.__str__(kind)  # a subclass by the text it holds, not its hash
        if kind in OPAQUE_BLOCKS:
            self.blocks += 1
            return OPAQUE
        return LEFT_OUT.get(kind)


def image_tokens_for(sizing: str, image_tokens: int) -> int | None:
    """What the backends take for ``sizing``: the image cost for provider sizing, None for
    the seeds' sizing; after checking the options."""
    spelling = spelled(sizing, SIZINGS)
    if spelling is None:
        raise choice_error("sizing", sizing, SIZINGS)
    images = whole("image_tokens", image_tokens)
    return None if spelling == "seed" else images


# Custom estimators --------------------------------------------------------------------


def checked(estimate: Estimator, text: str, index: int | None = None) -> int:
    """``estimate(text)``, verified to be an int from 0 to :data:`ESTIMATE_MAX`; an
    :class:`EstimatorError` names message ``index`` when the text is one's."""
    tokens = estimate(text)
    problem = None
    if not is_int(tokens):
        problem = f"an int, got {type(tokens).__name__}"
    elif (tokens := stored(tokens)) < 0:
        problem = f"a non-negative int, got {shown(tokens)}"
    elif tokens > ESTIMATE_MAX:
        problem = f"at most {ESTIMATE_MAX}, got {shown(tokens)}"
    if problem is not None:
        named = "" if index is None else f"message {index}: "
        raise EstimatorError(f"{named}estimate_tokens must return {problem}", index)
    return tokens


def estimator_text(message: Any, index: int | None = None, whole: bool = False, visit: Visit | None = None) -> str:
    """The text a custom estimator sizes for ``message``: its content (a str as is,
    anything else as compact JSON) followed by the compact JSON of its tool_calls; for
    an item sized ``whole`` (a Responses item other than a message), its compact JSON.
    The JSON is written as ``visit`` says (provider sizing: :class:`Opaque`)."""
    if whole:
        return compact_json(message, "", index, visit)
    content, calls = content_and_calls(message, index)
    if type(content) is not str:
        content = compact_json("" if content is None else content, "content", index, visit)
    return content if calls is None else content + compact_json(calls, "tool_calls", index, visit)


def sizers(estimate: Estimator | str | None, images: int | None = None) -> Counting:
    """What the backends take for ``estimate_tokens=``: None for chars/4, the name of an
    embedded encoding as it is, or the ``(per_message, per_text)`` pair for a callable
    (sizing as provider sizing does when ``images``, an image's cost, is given).

    A message then costs ``estimate(text) + 4`` (see :func:`estimator_text`); both
    backends call these same two functions, so a custom estimator gives identical
    results on either.
    """
    if estimate is None:
        return None
    if isinstance(estimate, str):
        return encoding_name(estimate)
    if not callable(estimate):
        raise EstimatorError(f"estimate_tokens must be callable or an encoding name, got {type(estimate).__name__}")
    return estimator_sizers(estimate, images)


def estimator_sizers(estimate: Estimator, images: int | None = None) -> Sizers:
    """The ``(per_message, per_text)`` pair sizing by ``estimate``; with ``images``, as
    provider sizing does: ``estimate`` is handed the text chars/4 would measure (opaque
    blocks and left-out entries written as nothing) and each opaque block costs ``images``."""

    def per_message(index: int | None, message: Any, whole: bool) -> int:
        return checked(estimate, estimator_text(message, index, whole), index) + MESSAGE_OVERHEAD

    def per_text(text: str) -> int:
        return checked(estimate, text)

    if images is None:
        return per_message, per_text
    image_cost = images

    def per_message_billed(index: int | None, message: Any, whole: bool) -> int:
        opaque = Opaque()
        text = estimator_text(message, index, whole, opaque)
        return opaque.billed(checked(estimate, text, index) + MESSAGE_OVERHEAD, image_cost)

    return per_message_billed, per_text


def encoding_name(name: Any) -> EncodingName:
    """``name``, checked to be one of :data:`ENCODINGS`."""
    known = spelled(name, ENCODINGS)
    if known is not None:
        return cast(EncodingName, known)
    raise ArgumentError(f"unknown encoding {quoted(name)}: expected one of 'o200k_base', 'cl100k_base'")


def tiktoken_count(name: str) -> Estimator:
    """``len(encoding.encode(text, disallowed_special=()))`` for tiktoken's encoding
    ``name``: the exact count the native backend computes for an embedded encoding.

    Raises :class:`~contextfold.ArgumentError` when tiktoken is not installed or the
    encoding cannot be loaded (not in tiktoken's cache and no network).
    """
    try:
        import tiktoken
    except ImportError:
        raise ArgumentError("tiktoken is not installed: pip install 'contextfold[tiktoken]'") from None
    try:
        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # missing file, no network, unknown name: all mean "not available"
        raise ArgumentError(f"tiktoken encoding {name!r} is not available offline: {exc}") from None

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    count.__name__ = f"tiktoken_{name}"
    return count


# Handoff packing ----------------------------------------------------------------------


class HandoffPack(NamedTuple):
    """The result of :func:`contextfold.pack_handoff` (immutable; fields by name)."""

    messages: list[Any]
    """The packed transcript: the caller's own message objects, plus the note (a new dict)."""
    dropped: int
    """Input messages not in the output (a dropped volatile tail included)."""
    fits: bool
    """False when the system messages, directive and pinned turns alone exceed the budget."""
    tokens: int
    """Estimated tokens of the output, the note and a separate ``system`` included."""
    budget: int
    """``target_context_tokens - reserve_output_tokens``."""
    note: str | None
    """The note's text, or None when nothing was folded (or no note fitted)."""
    kept: list[int]
    """Indices of the input messages kept, in output order."""
    applied_edits: tuple[AppliedEdit, ...]
    """The edits that changed the transcript (``edits=``), in the order applied."""


def elision_marker(n: int) -> str:
    """The note line counting ``n`` dropped messages the note does not list (a count the
    core holds: from 0 to 2**64 - 1)."""
    n = whole("n", n)
    return f"[… {n} earlier message{'' if n == 1 else 's'} not shown]"


class PackedRequest(NamedTuple):
    """The result of :func:`contextfold.pack_request` (immutable; fields by name)."""

    body: bytes
    """The packed body; the input object itself when it is ``bytes`` and already fits."""
    fits: bool
    """False when the system messages, directive and pinned turns alone exceed the budget."""
    tokens: int
    """Estimated tokens of the packed messages, the note and a top-level ``system``."""
    budget: int
    """``target_context_tokens - reserve_output_tokens``."""
    dropped: int
    """Input messages not in the packed body."""
    note: str | None
    """The note's text, or None when nothing was folded (or no note fitted)."""
    kept: list[int]
    """Indices of the input messages kept, in output order."""
    applied_edits: tuple[AppliedEdit, ...]
    """The edits that changed the transcript (``edits=``), in the order applied."""


def as_bytes(body: Any) -> bytes:
    """A request body as ``bytes``: itself when it is ``bytes``, else a copy (a mutable
    buffer could change while it is read), a ``str`` encoded as UTF-8."""
    if type(body) is bytes:
        return body
    # Read as stored: a subclass's own `__bytes__` or `encode` never runs.
    if issubclass(type(body), (bytes, bytearray, memoryview)):
        return bytes(memoryview(body))
    if is_str(body):
        try:
            return str.encode(body, "utf-8")
        except UnicodeEncodeError as exc:
            raise RequestError(f"not UTF-8: the str holds a lone surrogate at index {exc.start}") from None
    raise ArgumentTypeError(f"body must be bytes, bytearray, memoryview or str, got {type(body).__name__}")


def handoff_budget(target_context_tokens: int, reserve_output_tokens: int = 0) -> int:
    """Tokens the packed transcript may use: the target window minus the reserved output."""
    target = whole("target_context_tokens", target_context_tokens)
    reserve = whole("reserve_output_tokens", reserve_output_tokens)
    if reserve > target:
        raise ArgumentError(f"reserve_output_tokens ({reserve}) exceeds target_context_tokens ({target})")
    return target - reserve


SHAPES = ("auto", "openai", "anthropic", "responses")
"""The message shapes packing understands (``auto`` detects Responses items and
Anthropic blocks)."""
CUTS = ("greedy", "chunked")
"""Where the kept tail may start."""
Shape = Literal["auto", "openai", "anthropic", "responses"]
Cut = Literal["greedy", "chunked"]
SizingName = Literal["seed", "provider"]


@dataclass(frozen=True, slots=True)
class PackOptions:
    """How to pack: every option of :func:`~contextfold.pack_handoff`,
    :func:`~contextfold.pack_many`, :func:`~contextfold.pack_request` and
    :func:`~contextfold.pack_requests`, checked once, when the value is built.

    Build one per route and pass it as ``options=``; it is immutable and hashable, so it
    can be shared by threads and used as a key. Every packing function also takes these
    fields as keywords (a value is then built for the call, and reused while the same
    plain keywords come again). The fields mean what the functions' docstrings say; the
    derived fields (``budget``, ``chunk``, ``step``, ``images``, ``sizers``) are what the
    backends pack with.
    """

    target_context_tokens: int
    reserve_output_tokens: int = 0
    estimate_tokens: Estimator | EncodingName | None = None
    pinned: Iterable[int] = ()
    """Stored as a tuple of ints."""
    summary: str | None = None
    shape: Shape = "auto"
    cut: Cut = "greedy"
    chunk_tokens: int | None = None
    sizing: SizingName = "seed"
    image_tokens: int = DEFAULT_IMAGE_TOKENS
    edits: Sequence[Edit] = ()
    """Context edits applied in order before folding; stored as a tuple."""
    budget: int = field(init=False, repr=False, compare=False)
    """``target_context_tokens - reserve_output_tokens``."""
    chunk: int | None = field(init=False, repr=False, compare=False)
    """The chunked cut's chunk size (``chunk_tokens`` or a quarter of the budget, at
    least 1); None for the greedy cut."""
    step: int = field(init=False, repr=False, compare=False)
    """Where ClearToolUses may cut, whatever the cut: every ``chunk_tokens`` (else a
    quarter of the budget, at least 1) of tool results."""
    images: int | None = field(init=False, repr=False, compare=False)
    """What an image costs with provider sizing; None for the seeds' sizing."""
    sizers: Counting = field(init=False, repr=False, compare=False)
    """None (chars/4), an embedded encoding's name, or a custom estimator's pair."""
    native: tuple[Any, ...] = field(init=False, repr=False, compare=False)
    """``(budget, sizers, images, summary, shape, chunk, pinned, edits, step)``: what the
    extension reads, in one attribute (reading nine was a tenth of a short call)."""

    def __post_init__(self) -> None:
        # The one place these rules are written; the first option at fault raises.
        images = image_tokens_for(self.sizing, self.image_tokens)
        budget = handoff_budget(self.target_context_tokens, self.reserve_output_tokens)
        pins = self.pinned
        if type(pins) is not tuple or not all(type(p) is int and 0 <= p <= U64_MAX for p in pins):
            try:
                each = iter(pins)
            except TypeError:
                raise ArgumentError(f"pinned must be an iterable of ints, got {type(pins).__name__}") from None
            pins = tuple(whole("pinned index", p) for p in each)
        summary = self.summary
        if summary is not None:
            if not is_str(summary):
                raise ArgumentError(f"summary must be a str or None, got {type(summary).__name__}")
            summary = str.__str__(summary)  # a subclass by the text it holds, as natively
        shape = spelled(self.shape, SHAPES)
        if shape is None:
            raise choice_error("shape", self.shape, SHAPES)
        cut = spelled(self.cut, CUTS)
        if cut is None:
            raise choice_error("cut", self.cut, CUTS)
        chunk_tokens = None if self.chunk_tokens is None else whole("chunk_tokens", self.chunk_tokens, 1)
        step = max(1, budget // 4) if chunk_tokens is None else chunk_tokens
        chunk = step if cut == "chunked" else None
        edits = check_edits(self.edits)
        counting = sizers(self.estimate_tokens, images)
        # The choices as the plain strs they spell (a str enum's member compares and
        # hashes as its value would, but reads as itself).
        estimate = counting if isinstance(counting, str) else self.estimate_tokens
        native = (budget, counting, images, summary, shape, chunk, pins, edits, step)
        for name, value in (
            ("summary", summary),
            ("shape", shape),
            ("cut", cut),
            ("sizing", str.__str__(self.sizing)),
            ("estimate_tokens", estimate),
            ("pinned", pins),
            ("edits", edits),
            ("budget", budget),
            ("chunk", chunk),
            ("step", step),
            ("images", images),
            ("sizers", counting),
            ("native", native),
        ):
            object.__setattr__(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as the options given and built again: the derived fields hold closures
        # over a custom estimator, which pickle cannot write (the estimator itself it can).
        given = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return (functools.partial(type(self), **given), ())


def calls_out(counting: Counting) -> TypeIs[Sizers]:
    """Whether sizing by ``counting`` runs the caller's code: a custom estimator's pair
    (``MessageSizer::calls_out`` natively)."""
    return counting is not None and not isinstance(counting, str)


def bytes_options(options: PackOptions) -> EncodingName | None:
    """What the bytes path counts with: None (chars/4) or an embedded encoding. A custom
    estimator is refused: it would run Python code in the middle of the native bytes
    path, so neither backend takes one."""
    sizing = options.sizers
    if calls_out(sizing):
        raise ArgumentError(
            "pack_request takes estimate_tokens=None or an encoding name ('o200k_base', 'cl100k_base'), "
            f"not {type(options.estimate_tokens).__name__}: a custom estimator runs with pack_handoff"
        )
    return sizing


class WindowKeywords(TypedDict, total=False):
    """:class:`PackOptions`' fields but the window, as keywords: what an adapter that names
    its window itself (``max_tokens``) takes."""

    reserve_output_tokens: int
    estimate_tokens: Estimator | EncodingName | None
    pinned: Iterable[int]
    summary: str | None
    shape: Shape
    cut: Cut
    chunk_tokens: int | None
    sizing: SizingName
    image_tokens: int
    edits: Sequence[Edit]


class PackKeywords(WindowKeywords, total=False):
    """:class:`PackOptions`' fields as keywords, for the packing functions' ``**options``."""

    target_context_tokens: int


OUTPUT_CAPS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
"""A request body's output caps, in the order a gateway takes the first that is a count
(an int of 0 or more) as the request's output reserve."""

RequestHead = tuple[str | None, tuple[int | None, int | None, int | None], int | None, int | None]
"""``(model, caps, messages, input)``: what a gateway reads of a request body (see
:func:`contextfold.reference.request_head`)."""


def loaded_head(body: bytes) -> RequestHead:
    """A request body's head (:data:`RequestHead`) read with ``json.loads``: what the
    reference backend reads, and what a gateway reads when the bytes path cannot say
    exactly. The body is read as UTF-8 (a leading BOM skipped), as packing reads it:
    ``json.loads`` alone would also read UTF-16 and UTF-32, which packing refuses."""
    try:
        request = json.loads(body.decode("utf-8-sig"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        request = None
    if not issubclass(type(request), dict):
        return None, (None, None, None), None, None
    first, second, third = (request.get(key) for key in OUTPUT_CAPS)
    model, messages, items = request.get("model"), request.get("messages"), request.get("input")
    return (
        model if isinstance(model, str) else None,
        (as_count(first), as_count(second), as_count(third)),
        len(messages) if isinstance(messages, list) else None,
        len(items) if isinstance(items, list) else None,
    )


def as_count(value: Any) -> int | None:
    """``value`` when it is an output cap's count (an int of 0 or more, not a bool, read by
    its stored value), else None."""
    if not is_int(value):
        return None
    count = stored(value)
    return count if count >= 0 else None


def first_count(values: Iterable[Any], default: int) -> int:
    """The first of ``values`` that is a count (:func:`as_count`), else ``default``: a
    request's output reserve from its caps, in ``OUTPUT_CAPS`` order."""
    return next((count for count in map(as_count, values) if count is not None), default)


_BUILT: dict[tuple[tuple[str, Any], ...], PackOptions] = {}
_BUILT_MAX = 1_024


def pack_options(options: PackOptions | None, keywords: Mapping[str, Any]) -> PackOptions:
    """The options of a call: ``options``, with ``keywords`` over it when both are given.

    Keywords alone build a value; one made of exact ints, strs and Nones (and pins in a
    list or tuple of exact ints, edits in one of exact edit values, whose fields are exact
    too) is kept and reused, so a call with keywords costs a dict lookup, not a check of
    every option, up to a bound. No other type is kept: a subclass or a bool could compare
    equal to a value it does not behave as. A keyword that names no option (a derived
    field such as ``budget`` included) is an :class:`ArgumentTypeError` naming it.

    For ``pack_handoff`` and ``pack_request`` the native backend first looks up plain
    keywords of exact ints, strs and Nones in this cache itself (``call_options`` in
    rust/python/src/args.rs; keywords that are the very objects of the thread's last
    call that found its options there are matched by identity, so an entry replaced in
    the cache meanwhile is not seen), and this runs only when they are not there.
    """
    if options is not None:
        if not isinstance(options, PackOptions):
            raise ArgumentTypeError(f"options must be a PackOptions, got {type(options).__name__}")
        return replace(options, **_checked(keywords)) if keywords else options
    # Types are told apart by identity: `in` a tuple of types compares each with `==`,
    # which cost a third of a call with keywords (and runs a metaclass's `__eq__`).
    key = []
    for name, value in keywords.items():
        if type(name) is not str:  # (`**{name: ...}` passes a str subclass's own __eq__ to the key)
            return _build(keywords)
        kind = type(value)
        if kind is int or kind is str or value is None:
            key.append((name, value))
        elif kind is tuple or kind is list:
            # Pins and edits (frozen, every field an exact int, str, bool or tuple of
            # strs, so equal edits act alike; one whose field was set behind its frozen
            # back to a value of another type, maybe equal, `True` for 1, is built, so
            # checked, again); a loop, not all(...): a generator costs more than the
            # check.
            for item in value:
                item_kind = type(item)
                if item_kind is int:
                    continue
                if not ((item_kind is ClearToolUses or item_kind is ClearThinking) and has_exact_fields(item)):
                    return _build(keywords)
            key.append((name, (*value,)))  # not tuple(value), which allocates after reading (_js.listed)
        else:
            return _build(keywords)
    built = _BUILT.get(frozen := tuple(key))  # every part hashable: exact ints, strs, edits
    if built is None:
        # Built of the key, not of `keywords` read again: code run meanwhile (a finaliser)
        # could change them, and the value would then be kept under the wrong key.
        built = _build(dict(frozen))
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        _BUILT[frozen] = built
    return built


_OPTION_NAMES = tuple(f.name for f in fields(PackOptions) if f.init)


def _checked(keywords: Mapping[str, Any]) -> Mapping[str, Any]:
    """``keywords``, each an option's name: a derived field (``budget``) given beside
    ``options=`` would reach ``replace()``, which refuses it with a ValueError of its own."""
    for name in keywords:
        if name not in _OPTION_NAMES:
            raise ArgumentTypeError(f"unexpected option {quoted(name)}; the options are {', '.join(_OPTION_NAMES)}")
    return keywords


def _build(keywords: Mapping[str, Any]) -> PackOptions:
    return PackOptions(**_checked(keywords))


def switch_point() -> None:
    """Does nothing, in Python code: a long native batch calls it now and then, and the
    interpreter, on entering it, hands the GIL to a thread waiting for it and runs pending
    signal handlers, as it does between bytecodes."""
