"""Code-map stores: where consolidated maps live between runs.

A store applies the write rule (:func:`~contextfold.merge_consolidated`) atomically, so
concurrent writers never lose each other's files; serves recall (the maps for the areas a
request names, most specific first); takes out files that changed since a map was written
(:func:`~contextfold.without_consolidated_files`); and lets old maps expire, so a retired
map never comes back to life through a merge.

Two backends with one interface: :class:`SQLiteCodeMapStore` (embedded, a file or
``:memory:``; the default) and :class:`RedisCodeMapStore` (shared by a fleet of gateway
replicas; needs the ``redis`` package).
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
import urllib.parse
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import Any

from ._edits import text_field
from ._js import is_str
from .codemap import (
    CONSOLIDATED_KEY_PREFIX,
    MAX_RECALLED_MAPS,
    ConsolidatedMemory,
    _text,
    _texts,
    areas_named_in,
    areas_of_paths_in,
    consolidated_area,
    consolidated_facts_for,
    consolidated_files,
    merge_consolidated,
    without_consolidated_files,
)
from .errors import ArgumentError, ArgumentTypeError, ContextfoldError

__all__ = ["DEFAULT_TTL", "CodeMapStore", "RedisCodeMapStore", "SQLiteCodeMapStore", "StoreError", "StoreWarning"]


class StoreError(ContextfoldError):
    """A store cannot do what was asked: its database is unreadable, or read-only."""


class StoreWarning(UserWarning):
    """A stored map was corrupted (by another program, a disk, a hand edit) and skipped."""


DEFAULT_TTL = timedelta(days=30)
"""How long a map stays live after its last write."""

TRANSACTION_ATTEMPTS = 64
"""How often a Redis store tries one write or expiry before it gives up with a
:class:`StoreError`: each retry means another writer changed the map meanwhile (or, as
redis-py reports it, the connection failed while it was watched)."""


class CodeMapStore(ABC):
    """What every code-map store does; backends provide storage and atomic updates."""

    def __init__(self, ttl: timedelta | None = DEFAULT_TTL) -> None:
        if ttl is not None and not isinstance(ttl, timedelta):
            raise ArgumentTypeError(f"ttl must be a timedelta or None, got {type(ttl).__name__}")
        if ttl is not None and ttl <= timedelta(0):
            raise ArgumentError(f"ttl must be positive (or None: maps never expire), got {ttl!r}")
        self.ttl = ttl
        self._clock = time.time
        """What time it is, in seconds since the epoch (a test's clock may differ)."""

    def _cutoff(self, now: float) -> float:
        return float("-inf") if self.ttl is None else now - self.ttl.total_seconds()

    @abstractmethod
    def _update(self, key: str, change: Any) -> str | None:
        """Atomically replaces the live content under ``key`` by ``change(live or None)``
        (None deletes); returns what was stored."""

    @abstractmethod
    def live(self) -> list[ConsolidatedMemory]:
        """Every live map."""

    @abstractmethod
    def expire(self) -> int:
        """Deletes the maps that are no longer live; returns how many."""

    def write(self, memory: ConsolidatedMemory) -> str:
        """Stores a run's map, merged with the live map under its key; returns the result.
        A code map the merge leaves listing no file (a run that deleted every file the map
        listed) is deleted, not kept as a bare header: the result is then ``""``. A key or
        content that is no str, or that UTF-8 cannot hold (a lone surrogate), is refused
        naming it."""
        if not isinstance(memory, ConsolidatedMemory):
            raise ArgumentTypeError(f"memory must be a ConsolidatedMemory, got {type(memory).__name__}")
        key = text_field("ConsolidatedMemory", "key", memory.key)
        content = text_field("ConsolidatedMemory", "content", memory.content)

        def merged(prior: str | None) -> str | None:
            out = merge_consolidated(key, prior, content)
            return out if consolidated_files(out) or not key.startswith(CONSOLIDATED_KEY_PREFIX) else None

        return self._update(key, merged) or ""

    def get(self, key: str) -> str | None:
        """The live content under ``key``, or None."""
        key = _text("key", key)
        return next((m.content for m in self.live() if m.key == key), None)

    def recall(self, request: str, *, max: int = MAX_RECALLED_MAPS) -> list[ConsolidatedMemory]:
        """The maps for the areas ``request`` names by path, or else by word: most
        specific first, at most ``max``."""
        request = _text("request", request)
        maps = self.live()
        areas = areas_of_paths_in(request)
        if not areas:
            known = [a for a in (consolidated_area(m.key) for m in maps) if a is not None]
            areas = areas_named_in(request, known)
        return consolidated_facts_for(maps, areas, max)

    def invalidate(self, changed_paths: Iterable[str]) -> int:
        """Takes files that changed since their maps were written out of every map that
        lists them (compared canonically, case-insensitively); a map left with no file is
        deleted. A map that lists none of them (or no file at all) is left as it is.
        Returns how many maps changed."""
        paths = _texts("changed_paths", changed_paths, "paths")
        changed = 0
        for memory in self.live():
            listed = consolidated_files(memory.content)
            if not listed or without_consolidated_files(memory.content, paths) == memory.content:
                continue
            self._update(memory.key, lambda live: None if live is None else without_consolidated_files(live, paths))
            changed += 1
        return changed


class SQLiteCodeMapStore(CodeMapStore):
    """Maps in SQLite (a file path, or ``":memory:"``). Safe across threads and processes:
    every write is one ``BEGIN IMMEDIATE`` transaction. A relative path names the file it
    names when the store is made. A child made by ``os.fork`` connects afresh (SQLite
    forbids using a connection across a fork: the child closes the ones it inherited); an
    in-memory store is copied into it as it was between two calls (a fork waits for a call
    another thread is making).

    Opening never writes to an existing database, so a read-only file serves recall
    (writes to it raise :class:`StoreError`), its unsaved writes included: when they wait
    in a write-ahead log SQLite cannot read there (no ``-shm`` file beside it, and none
    can be made), opening is a :class:`StoreError`, never a stale read. A row that is not
    a map (content that is not UTF-8 text, a write time that is not a finite number) is
    skipped with a
    :class:`StoreWarning`, and replaced by the next write to its key. Any other SQLite
    failure, such as a file that is not a database, is a :class:`StoreError`.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, ttl: timedelta | None = DEFAULT_TTL) -> None:
        super().__init__(ttl)
        if not issubclass(type(path), (str, os.PathLike)):
            raise ArgumentTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        path = os.fspath(path)
        if not isinstance(path, str):
            raise ArgumentTypeError(f"path must name a file as a str, got {type(path).__name__}")
        # "" would open a private temporary database a connection (one a thread here).
        if not path:
            raise ArgumentError("path must name a database file or be ':memory:', got ''")
        if "\0" in path:
            raise ArgumentError(f"path holds a NUL at index {path.index(chr(0))}")
        self.path = path
        # Each thread connects when it first uses the store, maybe after a chdir.
        self._file = path if path == ":memory:" else os.path.abspath(path)
        self.read_only = False
        self._local = threading.local()
        self._lock = threading.RLock()  # a signal handler may close() mid-call on the same thread
        self._shared = self._open() if path == ":memory:" else None
        with _FORKING:
            _STORES[id(self)] = self
        with self._sqlite_errors():
            try:
                made = self._made()
            except sqlite3.OperationalError as e:
                if path == ":memory:" or not _unwritable(e):
                    raise
                self.close()  # read-only: open it again as such
                self.read_only = True
                made = self._made()
            if not made:
                if self.read_only:
                    raise StoreError(f"code-map store {path}: the database is read-only and holds no code maps")
                with self._connection() as db:
                    db.execute("PRAGMA journal_mode=WAL")  # kept in the file: set once, when it is made
                    db.execute(
                        "CREATE TABLE IF NOT EXISTS codemaps"
                        " (key TEXT PRIMARY KEY, content TEXT NOT NULL, written REAL NOT NULL)"
                    )

    def _made(self) -> bool:
        """Whether the database has the maps table (a read, never a write)."""
        with self._connection() as db:
            return (
                db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'codemaps'").fetchone()
                is not None
            )

    def _open(self) -> sqlite3.Connection:
        if self.path == ":memory:":
            db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        elif self.read_only:
            db = self._read_only_connection()
        else:
            db = sqlite3.connect(self._file, timeout=30, isolation_level=None)
        db.text_factory = bytes  # decoded row by row, so one bad row cannot fail a whole read
        return db

    def _read_only_connection(self) -> sqlite3.Connection:
        """A reader of a file it cannot open to write (where SQLite can read the write-ahead
        log, the plain connection already reads it): the file as immutable, which never
        reads the log, so refused when the log may hold writes not yet saved into it."""
        log = f"{self._file}-wal"
        if os.path.exists(log) and os.path.getsize(log) > _WAL_HEADER:
            raise StoreError(
                f"code-map store {self.path}: the database is read-only and {log} may hold writes not yet "
                f"saved into it, which only a reader that can make {self.path}-shm reads"
            )
        uri = f"file:{urllib.parse.quote(self._file)}?mode=ro&immutable=1"
        return sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)

    def _connection(self) -> _Locked:
        if self._shared is not None:
            return _Locked(self._shared, self._lock)
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self._open()
        return _Locked(db, None)

    @contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            raise StoreError(f"code-map store {self.path}: {e}") from e

    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"code-map store {self.path}: the database is read-only")

    def close(self) -> None:
        """Closes the calling thread's connection (an in-memory store's only one, after
        which it is unusable; a file store opens a new one when next used)."""
        if self._shared is not None:
            with self._lock:  # a thread using it finishes first (freed under it, it crashed)
                self._shared.close()
            return
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def __enter__(self) -> SQLiteCodeMapStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _update(self, key: str, change: Any) -> str | None:
        self._writable()
        now = self._clock()
        with self._sqlite_errors(), self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(f"SELECT {_ROW} FROM codemaps WHERE key = ?", (key,)).fetchone()
                memory = None if row is None else _row_map(row, self.path, "replaced by this write")
                live = memory.content if memory is not None and row[2] >= self._cutoff(now) else None
                new = change(live)
                if new is None:
                    db.execute("DELETE FROM codemaps WHERE key = ?", (key,))
                else:
                    db.execute(
                        "INSERT INTO codemaps (key, content, written) VALUES (?, ?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET content = excluded.content, written = excluded.written",
                        (key, new, now),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return new  # type: ignore[no-any-return]

    def live(self) -> list[ConsolidatedMemory]:
        with self._sqlite_errors(), self._connection() as db:
            rows = db.execute(
                f"SELECT {_ROW} FROM codemaps WHERE written >= ? ORDER BY key",
                (self._cutoff(self._clock()),),
            ).fetchall()
        return [m for m in (_row_map(row, self.path, "skipped") for row in rows) if m is not None]

    def expire(self) -> int:
        self._writable()
        with self._sqlite_errors(), self._connection() as db:
            return int(db.execute("DELETE FROM codemaps WHERE written < ?", (self._cutoff(self._clock()),)).rowcount)


_STORES: weakref.WeakValueDictionary[int, SQLiteCodeMapStore] = weakref.WeakValueDictionary()
"""The live SQLite stores, by identity (a subclass may define equality)."""

_FORKING = threading.Lock()
"""Held from before a fork until after it (and while a store is registered): forks on two
threads take turns, and the stores a fork holds are the ones registered."""

_FORK_HELD = threading.local()
"""``locks``: what the calling thread's fork in progress holds (a thread's own, so a fork
interrupted on one thread gives back only what it took)."""


def _held_for_fork() -> list[Any]:
    locks: list[Any] | None = getattr(_FORK_HELD, "locks", None)
    if locks is None:
        locks = _FORK_HELD.locks = []
    return locks


def _before_fork() -> None:
    # No thread is inside an in-memory store at the fork: its one connection (SQLite's
    # own mutex included) reaches the child between two calls. A lock is recorded once
    # taken; an interruption (Ctrl-C) gives back what was taken, and the fork goes on.
    held = _held_for_fork()
    try:
        _FORKING.acquire()
        held.append(_FORKING)
        for store in list(_STORES.values()):
            if store._shared is not None:
                store._lock.acquire()
                held.append(store._lock)
    except BaseException:
        _after_fork_in_parent()
        raise


def _after_fork_in_parent() -> None:
    held = _held_for_fork()
    while held:
        held.pop().release()


def _after_fork_in_child() -> None:
    """The child's only thread holds each lock the fork took: fresh ones instead. Each file
    store's connection the forking thread made is closed: SQLite's per-process lock table
    came with it, and while it is open a fresh connection takes no lock of its own, so a
    parent closing its last connection saved and deleted the write-ahead log under the
    child's writes (the other threads' connections CPython drops with their threads)."""
    global _FORKING
    _FORKING = threading.Lock()
    _FORK_HELD.locks = []
    for store in list(_STORES.values()):
        if store._shared is not None:
            store._lock = threading.RLock()
            continue
        db = getattr(store._local, "db", None)
        if db is not None:
            store._local.db = None
            with suppress(sqlite3.Error):
                db.close()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


class _Locked:
    """A connection, used under a lock when it is shared (an in-memory database)."""

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock | None) -> None:
        self.db, self.lock = db, lock

    def __enter__(self) -> sqlite3.Connection:
        if self.lock is not None:
            self.lock.acquire()
        return self.db

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            self.lock.release()


def _unwritable(error: sqlite3.OperationalError) -> bool:
    """Whether opening failed because the file or its folder cannot be written."""
    text = str(error)
    return "readonly" in text or "unable to open" in text


_WAL_HEADER = 32
"""Bytes of a write-ahead log that hold no write: its header."""

_ROW = "key, content, written, typeof(key) = 'text' AND typeof(content) = 'text'"
"""The columns a map's row is read as: text comes as bytes, and whether it is text."""


