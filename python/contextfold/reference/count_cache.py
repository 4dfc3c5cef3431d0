"""The count cache, in pure Python: the reference for ``contextfold-core``'s count_cache.rs.

Exact counts of texts at least :data:`MIN_CACHED_BYTES` long (in UTF-8) are remembered in
one process-wide map from a 128-bit BLAKE2b digest of the text, personalised by the
encoding's name, to the count. The map is an insertion-ordered dict that evicts its
oldest entries while its memory, measured with :func:`sys.getsizeof` (the dict's own
table and nodes, and each key and value), is above the bound; so the bound is measured,
not estimated.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable

from .._contract import (
    DEFAULT_COUNT_CACHE_BYTES,
    Counting,
    EncodingName,
    Estimator,
    Sizers,
    estimator_sizers,
    tiktoken_count,
)

MIN_CACHED_BYTES = 16
"""Shorter texts are counted every time, as natively (where a few pieces cost little to
count)."""


class CountCache:
    def __init__(self, max_bytes: int) -> None:
        self._lock = threading.Lock()
        self.configure(max_bytes)

    def configure(self, max_bytes: int) -> None:
        """Empties the cache, zeroes its counters and bounds it by ``max_bytes`` (0: off)."""
        with self._lock:
            self._counts: OrderedDict[bytes, int] = OrderedDict()
            self._item_bytes = 0
            self._max_bytes = max_bytes
            # A bound the empty map already fills is off too: nothing could be stored.
            self._enabled = max_bytes > sys.getsizeof(self._counts)
            self._hits = self._misses = 0

    def _bytes(self) -> int:
        return sys.getsizeof(self._counts) + self._item_bytes if self._counts else 0

    def count(self, encoding: str, text: str, count: Callable[[str], int]) -> int:
        """``count(text)``, remembered under ``encoding`` when the text is long enough
        and the cache is on."""
        if not self._enabled:
            return count(text)
        data = str.encode(text, "utf-8", "surrogatepass")  # a subclass's own encode is not asked
        if len(data) < MIN_CACHED_BYTES:
            return count(text)
        key = hashlib.blake2b(data, digest_size=16, person=encoding.encode()).digest()
        with self._lock:
            found = self._counts.get(key)
            if found is not None:
                self._hits += 1
                return found
            self._misses += 1
        counted = count(text)  # without the lock: other threads count meanwhile
        with self._lock:
            if key not in self._counts:
                self._counts[key] = counted
                self._item_bytes += sys.getsizeof(key) + sys.getsizeof(counted)
                self._evict()
        return counted

    def _evict(self) -> None:
        counts = self._counts
        while counts and self._bytes() > self._max_bytes:
            key, counted = counts.popitem(last=False)
            self._item_bytes -= sys.getsizeof(key) + sys.getsizeof(counted)
        if not counts:
            counts.clear()  # a dict keeps its grown table until cleared

    def info(self) -> tuple[int, int, int, int, int]:
        with self._lock:
            return self._hits, self._misses, len(self._counts), self._bytes(), self._max_bytes

    def forget_after_fork(self) -> None:
        """For a child just forked: a new lock and an empty cache under the same bound (a
        thread of the parent that held the lock at the fork is not in the child, which
        would wait for it forever; ``CountCache::forget_after_fork`` natively)."""
        self._lock = threading.Lock()
        self.configure(self._max_bytes)


CACHE = CountCache(DEFAULT_COUNT_CACHE_BYTES)
"""The process's count cache (the reference backend's own; the extension keeps another)."""
if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=CACHE.forget_after_fork)


def set_count_cache(max_bytes: int) -> None:
    CACHE.configure(max_bytes)


def count_cache_info() -> tuple[int, int, int, int, int]:
    return CACHE.info()


@functools.cache
def exact_count(name: EncodingName) -> Estimator:
    """tiktoken's count in the encoding ``name``, through the count cache."""
    counted = tiktoken_count(name)

    def count(text: str) -> int:
        return CACHE.count(name, text, counted)

    return count


@functools.lru_cache(maxsize=64)
def _exact_sizers(name: EncodingName, images: int | None) -> Sizers:
    return estimator_sizers(exact_count(name), images)


def resolved(sizing: Counting, images: int | None) -> Sizers | None:
    """The reference backend's view of ``sizing``: an embedded encoding's name becomes
    the pair counting through tiktoken and the cache, as provider sizing does with
    ``images`` given (the native backend counts it itself)."""
    return _exact_sizers(sizing, images) if isinstance(sizing, str) else sizing
