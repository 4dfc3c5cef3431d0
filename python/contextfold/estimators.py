"""Named token estimators: exact tokenizers to pass as ``estimate_tokens=``.

The default estimate (⌈UTF-16 length / 4⌉) is what the TypeScript host uses and needs no
tokenizer. For OpenAI's ``o200k_base`` and ``cl100k_base`` pass the name itself
(``estimate_tokens="o200k_base"``): the extension counts them natively, exactly as
tiktoken does, with the vocabulary embedded. :func:`tiktoken_estimator` wraps OpenAI's
``tiktoken`` for the other encodings, when it is installed and the encoding is available
offline (tiktoken caches encodings; set ``TIKTOKEN_CACHE_DIR``).
"""

from __future__ import annotations

from collections.abc import Callable

from ._contract import tiktoken_count

__all__ = ["tiktoken_estimator"]


def tiktoken_estimator(encoding: str = "cl100k_base") -> Callable[[str], int]:
    """``estimate_tokens=`` for a tiktoken encoding (``p50k_base``, ``r50k_base`` …).

    Raises :class:`~contextfold.ArgumentError` when tiktoken is not installed (``pip
    install 'contextfold[tiktoken]'``) or the encoding cannot be loaded (it is not in the
    local cache and cannot be downloaded).
    """
    return tiktoken_count(encoding)
