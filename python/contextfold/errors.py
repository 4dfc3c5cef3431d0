"""The exceptions contextfold raises, defined once for both backends.

The native extension raises these same classes (it imports them from here), so code that
catches them works whichever backend is active. Each subclasses the built-in exception a
caller would expect (``TypeError`` for a wrong type, ``ValueError`` for a bad value).
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "ContextfoldError",
    "EstimatorError",
    "MessageError",
    "MessageTypeError",
    "MessageValueError",
    "RequestError",
]


class ContextfoldError(Exception):
    """Base class of every error contextfold raises."""


class MessageError(ContextfoldError):
    """A message, or one of its fields, is malformed.

    ``index`` is the message's position in the transcript (``None`` for a single message
    or for the transcript itself) and ``field`` the field at fault (``""`` for the whole
    message).
    """

    def __init__(self, message: str, index: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.field = field


class MessageTypeError(MessageError, TypeError):
    """A message or field has the wrong type (not a dict, a non-string role, …)."""


class MessageValueError(MessageError, ValueError):
    """A field's value is unusable: nested deeper than contextfold follows (or circular)."""


class ArgumentError(ContextfoldError, ValueError):
    """An argument other than the messages is invalid (a negative budget, a bad option)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument other than the messages has the wrong type (a list item that is not a str)."""


class EstimatorError(ContextfoldError, TypeError, ValueError):
    """A custom token estimator returned something other than a non-negative int.

    ``index`` is the position of the message it was sizing (``None`` for a single
    message, a system prompt or tools)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class RequestError(ContextfoldError, ValueError):
    """A request body that cannot be packed before any message is read: not UTF-8, not
    JSON that ``json.loads`` would load (a syntax error, trailing data, an empty body,
    nesting too deep, an integer of more digits than ``sys.get_int_max_str_digits()``), not
    an object, or without a ``messages`` member.

    ``offset`` is the byte offset in the body where the problem was found, when there is
    one.
    """

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset
