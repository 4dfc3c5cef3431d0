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

import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from .codemap import (
    MAX_RECALLED_MAPS,
    ConsolidatedMemory,
    areas_named_in,
    areas_of_paths_in,
    consolidated_area,
    consolidated_facts_for,
    merge_consolidated,
    without_consolidated_files,
)
from .errors import ArgumentError

__all__ = ["DEFAULT_TTL", "CodeMapStore", "RedisCodeMapStore", "SQLiteCodeMapStore"]

DEFAULT_TTL = timedelta(days=30)
"""How long a map stays live after its last write."""


class CodeMapStore(ABC):
    """What every code-map store does; backends provide storage and atomic updates."""

    def __init__(self, ttl: timedelta | None = DEFAULT_TTL) -> None:
        self.ttl = ttl

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
        """Stores a run's map, merged with the live map under its key; returns the result."""
        stored = self._update(memory.key, lambda prior: merge_consolidated(memory.key, prior, memory.content))
        return stored or ""

    def get(self, key: str) -> str | None:
        """The live content under ``key``, or None."""
        return next((m.content for m in self.live() if m.key == key), None)

    def recall(self, request: str, *, max: int = MAX_RECALLED_MAPS) -> list[ConsolidatedMemory]:
        """The maps for the areas ``request`` names by path, or else by word: most
        specific first, at most ``max``."""
        maps = self.live()
        areas = areas_of_paths_in(request)
        if not areas:
            known = [a for a in (consolidated_area(m.key) for m in maps) if a is not None]
            areas = areas_named_in(request, known)
        return consolidated_facts_for(maps, areas, max)

    def invalidate(self, changed_paths: Iterable[str]) -> int:
        """Takes files that changed since their maps were written out of every map that
        lists them (compared canonically, case-insensitively); a map left with no file is
        deleted. Returns how many maps changed."""
        paths = list(changed_paths)
        changed = 0
        for memory in self.live():
            if without_consolidated_files(memory.content, paths) == memory.content:
                continue
            self._update(memory.key, lambda live: None if live is None else without_consolidated_files(live, paths))
            changed += 1
        return changed


class SQLiteCodeMapStore(CodeMapStore):
    """Maps in SQLite (a file path, or ``":memory:"``). Safe across threads and processes:
    every write is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, path: str = ":memory:", *, ttl: timedelta | None = DEFAULT_TTL) -> None:
        super().__init__(ttl)
        self.path = path
        self._local = threading.local()
        self._shared = (
            sqlite3.connect(path, check_same_thread=False, isolation_level=None) if path == ":memory:" else None
        )
        self._memory_lock = threading.Lock()
        with self._connection() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS codemaps"
                " (key TEXT PRIMARY KEY, content TEXT NOT NULL, written REAL NOT NULL)"
            )

    def _connection(self) -> Any:
        if self._shared is not None:
            return _Locked(self._shared, self._memory_lock)
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db = db
        return _Locked(db, None)

    def _update(self, key: str, change: Any) -> str | None:
        now = time.time()
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT content, written FROM codemaps WHERE key = ?", (key,)).fetchone()
                live = row[0] if row is not None and row[1] >= self._cutoff(now) else None
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
        with self._connection() as db:
            rows = db.execute(
                "SELECT key, content FROM codemaps WHERE written >= ? ORDER BY key", (self._cutoff(time.time()),)
            ).fetchall()
        return [ConsolidatedMemory(k, c) for k, c in rows]

    def expire(self) -> int:
        with self._connection() as db:
            return int(db.execute("DELETE FROM codemaps WHERE written < ?", (self._cutoff(time.time()),)).rowcount)


class _Locked:
    """A connection, used under a lock when it is shared (an in-memory database)."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock | None) -> None:
        self.db, self.lock = db, lock

    def __enter__(self) -> sqlite3.Connection:
        if self.lock is not None:
            self.lock.acquire()
        return self.db

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            self.lock.release()


class RedisCodeMapStore(CodeMapStore):
    """Maps in Redis, for a fleet of replicas: each map a hash (``content``, ``written``)
    under ``prefix + key``, listed in a sorted set by write time; writes are optimistic
    transactions (WATCH / MULTI / EXEC, retried), so concurrent writers never lose an
    update. Redis expiry (``ttl``) removes retired maps."""

    def __init__(
        self,
        client: Any = None,
        *,
        url: str | None = None,
        prefix: str = "contextfold:",
        ttl: timedelta | None = DEFAULT_TTL,
    ) -> None:
        super().__init__(ttl)
        if client is None:
            try:
                import redis
            except ImportError:
                raise ArgumentError(
                    "RedisCodeMapStore needs the redis package: pip install 'contextfold[redis]'"
                ) from None
            client = redis.Redis.from_url(url or "redis://localhost:6379/0")
        self.client = client
        self.prefix = prefix
        self.index = f"{prefix}index"

    def _update(self, key: str, change: Any) -> str | None:
        import redis

        name = self.prefix + key
        while True:
            with self.client.pipeline() as pipe:
                try:
                    pipe.watch(name)
                    content, written = pipe.hmget(name, "content", "written")
                    now = time.time()
                    live = (
                        content.decode("utf-8") if content is not None and float(written) >= self._cutoff(now) else None
                    )
                    new = change(live)
                    pipe.multi()
                    if new is None:
                        pipe.delete(name)
                        pipe.zrem(self.index, key)
                    else:
                        pipe.hset(name, mapping={"content": new, "written": repr(now)})
                        if self.ttl is not None:
                            pipe.expire(name, max(1, int(self.ttl.total_seconds())))
                        pipe.zadd(self.index, {key: now})
                    pipe.execute()
                    return new  # type: ignore[no-any-return]
                except redis.WatchError:
                    continue  # another writer got there first: read again and merge again

    def live(self) -> list[ConsolidatedMemory]:
        keys = [k.decode("utf-8") for k in self.client.zrangebyscore(self.index, self._cutoff(time.time()), "+inf")]
        out = []
        for key in sorted(keys):
            content = self.client.hget(self.prefix + key, "content")
            if content is not None:
                out.append(ConsolidatedMemory(key, content.decode("utf-8")))
        return out

    def expire(self) -> int:
        cutoff = self._cutoff(time.time())
        stale = [k.decode("utf-8") for k in self.client.zrangebyscore(self.index, "-inf", f"({cutoff}")]
        for key in stale:
            self.client.delete(self.prefix + key)
            self.client.zrem(self.index, key)
        return len(stale)
