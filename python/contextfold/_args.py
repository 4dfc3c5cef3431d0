"""Argument checks shared by the public functions (messages are checked by the backends)."""

from __future__ import annotations

from typing import Any

from .errors import ArgumentError


def whole(name: str, value: Any, minimum: int = 0) -> int:
    """``value`` as an int of at least ``minimum``; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ArgumentError(f"{name} must be at least {minimum}, got {value}")
    return int(value)
