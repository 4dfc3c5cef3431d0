"""OpenAI Responses API items, in pure Python: the reference for ``contextfold-core``'s items.rs.

An item whose ``type`` is absent or ``"message"`` is a message, read and sized like a chat
message (``developer`` counts as ``system``). Every other item is sized by its whole
compact JSON: ``*_call`` items are calls, ``*_call_output`` items answer them by
``call_id``, ``reasoning`` items belong to the item after them, and an item of any other
type is kept or dropped whole, never rejected.
"""

from __future__ import annotations

from typing import Any

from .._contract import content_and_calls, role_of, where
from .._js import entry, has_entry, is_str, plain, str_value
from ..errors import MessageTypeError


def rules_role(role: str) -> str:
    """The role the packing rules see in a message's ``role`` (``message.rs``'s
    ``role_named``): OpenAI's ``developer`` is its ``system`` for newer models."""
    return "system" if role == "developer" else role


MESSAGE = "message"
CALL = "call"
OUTPUT = "output"
REASONING = "reasoning"
OTHER = "other"

_ROLES = {CALL: "assistant", REASONING: "assistant", OUTPUT: "tool", OTHER: ""}
"""The role an item plays in packing ("" is no special role)."""


def marks_responses(message: Any) -> bool:
    """True for an entry that marks its transcript as Responses items: a ``type`` and no
    ``role``, or a ``message``, ``function_call`` or ``function_call_output`` item."""
    if not issubclass(type(message), dict) or not has_entry(message, "type"):
        return False
    kind = plain(entry(message, "type"))
    return not has_entry(message, "role") or (
        type(kind) is str and kind in ("message", "function_call", "function_call_output")
    )


def _kind(type_: str) -> str:
    if type_ == "message":
        return MESSAGE
    if type_ == "reasoning":
        return REASONING
    if type_.endswith("_call"):
        return CALL
    if type_.endswith("_call_output"):
        return OUTPUT
    return OTHER


def check_item(item: Any, index: int | None = None) -> tuple[str, str]:
    """``(role, kind)`` of a Responses item, after checking it: a dict; its ``type``, when
    present, a str; a message item as a chat message; a call's or output's ``call_id``,
    when present, a str."""
    if not issubclass(type(item), dict):
        raise MessageTypeError(f"{where(index)}: expected a dict, got {type(item).__name__}", index, "")
    kind = MESSAGE
    if has_entry(item, "type"):
        type_ = entry(item, "type")
        if not issubclass(type(type_), str):  # by its type: `__class__` may claim one
            raise MessageTypeError(
                f"{where(index)}, field 'type': expected str, got {type(type_).__name__}", index, "type"
            )
        kind = _kind(plain(type_))
    if kind == MESSAGE:
        role = role_of(item, index)
        content_and_calls(item, index)
        return rules_role(role), kind
    call_id = entry(item, "call_id", "")  # absent: nothing to check
    if kind in (CALL, OUTPUT) and not is_str(call_id):
        got = type(call_id).__name__
        raise MessageTypeError(f"{where(index)}, field 'call_id': expected str, got {got}", index, "call_id")
    return _ROLES[kind], kind


def peek_item(item: Any) -> tuple[str, str]:
    """``(role, kind)`` of a Responses item read leniently, checking nothing (``peek_item``
    in items.rs): what :func:`check_item` gives for a well-formed item; otherwise an entry
    that is not a dict, or whose ``type`` is not a str, is an other item, and a role that
    is not a str reads as ``""`` (no special role)."""
    if not issubclass(type(item), dict):
        return "", OTHER
    kind = MESSAGE
    if has_entry(item, "type"):
        type_ = str_value(entry(item, "type"))
        kind = OTHER if type_ is None else _kind(type_)
    if kind == MESSAGE:
        return rules_role(str_value(entry(item, "role")) or ""), kind
    return _ROLES[kind], kind