def _row_map(row: tuple[Any, ...], where: str, done: str) -> ConsolidatedMemory | None:
    """The map a SQLite row holds, or None (with a warning) when the row is corrupted."""
    key, content, written, texts = row
    return _stored_map(
        key if isinstance(key, bytes) else str(key).encode(),
        content if texts else None,
        written if isinstance(written, (int, float)) else None,
        where,
        done,
    )


def _stored_map(key: bytes, content: bytes | None, written: Any, where: str, done: str) -> ConsolidatedMemory | None:
    """The map stored under ``key``, or None, with a :class:`StoreWarning` naming the key,
    when it is corrupted: content that is not UTF-8 text, a write time that is not a number."""
    try:
        if content is None:
            raise ValueError("its content is not text")
        try:
            finite = math.isfinite(float(written))
        except (TypeError, ValueError):
            finite = False
        if not finite:
            raise ValueError(f"its write time is {written!r}, not a number")
        return ConsolidatedMemory(key.decode("utf-8"), content.decode("utf-8"))
    except ValueError as e:
        reason = f"it is not UTF-8 ({e.reason} at byte {e.start})" if isinstance(e, UnicodeDecodeError) else str(e)
        shown = key.decode("utf-8", "backslashreplace")
        warnings.warn(f"code-map store {where}: the map {shown!r} is corrupted, {done}: {reason}", StoreWarning, 3)
        return None


