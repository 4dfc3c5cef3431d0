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
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _backend
from ._contract import (
    DEFAULT_COUNT_CACHE_BYTES,
    DEFAULT_IMAGE_TOKENS,
    EncodingName,
    Estimator,
    SizingName,
    check_tools,
    encoding_name,
    image_tokens_for,
    named_prompt,
    prompt_message,
    sizers,
    whole,
)
from ._js import is_str
from .errors import MessageTypeError

if TYPE_CHECKING:  # numpy is imported on first use: most callers never need it
    import numpy as np

__all__ = [
    "DEFAULT_COUNT_CACHE_BYTES",
    "CountCacheInfo",
    "count_cache_info",
    "count_tokens",
    "estimate_tokens",
    "message_tokens",
    "message_tokens_array",
    "set_count_cache",
    "tokens_of",
    "transcript_tokens",
]

Message = dict[str, Any]


def estimate_tokens(text: str) -> int:
    """⌈UTF-16 length / 4⌉: the default token estimate of ``text``."""
    if not is_str(text):
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
    if not is_str(text):
        raise MessageTypeError(f"text: expected str, got {type(text).__name__}", None, "")
    return int(_backend.impl.count_tokens(text, encoding_name(encoding)))


class CountCacheInfo(NamedTuple):
    """What the count cache holds and has done since the process started or
    :func:`set_count_cache` last emptied it."""

    hits: int
    """Exact counts answered from the cache."""
    misses: int
    """Exact counts computed (and stored) because the cache did not hold them."""
    entries: int
    """Counts held."""
    bytes: int
    """Memory the cache holds now, never above ``max_bytes``: natively its allocated
    tables (about 3 KiB of fixed headers aside), on the reference its dict, keys and
    values as :func:`sys.getsizeof` measures them (an empty dict's aside)."""
    max_bytes: int
    """The bound (0: off)."""


def set_count_cache(max_bytes: int) -> None:
    """Empties the count cache, zeroes its counters and bounds its memory by
    ``max_bytes`` (``0`` turns it off; :data:`DEFAULT_COUNT_CACHE_BYTES` when a process
    starts).

    Every exact count (``estimate_tokens="o200k_base"`` or ``"cl100k_base"`` on every
    path, and :func:`count_tokens`) of a text of 16 UTF-8 bytes or more is remembered,
    keyed by the encoding and a 128-bit hash of the text (natively, on the bytes path, of
    the message's JSON in the body), so a conversation resent turn after turn is
    byte-pair encoded once. Natively the cache is a fixed table of 64 shards, each
    allocated whole (a 64th of the bound) when a count first reaches it, so a process
    holds up to the bound once counts have reached every shard, and a bound under 6 KiB
    turns it off; the reference evicts its oldest counts while its measured memory is
    above the bound. Each backend has its own cache, and a child made by ``os.fork``
    starts both empty, under the same bounds (natively the parent's tables stay mapped
    in the child, shared with the parent until either writes them). Counts are
    identical with the cache on or off.
    The hash: natively XXH3-128 under a secret drawn at random on first use in the
    process, so no text can be written to take another's count; the reference, BLAKE2b
    personalised by the encoding. A wrong count needs two keys equal by chance, about
    8 in 2**128 a lookup.
    """
    _backend.impl.set_count_cache(whole("max_bytes", max_bytes))


def count_cache_info() -> CountCacheInfo:
    """The count cache's hits, misses, entries, bytes and bound now (see
    :func:`set_count_cache`)."""
    return CountCacheInfo(*_backend.impl.count_cache_info())


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
    blocks, Responses ``input_image``/``input_file`` parts and the ``computer_screenshot``
    a computer-use call's output holds) costs a flat ``image_tokens``
    (default 1,600: what a provider bills for a large image) instead of its JSON, and a
    ``thinking`` block's ``signature``, a ``redacted_thinking`` block's ``data`` and a
    ``reasoning`` item's ``encrypted_content`` cost nothing (the entry is left out; its
    comma and colon still count). An encoding or a custom estimator is handed that text
    as chars/4 measures it (opaque blocks and left-out entries written as nothing, their
    commas and colons kept), and each image still costs ``image_tokens``. The default
    ``"seed"`` sizes everything by length, as the TypeScript host does.
    """
    images = image_tokens_for(sizing, image_tokens)
    return int(_backend.impl.message_tokens(message, sizers(estimate_tokens, images), images))


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
    images = image_tokens_for(sizing, image_tokens)
    estimate = sizers(estimate_tokens, images)
    total = int(_backend.impl.tokens_of(messages, estimate, images))
    check_tools(tools)
    if tools is not None:
        with named_prompt("tools", estimate):
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
    images = image_tokens_for(sizing, image_tokens)
    sizes: np.ndarray = _backend.impl.message_tokens_array(messages, sizers(estimate_tokens, images), images)
    return sizes
