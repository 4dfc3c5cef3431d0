"""Context edits: the values a caller lists in ``edits=[...]`` (SPEC §14), and what an edit
that ran reports.

An edit changes values inside messages before folding; it never adds, drops or reorders
messages (a Responses ``reasoning`` item removed by :class:`ClearThinking` aside). The
algorithm lives in ``reference/edits.py`` and ``contextfold-core``'s edits.rs; this module
holds only the values, checked when they are built, so both backends read them as they are.

Every check raises one of contextfold's own exceptions naming the field:
:class:`~contextfold.ArgumentTypeError` for a wrong type, :class:`~contextfold.ArgumentError`
for a wrong value. Counts are ints from 0 to 2**64 - 1 (what the native core holds); a
bool is not a count. Texts (``placeholder``, tool names) must be encodable as UTF-8: a
lone surrogate cannot be written into a request.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, cast

from ._js import is_int, is_str, shown, stored
from .errors import ArgumentError, ArgumentTypeError

__all__ = ["AppliedEdit", "ClearThinking", "ClearToolUses", "Edit", "check_edits"]

_COUNT_MAX = 2**64 - 1


def _count(owner: str, name: str, value: Any) -> int:
    """``value`` as a plain int from 0 to 2**64 - 1, else an error naming ``owner.name``."""
    if not is_int(value):
        raise ArgumentTypeError(f"{owner}.{name} must be an int, got {type(value).__name__}")
    number = stored(value)
    if not 0 <= number <= _COUNT_MAX:
        raise ArgumentError(f"{owner}.{name} must be from 0 to {_COUNT_MAX}, got {shown(number)}")
    return number


def iterable_of(name: str, items: Any, what: str) -> Iterable[Any]:
    """``items``, refused when it is no iterable, or one str (or bytes-like value), which
    iterates as characters: ``name must be an iterable of {what}``."""
    kind = type(items)  # by its type: `__class__` may claim one it is not
    if issubclass(kind, (str, bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"{name} must be an iterable of {what}, not a {type(items).__name__}")
    # What `iter()` takes: `__iter__`, or the old sequence protocol of `__getitem__`.
    if not (hasattr(kind, "__iter__") or hasattr(kind, "__getitem__")):
        raise ArgumentTypeError(f"{name} must be an iterable of {what}, got {type(items).__name__}")
    return cast("Iterable[Any]", items)


def text_field(owner: str, name: str, value: Any) -> str:
    """``value`` as a plain str without lone surrogates, else an error naming ``owner.name``."""
    if not is_str(value):
        raise ArgumentTypeError(f"{owner}.{name} must be a str, got {type(value).__name__}")
    text = str.__str__(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgumentError(f"{owner}.{name} holds a lone surrogate at index {exc.start}") from None
    return text


@dataclass(frozen=True, slots=True, init=False)
class ClearToolUses:
    """Replace the results of old tool uses by ``placeholder`` once the transcript costs
    more than ``trigger`` tokens (None: the packing budget), system and tools included.

    A tool use is one result and the call it answers (OpenAI ``tool`` message, Anthropic
    ``tool_result`` block, Responses ``function_call_output`` / ``custom_tool_call_output``).
    The newest ``keep`` tool uses, and those calling a tool named in ``exclude_tools``, are
    never edited. With ``clear_tool_inputs`` the call's arguments are emptied too. The
    cleared set is always the oldest eligible results and grows in steps, so the edited
    prefix stays byte-identical while a transcript grows; an edit that would free fewer
    than ``clear_at_least`` tokens does nothing. Its trigger, cut points and
    ``clear_at_least`` are read on the transcript as given, whatever edits precede it in
    the list (so that none of them can move its cut points as the transcript grows): it
    then clears over their output and reports what it changed there, which may be less.
    """

    trigger: int | None
    keep: int
    clear_at_least: int
    exclude_tools: tuple[str, ...]
    clear_tool_inputs: bool
    placeholder: str

    def __init__(
        self,
        *,
        trigger: int | None = None,
        keep: int = 3,
        clear_at_least: int = 0,
        exclude_tools: Iterable[str] = (),
        clear_tool_inputs: bool = False,
        placeholder: str = "[cleared]",
    ) -> None:
        owner = "ClearToolUses"
        if trigger is not None:
            trigger = _count(owner, "trigger", trigger)
        tools = iterable_of(f"{owner}.exclude_tools", exclude_tools, "str")
        names = tuple(text_field(owner, f"exclude_tools[{i}]", name) for i, name in enumerate(tools))
        if type(clear_tool_inputs) is not bool:  # by its type: `__class__` may claim bool
            raise ArgumentTypeError(f"{owner}.clear_tool_inputs must be a bool, got {type(clear_tool_inputs).__name__}")
        set_field = object.__setattr__
        set_field(self, "trigger", trigger)
        set_field(self, "keep", _count(owner, "keep", keep))
        set_field(self, "clear_at_least", _count(owner, "clear_at_least", clear_at_least))
        set_field(self, "exclude_tools", names)
        set_field(self, "clear_tool_inputs", clear_tool_inputs)
        set_field(self, "placeholder", text_field(owner, "placeholder", placeholder))


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearThinking:
    """Remove thinking (Anthropic ``thinking`` / ``redacted_thinking`` blocks, Responses
    ``reasoning`` items) from all but the newest ``keep`` assistant turns that hold some,
    never from a turn whose tool calls are still unanswered. ``keep=0`` clears the turn in
    progress too once its calls are answered, which Anthropic refuses in a tool loop with
    extended thinking on (it asks for that turn's thinking back)."""

    keep: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "keep", _count("ClearThinking", "keep", self.keep))


