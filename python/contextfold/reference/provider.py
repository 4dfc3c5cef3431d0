"""Provider sizing, in pure Python: the reference for ``contextfold-core``'s provider.rs.

An image or document block costs a flat ``image_tokens`` instead of its JSON; a
``thinking`` block's ``signature``, a ``redacted_thinking`` block's ``data`` and a
``reasoning`` item's ``encrypted_content`` cost nothing; everything else is sized as the
default estimate sizes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._contract import LEFT_OUT, MESSAGE_OVERHEAD, OPAQUE_BLOCKS, PerMessage
from .._js import OPAQUE, Visit, json_length

MessageUnits = Callable[[dict[str, Any], "int | None", Visit], int]
"""``tokens.message_units``: a message's text length, objects measured as a visitor says."""


class _Opaque:
    """A ``json_length`` visitor: counts opaque blocks, leaves payloads out."""

    __slots__ = ("blocks",)

    def __init__(self) -> None:
        self.blocks = 0

    def __call__(self, obj: dict[str, Any]) -> Any:
        kind = obj.get("type")
        if not isinstance(kind, str):
            return None
        if kind in OPAQUE_BLOCKS:
            self.blocks += 1
            return OPAQUE
        return LEFT_OUT.get(kind)


def provider_sizer(image_tokens: int, message_units: MessageUnits) -> PerMessage:
    """The per-message sizer for ``sizing="provider"``, measuring a message's text with
    ``message_units`` (the default sizer's own measure)."""

    def tokens(index: int | None, message: dict[str, Any], whole: bool) -> int:
        opaque = _Opaque()
        units = json_length(message, "", index, opaque) if whole else message_units(message, index, opaque)
        return -(-units // 4) + MESSAGE_OVERHEAD + opaque.blocks * image_tokens

    return tokens
