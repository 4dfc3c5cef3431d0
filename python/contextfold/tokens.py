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
from ._contract import (
    DEFAULT_IMAGE_TOKENS,
    EncodingName,
    Estimator,
    SizingName,
    check_tools,
    encoding_name,
    image_tokens_for,
    prompt_message,
    sizers,
)
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


def message_tokens(
    message: Message,
    *,
    estimate_tokens: Estimator | EncodingName | None = None,
    sizing: SizingName = "seed",
    image_tokens: int = DEFAULT_IMAGE_TOKENS,
) -> int:
    """Tokens of one message: its text's estimate plus 4.

    The text is ``content`` (a string as is; a list of parts, or ``None``, as compact
    JSON) followed by the compact JSON of ``tool_calls`` when that is a list; a Responses
    item other than a message is sized by its whole compact JSON.

    ``sizing="provider"`` does not size opaque payloads by their length: an image or
    document block (OpenAI ``image_url``/``file`` parts, Anthropic ``image``/``document``
    blocks, Responses ``input_image``/``input_file`` parts) costs a flat ``image_tokens``
    (default 1,600: what a provider bills for a large image) instead of its JSON, and a
    ``thinking`` block's ``signature``, a ``redacted_thinking`` block's ``data`` and a
    ``reasoning`` item's ``encrypted_content`` cost nothing (the entry is left out; its
    comma and colon still count). It takes the default estimate only. The default
    ``"seed"`` sizes everything by length, as the TypeScript host does.
    """
    images = image_tokens_for(sizing, image_tokens, estimate_tokens)
    return int(_backend.impl.message_tokens(message, sizers(estimate_tokens), images))


def tokens_of(
    messages: Sequence[Message],
    *,
    estimate_tokens: Estimator | EncodingName | None = None,
    tools: list[Message] | None = None,
    sizing: SizingName = "seed",
    image_tokens: int = DEFAULT_IMAGE_TOKENS,
) -> int:
    """Sum of :func:`message_tokens` over a transcript, plus what ``tools`` (the tool
    definitions sent with it) cost: as much as a system message whose content is that list."""
    images = image_tokens_for(sizing, image_tokens, estimate_tokens)
    estimate = sizers(estimate_tokens)
    total = int(_backend.impl.tokens_of(messages, estimate, images))
    check_tools(tools)
    if tools is not None:
        total += int(_backend.impl.message_tokens(prompt_message(tools), estimate, images))
    return total


transcript_tokens = tokens_of


def message_tokens_array(
    messages: Sequence[Message],
    *,
    estimate_tokens: Estimator | EncodingName | None = None,
    sizing: SizingName = "seed",
    image_tokens: int = DEFAULT_IMAGE_TOKENS,
) -> np.ndarray:
    """Each message's tokens as an ``int64`` array, for batch work with numpy."""
    images = image_tokens_for(sizing, image_tokens, estimate_tokens)
    sizes: np.ndarray = _backend.impl.message_tokens_array(messages, sizers(estimate_tokens), images)
    return sizes
