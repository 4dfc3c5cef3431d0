"""Named token estimators: exact tokenizers to pass as ``estimate_tokens=``.

The default estimate (⌈UTF-16 length / 4⌉) is what the TypeScript host uses and needs no
tokenizer; an exact count costs a tokenizer call per message but matches what a provider
bills. :func:`tiktoken_estimator` wraps OpenAI's ``tiktoken`` when it is installed and its
encoding is available offline (tiktoken caches encodings; set ``TIKTOKEN_CACHE_DIR``).
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import ArgumentError

__all__ = ["tiktoken_estimator"]


def tiktoken_estimator(encoding: str = "cl100k_base") -> Callable[[str], int]:
    """``estimate_tokens=`` for a tiktoken encoding (``cl100k_base``, ``o200k_base`` …).

    Raises :class:`~contextfold.ArgumentError` when tiktoken is not installed (``pip
    install 'contextfold[tiktoken]'``) or the encoding cannot be loaded (it is not in the
    local cache and cannot be downloaded).
    """
    try:
        import tiktoken
    except ImportError:
        raise ArgumentError("tiktoken is not installed: pip install 'contextfold[tiktoken]'") from None
    try:
        enc = tiktoken.get_encoding(encoding)
    except Exception as exc:  # missing file, no network, unknown name: all mean "not available"
        raise ArgumentError(f"tiktoken encoding {encoding!r} is not available offline: {exc}") from None

    def estimate(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    estimate.__name__ = f"tiktoken_{encoding}"
    return estimate