Edit = ClearToolUses | ClearThinking
"""One context edit."""


class AppliedEdit(NamedTuple):
    """An edit that changed the transcript (as Anthropic's ``applied_edits`` reports it)."""

    type: Literal["clear_tool_uses", "clear_thinking"]
    cleared_tool_uses: int
    """Tool uses whose result (or, with ``clear_tool_inputs``, call input) was replaced."""
    cleared_thinking_turns: int
    """Assistant turns whose thinking was removed."""
    cleared_input_tokens: int
    """The transcript's cost before the edit less its cost after (as packing counts it)."""


def check_edits(edits: Any) -> tuple[Edit, ...]:
    """``edits`` checked: None or a list or tuple of :class:`ClearToolUses` and
    :class:`ClearThinking` values, returned as a tuple (applied in its order)."""
    if edits is None:
        return ()
    if issubclass(type(edits), (str, bytes)) or not issubclass(type(edits), Sequence):
        raise ArgumentTypeError(f"edits must be a list or tuple of edits, got {type(edits).__name__}")
    out: list[Edit] = []
    for i, edit in enumerate(edits):
        kind = type(edit)  # told by identity: a subclass may read otherwise, a metaclass compare
        if kind is not ClearToolUses and kind is not ClearThinking:
            raise ArgumentTypeError(f"edits[{i}] must be a ClearToolUses or ClearThinking, got {kind.__name__}")
        out.append(_rebuilt(edit))
    return tuple(out)


def has_exact_fields(edit: Edit) -> bool:
    """Whether every field of ``edit`` has the very type its constructor gives it (each
    tool name an exact str): false once one was set behind its frozen back
    (``object.__setattr__``) to a value of another type, which may compare equal to a
    checked value (``True == 1``) without being one. ``edit`` is of one of the two types
    exactly (the caller told it by identity)."""
    if not isinstance(edit, ClearToolUses):
        return type(edit.keep) is int
    trigger, names = edit.trigger, edit.exclude_tools
    if not (
        type(edit.keep) is int
        and type(edit.clear_at_least) is int
        and (trigger is None or type(trigger) is int)
        and type(names) is tuple
        and type(edit.clear_tool_inputs) is bool
        and type(edit.placeholder) is str
    ):
        return False
    for name in names:  # a loop, not all(...): see pack_options
        if type(name) is not str:
            return False
    return True


def _rebuilt(edit: Edit) -> Edit:
    """``edit`` built again from its fields, so that one set behind its frozen back
    (``object.__setattr__``) is checked as its constructor checks it."""
    return replace(edit)
