"""Provider sizing, in pure Python: the reference for ``contextfold-core``'s provider.rs.

An image or document block costs a flat ``image_tokens`` instead of its JSON; a
``thinking`` block's ``signature``, a ``redacted_thinking`` block's ``data`` and a
``reasoning`` item's ``encrypted_content`` cost nothing; everything else is sized as the
default estimate sizes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._contract import MESSAGE_OVERHEAD, Opaque, PerMessage
from .._js import Visit, json_length

MessageUnits = Callable[[dict[str, Any], "int | None", Visit], int]
"""``tokens.message_units``: a message's text length, objects measured as a visitor says."""


def provider_sizer(image_tokens: int, message_units: MessageUnits) -> PerMessage:
    """The per-message sizer for ``sizing="provider"``, measuring a message's text with
    ``message_units`` (the default sizer's own measure)."""

    def tokens(index: int | None, message: dict[str, Any], whole: bool) -> int:
        opaque = Opaque()
        units = json_length(message, "", index, opaque) if whole else message_units(message, index, opaque)
        return opaque.billed(-(-units // 4) + MESSAGE_OVERHEAD, image_tokens)

    return tokens
