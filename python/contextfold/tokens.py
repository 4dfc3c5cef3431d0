"""Token estimation: what a message, or a transcript, costs against a context window.

The default estimate is ⌈UTF-16 length / 4⌉ (JavaScript's ``.length``, so estimates match
a TypeScript host for the same transcript), and a message costs its text's estimate plus
4. Pass ``estimate_tokens="o200k_base"`` (or ``"cl100k_base"``) for OpenAI's exact count,
computed natively with the vocabulary embedded (equal to tiktoken's
``len(encode(text, disallowed_special=()))``), or any ``callable(text) -> int`` for another
tokenizer (see :func:`contextfold.estimators.tiktoken_estimator`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _backend
from ._contract import EncodingName, Estimator, encoding_name, sizers
from .errors import MessageTypeError

if TYPE_CHECKING:  # numpy is imported on first use: most callers never need it
    import numpy as np

__all__ = [
    "count_tokens",
    "estimate_tokens",
    "message_tokens",
    "message_tokens_array",
    "tokens_of",
    "transcript_tokens",
]

Message = dict[str, Any]


def estimate_tokens(text: str) -> int:
    """⌈UTF-16 length / 4⌉: the default token estimate of ``text``."""
    if not isinstance(text, str):
        raise MessageTypeError(f"text: expected str, got {type(text).__name__}", None, "")
    return int(_backend.impl.estimate_tokens(text))


def count_tokens(text: str, encoding: EncodingName) -> int:
    """Exact tokens of ``text`` in OpenAI's ``encoding`` (``"o200k_base"`` or
    ``"cl100k_base"``): ``len(tiktoken.get_encoding(encoding).encode(text,
    disallowed_special=()))``. Special-token look-alikes such as ``<|endoftext|>`` count as
    plain text; lone surrogates are read as tiktoken reads them (U+FFFD).

    The native backend counts with the vocabulary embedded and the GIL released for long
    texts; the reference counts through ``tiktoken`` (an ArgumentError when it is not
    installed or its encoding is not available offline).
    """
    if not isinstance(text, str):
        raise MessageTypeError(f"text: expected str, got {type(text).__name__}", None, "")
    return int(_backend.impl.count_tokens(text, encoding_name(encoding)))


def message_tokens(message: Message, *, estimate_tokens: Estimator | EncodingName | None = None) -> int:
    """Tokens of one message: its text's estimate plus 4.

    The text is ``content`` (a string as is; a list of parts, or ``None``, as compact
    JSON) followed by the compact JSON of ``tool_calls`` when that is a list.
    """
    return int(_backend.impl.message_tokens(message, sizers(estimate_tokens)))


def tokens_of(messages: Sequence[Message], *, estimate_tokens: Estimator | EncodingName | None = None) -> int:
    """Sum of :func:`message_tokens` over a transcript."""
    return int(_backend.impl.tokens_of(messages, sizers(estimate_tokens)))


transcript_tokens = tokens_of


def message_tokens_array(
    messages: Sequence[Message], *, estimate_tokens: Estimator | EncodingName | None = None
) -> np.ndarray:
    """Each message's tokens as an ``int64`` array, for batch work with numpy."""
    sizes: np.ndarray = _backend.impl.message_tokens_array(messages, sizers(estimate_tokens))
    return sizes