class RedisCodeMapStore(CodeMapStore):
    """Maps in Redis, for a fleet of replicas: each map a hash (``content``, ``written``)
    under ``prefix + key``, listed in a sorted set by write time; writes are optimistic
    transactions (WATCH / MULTI / EXEC, retried), so concurrent writers never lose an
    update. Redis expiry (``ttl``) removes retired maps. A map whose key or content is
    not UTF-8, or whose write time is not a number, is skipped with a
    :class:`StoreWarning` (and replaced by the next write to its key). A key under the
    prefix that holds another type (another program's: the index not a sorted set, a map
    not a hash) is a :class:`StoreError` naming it, and is never overwritten, as is any
    other Redis failure (a transaction that keeps failing gives up after
    ``TRANSACTION_ATTEMPTS``); the key ``"index"`` names the index, never a map. ``client``
    must return bytes (redis-py's default, ``decode_responses=False``): a redis-py client
    that decodes replies is an :class:`~contextfold.ArgumentError`."""

    def __init__(
        self,
        client: Any = None,
        *,
        url: str | None = None,
        prefix: str = "contextfold:",
        ttl: timedelta | None = DEFAULT_TTL,
    ) -> None:
        super().__init__(ttl)
        if url is not None and not is_str(url):
            raise ArgumentTypeError(f"url must be a str or None, got {type(url).__name__}")
        if client is None:
            try:
                import redis
            except ImportError:
                raise ArgumentError(
                    "RedisCodeMapStore needs the redis package: pip install 'contextfold[redis]'"
                ) from None
            client = redis.Redis.from_url(url or "redis://localhost:6379/0")
        encoder = getattr(client, "get_encoder", None)
        if callable(encoder) and getattr(encoder(), "decode_responses", False):
            raise ArgumentError(
                "RedisCodeMapStore: the client decodes replies to str: make it with decode_responses=False "
                "(redis-py's default), as a map that is not UTF-8 must be read to be skipped"
            )
        self.client = client
        self.prefix = text_field("RedisCodeMapStore", "prefix", prefix)
        self.index = f"{self.prefix}index"

    def _update(self, key: str, change: Any) -> str | None:
        name = self.prefix + key
        if name == self.index:
            raise ArgumentError(f"code-map store {self.prefix}: the key {key!r} names the store's index, not a map")
        with self._types_checked(name.encode("utf-8")):
            return self._transaction(name, key, change)

    def _transaction(self, name: str, key: str, change: Any) -> str | None:
        """``_update`` as an optimistic transaction, retried while another writer intervened."""
        import redis

        for _ in range(TRANSACTION_ATTEMPTS):
            with self.client.pipeline() as pipe:
                try:
                    pipe.watch(name)
                    content, written = pipe.hmget(name, "content", "written")
                    now = self._clock()
                    live = None
                    if content is not None:
                        memory = _stored_map(
                            key.encode("utf-8"), content, written, self.prefix, "replaced by this write"
                        )
                        if memory is not None and float(written) >= self._cutoff(now):
                            live = memory.content
                    new = change(live)
                    pipe.multi()
                    if new is None:
                        pipe.delete(name)
                        pipe.zrem(self.index, key)
                    else:
                        pipe.hset(name, mapping={"content": new, "written": repr(now)})
                        if self.ttl is None:
                            pipe.persist(name)  # HSET keeps a timeout a store with a ttl set
                        else:
                            pipe.expire(name, max(1, int(self.ttl.total_seconds())))
                        pipe.zadd(self.index, {key: now})
                    pipe.execute()
                    return new  # type: ignore[no-any-return]
                except redis.WatchError as e:
                    last = e  # another writer got there first: read again and merge again
        raise self._gave_up(name, last)

    def live(self) -> list[ConsolidatedMemory]:
        cutoff = self._cutoff(self._clock())
        with self._types_checked():
            keys = sorted(self.client.zrangebyscore(self.index, cutoff, "+inf"))
        prefix = self.prefix.encode("utf-8")
        with self.client.pipeline(transaction=False) as pipe:  # every map in one round trip
            for key in keys:
                pipe.hmget(prefix + key, "content", "written")
            with self._types_checked():
                replies = pipe.execute(raise_on_error=False)
        out = []
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, Exception):
                with self._types_checked(prefix + key):
                    raise reply
            content, written = reply
            memory = None if content is None else _stored_map(key, content, written, self.prefix, "skipped")
            # live as a write judges it: by the map's own write time (the index only lists)
            if memory is not None and float(written) >= cutoff:
                out.append(memory)
        return out

    def expire(self) -> int:
        cutoff = self._cutoff(self._clock())
        with self._types_checked():
            stale = self.client.zrangebyscore(self.index, "-inf", f"({cutoff}")
            # raw bytes: a member that is not UTF-8 expires too
            return sum(self._expired(key, cutoff) for key in stale)

    def _expired(self, key: bytes, cutoff: float) -> bool:
        """Deletes the map ``key`` if it is still stale, as an optimistic transaction: a
        replica that writes it anew after it was listed keeps what it wrote."""
        import redis

        name = self.prefix.encode("utf-8") + key
        for _ in range(TRANSACTION_ATTEMPTS):
            with self.client.pipeline() as pipe:
                try:
                    pipe.watch(name)  # a write changes the map with its index entry
                    written = pipe.zscore(self.index, key)
                    if written is None or written >= cutoff:
                        return False
                    pipe.multi()
                    pipe.delete(name)
                    pipe.zrem(self.index, key)
                    pipe.execute()
                    return True
                except redis.WatchError as e:
                    last = e  # written or expired meanwhile: look again
        raise self._gave_up(name.decode("utf-8", "backslashreplace"), last)

    def _gave_up(self, name: str, last: Exception) -> StoreError:
        """What a transaction on ``name`` that kept failing raises: redis-py reports a
        connection lost while watching as another writer's change, so without a bound a
        lasting failure was retried forever. The last failure is its cause."""
        error = StoreError(
            f"code-map store {self.prefix}: gave up on {name!r} after {TRANSACTION_ATTEMPTS} attempts: "
            f"other writers kept changing it, or the connection kept failing (last: {last})"
        )
        error.__cause__ = last
        return error

    @contextmanager
    def _types_checked(self, name: bytes | None = None) -> Iterator[None]:
        """Redis's WRONGTYPE as a :class:`StoreError` naming the key of another type: the
        index (a sorted set) or the map ``name`` (a hash)."""
        import redis

        try:
            yield
        except redis.ResponseError as e:
            if "WRONGTYPE" not in str(e):
                raise StoreError(f"code-map store {self.prefix}: {e}") from e
            wanted = {self.index.encode("utf-8"): "zset", **({} if name is None else {name: "hash"})}
            for key, kind in wanted.items():
                try:
                    held = self.client.type(key)
                except redis.RedisError as lost:  # the connection, between the reply and this look
                    raise StoreError(f"code-map store {self.prefix}: {type(lost).__name__}: {lost}") from lost
                held = held.decode() if isinstance(held, bytes) else str(held)
                if held not in (kind, "none"):
                    shown = key.decode("utf-8", "backslashreplace")
                    raise StoreError(
                        f"code-map store {self.prefix}: the key {shown!r} holds a {held}, not a {kind}: "
                        "another program writes under this prefix"
                    ) from e
            raise StoreError(f"code-map store {self.prefix}: {e}") from e
        except redis.RedisError as e:  # the connection, a timeout, the server's memory
            raise StoreError(f"code-map store {self.prefix}: {type(e).__name__}: {e}") from e
