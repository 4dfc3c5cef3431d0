"""Subclasses of dict, list, str, int and float whose reading methods lie: contextfold must
read the built-in storage they hold (and find keys as ``dict.get`` finds them) on both
backends."""

from __future__ import annotations

from typing import Any


class LyingDict(dict):  # type: ignore[type-arg]
    """A dict whose every reading method lies: only its storage tells the truth."""

    def get(self, key: Any, default: Any = None) -> Any:
        return "assistant" if key == "role" else [1, 2]

    def __getitem__(self, key: Any) -> Any:
        return "lie"

    def __missing__(self, key: Any) -> Any:
        return "missing"

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Any:
        return iter(["role"])

    def __len__(self) -> int:
        return 0

    def items(self) -> Any:
        return [("role", "lie")]

    def keys(self) -> Any:
        return ["role"]


class LyingList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        return iter([{"type": "text", "text": "lie"}])

    def __len__(self) -> int:
        return 0

    def __getitem__(self, index: Any) -> Any:
        return {"type": "text", "text": "lie"}


class LyingStr(str):
    __slots__ = ()

    def __len__(self) -> int:
        return 0

    def __str__(self) -> str:
        return "lie"

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 7

    def startswith(self, *args: Any) -> bool:
        return True

    def isascii(self) -> bool:
        return False

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return b"lie"


class OddHashKey(str):
    """A key that equals its text but hashes elsewhere: a dict lookup of the text misses it."""

    __slots__ = ()

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)


class _LiesAboutItsValue:
    """What JSON could call on a number, every answer a lie."""

    def __float__(self) -> float:
        return 0.25

    def __abs__(self) -> int:
        return 3

    def __repr__(self) -> str:
        return "3"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    def __le__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return False


class LyingInt(_LiesAboutItsValue, int):
    """An int whose every method JSON could call lies: only its storage tells the truth."""

    def __int__(self) -> int:
        return 3

    def __index__(self) -> int:
        return 3

    __hash__ = int.__hash__


class LyingFloat(_LiesAboutItsValue, float):
    __hash__ = float.__hash__


def claiming(kind: type) -> Any:
    """An object whose ``__class__`` claims ``kind`` (so ``isinstance`` believes it),
    though it is none: ``kind``'s own methods refuse it."""
    claimer = type(f"Claims{kind.__name__.title()}", (), {"__class__": property(lambda self: kind)})
    return claimer()
