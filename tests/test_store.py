"""Code-map stores (SPEC §8): the write rule applied atomically, recall, invalidation and
expiry, on SQLite (memory and file) and Redis. Concurrent writers never lose an update."""

from __future__ import annotations

import enum
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.store import StoreError, StoreWarning

REDIS_URL = os.environ.get("CONTEXTFOLD_TEST_REDIS", "redis://127.0.0.1:6399/0")


def redis_store(ttl: timedelta | None = cf.DEFAULT_TTL) -> cf.RedisCodeMapStore:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        if os.environ.get("CI"):
            raise  # CI starts a Redis server: its absence is a failure, not a skip
        pytest.skip(f"no Redis server at {REDIS_URL} (.ci/run starts one)")
    return cf.RedisCodeMapStore(client, prefix=f"test:{uuid.uuid4().hex}:", ttl=ttl)


@pytest.fixture(params=["sqlite-memory", "sqlite-file", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    def make(ttl: timedelta | None = cf.DEFAULT_TTL) -> cf.CodeMapStore:
        if request.param == "sqlite-memory":
            return cf.SQLiteCodeMapStore(":memory:", ttl=ttl)
        if request.param == "sqlite-file":
            return cf.SQLiteCodeMapStore(str(tmp_path / "maps.db"), ttl=ttl)
        return redis_store(ttl)

    yield make


def mapped(*files: str, deleted: tuple[str, ...] = ()) -> cf.ConsolidatedMemory:
    memory = cf.consolidate({"edited": list(files), "deleted": list(deleted)}, min_files=1)
    assert memory is not None
    return memory


def test_write_merges_with_the_live_map(make_store: object) -> None:
    store = make_store()  # type: ignore[operator]
    first = mapped("src/store/a.ts", "src/store/b.ts")
    store.write(first)
    second = mapped("src/store/c.ts", deleted=("src/store/a.ts",))
    stored = store.write(second)
    assert cf.consolidated_files(stored) == ["src/store/c.ts", "src/store/b.ts"]
    assert "- src/store/b.ts (changed earlier)" in stored
    assert store.get(first.key) == stored and store.get("codemap:nothing") is None


def test_recall_by_path_and_by_word(make_store: object) -> None:
    store = make_store()  # type: ignore[operator]
    store.write(mapped("brain/src/runStore/a.ts", "brain/src/runStore/b.ts"))
    store.write(mapped("api/routes/x.ts", "api/routes/y.ts"))
    assert [m.key for m in store.recall("the bug in brain/src/runStore/a.ts")] == ["codemap:brain/src/runStore"]
    assert [m.key for m in store.recall("fix the run store")] == ["codemap:brain/src/runStore"]
    assert store.recall("nothing relevant here") == []


def test_recall_gives_at_most_six_maps_most_specific_first(make_store: object) -> None:
    # SPEC §8: recall(text) gives the maps for the areas named, most specific first, at
    # most 6. Map areas stop at four folders, so the request names two trees of four.
    store = make_store()  # type: ignore[operator]
    areas = [tree[:depth] for tree in ("a/b/c/d", "p/q/r/s") for depth in (1, 3, 5, 7)]
    for area in areas:
        store.write(mapped(f"{area}/x.ts", f"{area}/y.ts"))
    request = "the bug in a/b/c/d/x.ts, and p/q/r/s/y.ts"
    recalled = [m.key.removeprefix("codemap:") for m in store.recall(request)]
    assert [area.count("/") for area in recalled] == [3, 3, 2, 2, 1, 1]
    assert sorted(recalled) == sorted(area for area in areas if area.count("/") >= 1)
    assert len(store.recall(request, max=8)) == 8


def test_invalidate_takes_changed_files_out(make_store: object) -> None:
    store = make_store()  # type: ignore[operator]
    store.write(mapped("src/a.ts", "src/b.ts"))
    assert store.invalidate(["SRC\\A.ts"]) == 1
    assert cf.consolidated_files(store.get("codemap:src") or "") == ["src/b.ts"]
    assert store.invalidate(["src/zzz.ts"]) == 0
    assert store.invalidate(["src/b.ts"]) == 1 and store.get("codemap:src") is None


def test_a_map_left_listing_no_file_is_dropped_not_served(make_store: object) -> None:
    # A run that deleted every file the map listed (or a deletion-only run with no map
    # before it) left a bare header, recalled for its area; and invalidate, finding no
    # entry left, deleted it whatever paths it was given.
    store = make_store()  # type: ignore[operator]
    store.write(mapped("src/old/a.ts", "src/old/b.ts", "src/old/c.ts"))
    gone = mapped(deleted=("src/old/a.ts", "src/old/b.ts", "src/old/c.ts"))
    assert store.write(gone) == "" and store.get(gone.key) is None
    assert store.recall("src/old/a.ts") == []
    assert store.write(mapped(deleted=("lib/x.ts", "lib/y.ts"))) == "" and store.get("codemap:lib") is None
    # Content under another key is a store's to keep, listing no file or not.
    store.write(cf.ConsolidatedMemory("notes:run", "no files here"))
    assert store.invalidate(["elsewhere/z.py"]) == 0 and store.get("notes:run") == "no files here"


def test_invalidate_refuses_a_bare_path(make_store: object) -> None:
    # A str is an iterable of characters: none matched, so the changed file stayed listed.
    store = make_store()  # type: ignore[operator]
    store.write(mapped("src/a.ts", "src/b.ts"))
    with pytest.raises(cf.ArgumentTypeError, match="changed_paths must be an iterable of paths, not a str"):
        store.invalidate("src/a.ts")
    assert cf.consolidated_files(store.get("codemap:src") or "") == ["src/a.ts", "src/b.ts"]


@pytest.mark.parametrize("maps", [0, 1])
def test_invalidate_names_a_changed_path_that_is_no_str(make_store: object, maps: int) -> None:
    # It named no index ("path: expected str"), and on a store with no map checked nothing.
    store = make_store()  # type: ignore[operator]
    if maps:
        store.write(mapped("src/a.ts", "src/b.ts"))
    with pytest.raises(cf.ArgumentTypeError, match=r"^changed_paths\[1\]: expected str, got int"):
        store.invalidate(["src/a.ts", 3])
    with pytest.raises(cf.ArgumentTypeError, match=r"^paths\[1\]: expected str, got int"):
        cf.without_consolidated_files("h\n- src/a.ts", ["src/b.ts", 3])


def test_a_map_a_store_cannot_hold_is_refused_by_field(make_store: object) -> None:
    # A lone surrogate (a task cut mid-emoji by a JavaScript host) cannot be UTF-8: the
    # write raised the codec's bare UnicodeEncodeError.
    store = make_store()  # type: ignore[operator]
    for memory, field in (
        (cf.ConsolidatedMemory("codemap:src", "- src/\ud83d.ts"), "content"),
        (cf.ConsolidatedMemory("codemap:\ud83d", "- src/a.ts"), "key"),
    ):
        with pytest.raises(cf.ArgumentError, match=rf"ConsolidatedMemory\.{field} holds a lone surrogate at index"):
            store.write(memory)
    with pytest.raises(cf.ArgumentTypeError, match=r"ConsolidatedMemory\.content must be a str, got int"):
        store.write(cf.ConsolidatedMemory("codemap:src", 5))  # type: ignore[arg-type]
    assert store.live() == []


@pytest.mark.parametrize(
    ("path", "error", "words"),
    [
        ("", cf.ArgumentError, "path must name a database file or be ':memory:'"),
        ("maps\0.db", cf.ArgumentError, "path holds a NUL"),
        (5, cf.ArgumentTypeError, "path must be a str or os.PathLike"),
    ],
)
def test_a_sqlite_path_that_names_no_file_is_refused(path: object, error: type, words: str) -> None:
    # "" opened a private temporary database a connection: another thread, or this one
    # after close(), found no maps (or no table).
    with pytest.raises(error, match=words):
        cf.SQLiteCodeMapStore(path)  # type: ignore[arg-type]


def test_a_redis_prefix_utf8_cannot_hold_is_refused() -> None:
    with pytest.raises(cf.ArgumentError, match=r"RedisCodeMapStore\.prefix holds a lone surrogate at index 2"):
        cf.RedisCodeMapStore(object(), prefix="cf\udc00:")


def test_a_ttl_that_is_no_timedelta_is_refused() -> None:
    with pytest.raises(cf.ArgumentTypeError, match="ttl must be a timedelta or None, got int"):
        cf.SQLiteCodeMapStore(":memory:", ttl=5)  # type: ignore[arg-type]


def test_a_sqlite_path_may_be_a_path_object(tmp_path: Path) -> None:
    store = cf.SQLiteCodeMapStore(tmp_path / "maps.db")
    store.write(mapped("src/a.ts", "src/b.ts"))
    assert cf.SQLiteCodeMapStore(str(tmp_path / "maps.db")).get("codemap:src") is not None


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(days=-30), timedelta(microseconds=-1)])
def test_a_ttl_that_is_not_positive_is_refused(ttl: timedelta) -> None:
    # Each write was taken, and gone at once: get() None, recall() [].
    for build in (lambda: cf.SQLiteCodeMapStore(":memory:", ttl=ttl), lambda: cf.RedisCodeMapStore(object(), ttl=ttl)):
        with pytest.raises(cf.ArgumentError, match="ttl must be positive"):
            build()


def test_a_write_of_no_consolidated_memory_is_refused(make_store: object) -> None:
    # A bare AttributeError ('dict' object has no attribute 'key').
    store = make_store()  # type: ignore[operator]
    for memory in ({"key": "codemap:src", "content": "x"}, ("codemap:src", "x"), None):
        with pytest.raises(cf.ArgumentTypeError, match="memory must be a ConsolidatedMemory, got"):
            store.write(memory)


def test_a_key_that_is_no_str_is_refused(make_store: object) -> None:
    # get(123) answered None, as for a key with no map.
    with pytest.raises(cf.ArgumentTypeError, match="key"):
        make_store().get(123)  # type: ignore[operator]


def test_a_redis_store_is_named_by_its_checked_prefix() -> None:
    # The index was named from the raw argument: a str enum's member spelled it otherwise.
    prefix = enum.Enum("Prefix", {"A": "pfx:"}, type=str).A  # type: ignore[misc]
    store = cf.RedisCodeMapStore(object(), prefix=prefix)
    assert (store.prefix, store.index) == ("pfx:", "pfx:index")
    with pytest.raises(cf.ArgumentTypeError, match="url must be a str or None, got int"):
        cf.RedisCodeMapStore(url=5)  # type: ignore[arg-type]


def test_a_redis_client_that_decodes_replies_is_refused() -> None:
    # Its str replies failed every read with a bare AttributeError ('str' object has no
    # attribute 'decode'), and a map that is not UTF-8 could not be skipped as corrupted.
    redis = pytest.importorskip("redis")
    words = "the client decodes replies to str: make it with decode_responses=False"
    for client in (redis.Redis(decode_responses=True), redis.Redis.from_url(f"{REDIS_URL}?decode_responses=true")):
        with pytest.raises(cf.ArgumentError, match=words):
            cf.RedisCodeMapStore(client)
    with pytest.raises(cf.ArgumentError, match=words):
        cf.RedisCodeMapStore(url=f"{REDIS_URL}?decode_responses=true")


@pytest.mark.parametrize("moment", ["listed", "watched"])
def test_redis_expiry_keeps_a_map_written_meanwhile(moment: str) -> None:
    # expire() read the stale maps, then deleted each unconditionally: a replica's write
    # landing in between returned, and its map was gone. The write lands after the map
    # was listed (a check again would see it) or after it was read under watch (only the
    # transaction sees it).
    redis = pytest.importorskip("redis")
    other = redis_store(timedelta(minutes=1))
    stale = cf.RedisCodeMapStore(other.client, prefix=other.prefix, ttl=other.ttl)
    now = time.time()  # one clock for every store: no real minute can pass between them
    other._clock = lambda: now  # type: ignore[method-assign]
    stale._clock = lambda: now - 3_600  # written an hour ago
    stale.write(mapped("src/old.ts"))
    written: list[str] = []

    def write_once(now: str) -> None:
        if now == moment and not written:
            written.append(now)
            other.write(mapped("src/fresh.ts"))

    class Interleaving(redis.Redis):  # type: ignore[misc]
        def zrangebyscore(self, name: Any, low: Any, high: Any, *args: Any, **kwargs: Any) -> Any:
            found = super().zrangebyscore(name, low, high, *args, **kwargs)
            if low == "-inf":  # expire() has listed the stale maps
                write_once("listed")
            return found

        def pipeline(self, *args: Any, **kwargs: Any) -> Any:
            pipe = super().pipeline(*args, **kwargs)
            read = pipe.zscore

            def zscore(*args: Any, **kwargs: Any) -> Any:
                found = read(*args, **kwargs)
                write_once("watched")  # the map's score read under watch, not yet deleted
                return found

            pipe.zscore = zscore
            return pipe

    expirer = cf.RedisCodeMapStore(Interleaving.from_url(REDIS_URL), prefix=other.prefix, ttl=other.ttl)
    expirer._clock = lambda: now  # type: ignore[method-assign]
    assert expirer.expire() == 0
    assert written == [moment]
    assert cf.consolidated_files(other.get("codemap:src") or "") == ["src/fresh.ts"]


def test_expired_maps_do_not_come_back(make_store: object) -> None:
    store = make_store(ttl=timedelta(minutes=1))  # type: ignore[operator]
    now = time.time()  # a fixed clock: no real minute can pass between the writes and the reads

    def written_an_hour_ago() -> float:
        return now - 3_600

    def today() -> float:
        return now

    store._clock = written_an_hour_ago
    store.write(mapped("src/a.ts", "src/b.ts"))
    store._clock = today
    assert store.live() == [] and store.get("codemap:src") is None
    stored = store.write(mapped("src/c.ts"))  # the expired map is not merged in
    assert cf.consolidated_files(stored) == ["src/c.ts"]
    store._clock = written_an_hour_ago
    store.write(mapped("lib/x.ts"))
    store._clock = today
    assert store.expire() == 1  # the stale lib map, not the src map written anew
    assert [m.key for m in store.live()] == ["codemap:src"]


def test_concurrent_writers_never_lose_an_update(make_store: object) -> None:
    store = make_store()  # type: ignore[operator]
    files = [f"src/shared/f{i}.ts" for i in range(10)]

    def write(path: str) -> None:
        for _ in range(3):
            store.write(mapped(path))

    threads = [threading.Thread(target=write, args=(p,)) for p in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(cf.consolidated_files(store.get("codemap:src/shared") or "")) == sorted(files)


def test_an_empty_store() -> None:
    store = cf.SQLiteCodeMapStore()
    assert store.live() == [] and store.expire() == 0


# Hostile storage (issue #15): corrupted rows, a read-only database, bad Redis members.


def sqlite_with_bad_rows(path: Path) -> cf.SQLiteCodeMapStore:
    """A store holding one good map and three rows another program corrupted."""
    store = cf.SQLiteCodeMapStore(str(path))
    store.write(mapped("src/a.ts", "src/b.ts"))
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        now = time.time()
        db.execute("INSERT INTO codemaps VALUES ('codemap:utf8', CAST(x'ff2d2061' AS TEXT), ?)", (now,))
        db.execute("INSERT INTO codemaps VALUES ('codemap:blob', x'2d2061', ?)", (now,))
        db.execute("INSERT INTO codemaps VALUES ('codemap:when', '- a', 'soon')")
    return store


def test_sqlite_corrupted_rows_are_skipped_and_reported(tmp_path: Path) -> None:
    store = sqlite_with_bad_rows(tmp_path / "maps.db")
    with pytest.warns(StoreWarning) as caught:
        assert [m.key for m in store.live()] == ["codemap:src"]
    reported = sorted(str(w.message) for w in caught)
    assert len(reported) == 3
    for key, reason in (("blob", "not text"), ("utf8", "UTF-8"), ("when", "not a number")):
        assert any(f"'codemap:{key}'" in r and reason in r for r in reported), (key, reason, reported)
    with pytest.warns(StoreWarning):
        assert [m.key for m in store.recall("look at src/a.ts")] == ["codemap:src"]
    with pytest.warns(StoreWarning, match="'codemap:utf8'"):  # a write replaces the corrupted row
        stored = store.write(cf.ConsolidatedMemory("codemap:utf8", "- utf8/a.ts"))
    assert stored == "- utf8/a.ts"
    with pytest.warns(StoreWarning):
        assert store.get("codemap:utf8") == "- utf8/a.ts"


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "maps.db"
    path.write_bytes(b"not a database, " * 256)
    with pytest.raises(StoreError, match=r"maps\.db") as raised:
        cf.SQLiteCodeMapStore(str(path))
    assert isinstance(raised.value, cf.ContextfoldError)


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """The files and folders read-only, even for root (who writes through permissions)."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None and not os.environ.get("CI"):
            pytest.skip("running as root without chattr: cannot make a file read-only")
        subprocess.run(["chattr", "+i", *map(str, paths)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", *map(str, paths)], check=True)
        return
    modes = {p: p.stat().st_mode for p in paths}
    for p in paths:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        yield
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def test_a_read_only_database_can_be_recalled_from(tmp_path: Path) -> None:
    folder = tmp_path / "maps"
    folder.mkdir()
    path = folder / "maps.db"
    with cf.SQLiteCodeMapStore(str(path)) as writer:
        writer.write(mapped("src/a.ts", "src/b.ts"))
    before = sorted(folder.iterdir())
    with read_only(path, folder):
        store = cf.SQLiteCodeMapStore(str(path))
        assert [m.key for m in store.recall("look at src/a.ts")] == ["codemap:src"]
        assert store.get("codemap:src") is not None
        with pytest.raises(StoreError, match="read-only"):
            store.write(mapped("src/c.ts"))
        with pytest.raises(StoreError, match="read-only"):
            store.expire()
        store.close()
    assert sorted(folder.iterdir()) == before


def test_redis_a_bad_index_member_hides_no_other_map() -> None:
    store = redis_store()
    store.write(mapped("src/a.ts", "src/b.ts"))
    now = time.time()
    prefix = store.prefix.encode()
    store.client.zadd(store.index, {b"codemap:\xff": now, b"codemap:bad-content": now})
    store.client.hset(prefix + b"codemap:\xff", mapping={"content": b"- x", "written": repr(now)})
    store.client.hset(prefix + b"codemap:bad-content", mapping={"content": b"\xff- x", "written": repr(now)})
    with pytest.warns(StoreWarning) as caught:
        assert [m.key for m in store.live()] == ["codemap:src"]
    assert len(caught) == 2 and any("codemap:bad-content" in str(w.message) for w in caught)
    with pytest.warns(StoreWarning):
        assert [m.key for m in store.recall("look at src/a.ts")] == ["codemap:src"]
    with pytest.warns(StoreWarning, match="codemap:bad-content"):  # a write replaces the corrupted map
        assert store.write(cf.ConsolidatedMemory("codemap:bad-content", "- b/x.ts")) == "- b/x.ts"
    store.client.hset(prefix + b"codemap:src", "written", b"soon")
    with pytest.warns(StoreWarning, match="codemap:src"):
        assert store.write(mapped("src/c.ts")) == mapped("src/c.ts").content


def test_redis_keys_another_program_holds_are_a_store_error() -> None:
    store = redis_store()
    store.write(mapped("src/a.ts", "src/b.ts"))
    name = store.prefix.encode() + b"codemap:src"
    store.client.set(name, b"not a map")  # the index still lists it
    calls = {
        "live": store.live,
        "recall": lambda: store.recall("src/a.ts"),
        "write": lambda: store.write(mapped("src/c.ts")),
    }
    for what, call in calls.items():
        with pytest.raises(StoreError, match=r"codemap:src'? holds a string, not a hash") as raised:
            call()
        assert isinstance(raised.value, cf.ContextfoldError), what
    assert store.client.get(name) == b"not a map"  # never overwritten
    store.client.delete(name, store.index)
    store.client.set(store.index, b"not an index")
    for call in [*calls.values(), store.expire]:
        with pytest.raises(StoreError, match=r"index'? holds a string, not a zset"):
            call()


@pytest.mark.parametrize("copied", [("maps.db", "maps.db-wal"), ("maps.db", "maps.db-wal", "maps.db-shm")])
def test_a_read_only_database_serves_its_unsaved_writes_or_refuses(tmp_path: Path, copied: tuple[str, ...]) -> None:
    # Read-only, the store opened the file immutable, which never reads the write-ahead
    # log: writes not yet checkpointed into the file were served stale, with no warning.
    live = tmp_path / "live"
    live.mkdir()
    with cf.SQLiteCodeMapStore(str(live / "maps.db")) as writer:
        writer.write(mapped("src/a.ts"))  # closing the last connection saves it into the file
    writer = cf.SQLiteCodeMapStore(str(live / "maps.db"))
    writer.write(mapped("lib/x.ts"))
    writer.write(mapped("src/new.ts"))
    assert (live / "maps.db-wal").stat().st_size > 0  # held open: the writes wait in the log
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    for name in copied:
        shutil.copy(live / name, snapshot / name)
    written = writer.live()
    writer.close()
    assert [m.key for m in written] == ["codemap:lib", "codemap:src"] and "src/new.ts" in written[1].content
    paths = [snapshot, *(snapshot / name for name in copied)]
    with read_only(*paths):
        if "maps.db-shm" in copied:  # SQLite reads the log through its index
            store = cf.SQLiteCodeMapStore(str(snapshot / "maps.db"))
            assert store.live() == written
            store.close()
        else:
            with pytest.raises(StoreError, match=r"maps\.db-wal"):
                cf.SQLiteCodeMapStore(str(snapshot / "maps.db"))


def test_closing_an_in_memory_store_waits_for_a_thread_using_it() -> None:
    # close() freed the one shared connection while another thread was inside a call
    # on it: a segfault in CPython's sqlite3.
    store = cf.SQLiteCodeMapStore(":memory:")
    store.write(mapped("src/a.ts"))
    inside, go_on = threading.Event(), threading.Event()
    read: list[Any] = []

    def clock() -> float:  # read inside the store's lock, as the query is made
        inside.set()
        go_on.wait(30)
        return time.time()

    closing = threading.Event()  # close() asked for the store's lock

    class AnnouncedLock:
        def __init__(self, lock: Any) -> None:
            self.lock = lock

        def acquire(self) -> bool:
            if threading.current_thread().name == "closer":
                closing.set()
            return bool(self.lock.acquire())

        def release(self) -> None:
            self.lock.release()

        def __enter__(self) -> bool:
            return self.acquire()

        def __exit__(self, *exc: object) -> None:
            self.release()

    store._clock = clock  # type: ignore[method-assign]
    store._lock = AnnouncedLock(store._lock)  # type: ignore[assignment]
    reader = threading.Thread(target=lambda: read.append(store.live()))
    reader.start()
    inside.wait(30)
    closer = threading.Thread(target=store.close, name="closer")
    closer.start()
    # Fixed, close() now waits for the reader's lock; unfixed, it has closed the
    # connection under the reader without asking (and ended): either way, no guess at
    # how long a thread takes to get there.
    while closer.is_alive() and not closing.wait(0.01):
        pass
    go_on.set()
    reader.join(30)
    closer.join(30)
    assert [[m.key for m in maps] for maps in read] == [["codemap:src"]]
    with pytest.raises(StoreError, match="closed"):
        store.live()


def test_closing_an_in_memory_store_from_the_thread_using_it_does_not_wait_for_itself() -> None:
    # A signal handler that closes the store runs on the thread inside the call: the
    # store's lock, taken again by that thread, waited for itself forever.
    store = cf.SQLiteCodeMapStore(":memory:")
    store.write(mapped("src/a.ts"))

    def clock() -> float:  # read inside the store's lock, as a handler would run there
        store.close()
        return time.time()

    store._clock = clock  # type: ignore[method-assign]
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            store.live()
        except StoreError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive() and len(outcome) == 1 and "closed" in str(outcome[0])


def test_redis_a_transaction_that_keeps_failing_gives_up() -> None:
    # redis-py reports a connection lost while watching as WatchError, which was retried
    # forever: a value over the server's proto-max-bulk-len resent 1.1 MB 544 times in 5 s.
    redis = pytest.importorskip("redis")
    store = redis_store()
    tries: list[int] = []

    class Failing(redis.Redis):  # type: ignore[misc]
        def pipeline(self, *args: Any, **kwargs: Any) -> Any:
            pipe = super().pipeline(*args, **kwargs)

            real = pipe.execute

            def execute(*args: Any, **kwargs: Any) -> Any:
                tries.append(1)
                if len(tries) <= 100:  # then it would go through: unbounded retries end too
                    raise redis.WatchError("A ConnectionError occurred while watching one or more keys")
                return real(*args, **kwargs)

            pipe.execute = execute
            return pipe

    failing = cf.RedisCodeMapStore(Failing.from_url(REDIS_URL), prefix=store.prefix)
    with pytest.raises(StoreError, match=r"gave up on '.*codemap:src' after 64 attempts") as raised:
        failing.write(mapped("src/a.ts"))
    assert len(tries) == cf.store.TRANSACTION_ATTEMPTS == 64
    assert isinstance(raised.value.__cause__, redis.WatchError)
    assert store.live() == []


def test_redis_a_store_without_ttl_keeps_a_map_another_gave_one() -> None:
    # HSET keeps a key's timeout: a map a store with a ttl wrote expired, in Redis, under
    # a store without one.
    timed = redis_store(timedelta(seconds=100))
    timed.write(mapped("src/a.ts"))
    name = f"{timed.prefix}codemap:src"
    assert 0 < timed.client.ttl(name) <= 100
    cf.RedisCodeMapStore(timed.client, prefix=timed.prefix, ttl=None).write(mapped("src/b.ts"))
    assert timed.client.ttl(name) == -1  # no timeout


def test_redis_the_key_index_is_refused_not_written_over_the_index() -> None:
    # It was written as a hash over the store's own sorted set, and every call after
    # raised "another program writes under this prefix".
    store = redis_store()
    store.write(mapped("src/a.ts"))
    with pytest.raises(cf.ArgumentError, match="the key 'index' names the store's index, not a map"):
        store.write(cf.ConsolidatedMemory("index", "- a/b.ts"))
    assert [m.key for m in store.live()] == ["codemap:src"]


def test_redis_failures_are_store_errors() -> None:
    # A refused connection (or a timeout, or the server out of memory) came out as redis-py's own exception.
    redis = pytest.importorskip("redis")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(port=port, socket_connect_timeout=5, retry=Retry(NoBackoff(), 0))  # fail at once
    store = cf.RedisCodeMapStore(client, prefix="gone:")
    for call in (store.live, lambda: store.write(mapped("src/a.ts")), store.expire, lambda: store.recall("src")):
        with pytest.raises(StoreError, match=r"^code-map store gone:: ConnectionError: "):
            call()
    # Lost between another type's WRONGTYPE reply and the look at which key holds it.
    held = redis_store()
    held.client.set(f"{held.prefix}codemap:src", "another program's")

    class TypeFails(redis.Redis):  # type: ignore[misc]
        def type(self, name: Any) -> Any:
            raise redis.ConnectionError("lost")

    lost = cf.RedisCodeMapStore(TypeFails.from_url(REDIS_URL), prefix=held.prefix)
    with pytest.raises(StoreError, match=r"ConnectionError: lost"):
        lost.write(mapped("src/a.ts"))


@pytest.mark.parametrize("written", [b"nan", b"inf", b"-inf", b"1000"])
def test_redis_a_map_is_live_as_a_write_judges_it(written: bytes) -> None:
    # live() judged by the index's score and a write by the map's own time: a map it
    # listed was dropped by the next write, with no warning.
    store = redis_store()
    store.write(mapped("src/a.ts", "src/b.ts"))
    store.client.hset(f"{store.prefix}codemap:src", "written", written)
    number = written != b"nan" and written != b"inf" and written != b"-inf"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert store.live() == []  # 1000: written in 1970, long expired
        assert cf.consolidated_files(store.write(mapped("src/c.ts"))) == ["src/c.ts"]
    assert [w.category for w in said] == ([] if number else [StoreWarning, StoreWarning])


def test_redis_live_reads_every_map_in_one_round_trip() -> None:
    redis = pytest.importorskip("redis")
    store = redis_store()
    for area in range(20):
        store.write(mapped(f"area{area}/a.ts"))
    commands: list[Any] = []

    class Counting(redis.Redis):  # type: ignore[misc]
        def execute_command(self, *args: Any, **kwargs: Any) -> Any:
            commands.append(args[0])
            return super().execute_command(*args, **kwargs)

    counted = cf.RedisCodeMapStore(Counting.from_url(REDIS_URL), prefix=store.prefix)
    assert len(counted.live()) == 20
    assert commands == ["ZRANGEBYSCORE"]  # the maps' HMGETs go as one pipeline


def _in_a_child(run: Any, then: Any = None) -> int:
    """Runs `run` in a child made by os.fork, and `then` in the parent meanwhile: the
    child's exit status (0 when `run` returned True). A child that hangs is ended by an
    alarm, so a hang fails, never blocks."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        import signal

        signal.alarm(60)
        try:
            os._exit(0 if run() else 1)
        except BaseException:
            os._exit(2)
    if then is not None:
        then()
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_writes_through_a_connection_of_its_own(tmp_path: Path) -> None:
    # A child kept using the connection it inherited (SQLite forbids it): once the parent
    # closed its own, SQLite saw no other connection, saved the write-ahead log into the
    # file and deleted it, and every write the child made after went into the deleted log.
    store = cf.SQLiteCodeMapStore(str(tmp_path / "maps.db"))
    store.write(mapped("main/a.ts"))  # this thread's connection, which the child inherits
    parent_closed, tell = os.pipe()

    def child() -> bool:
        os.read(parent_closed, 1)
        return all(store.write(mapped(f"w{i}/a.ts")) is not None for i in range(20))

    def parent() -> None:
        store.close()
        os.write(tell, b".")

    assert _in_a_child(child, parent) == 0
    written = {m.key for m in cf.SQLiteCodeMapStore(str(tmp_path / "maps.db")).live()}
    assert written == {"codemap:main"} | {f"codemap:w{i}" for i in range(20)}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_childs_writes_outlive_the_parent_closing_after_it_connected(tmp_path: Path) -> None:
    # SQLite's per-process lock table came with the fork: while the inherited connection
    # stayed open, the child's fresh one took no lock of its own, and the parent closing
    # its last connection saved and deleted the write-ahead log under the child (helper-86).
    store = cf.SQLiteCodeMapStore(str(tmp_path / "maps.db"))
    store.write(mapped("main/a.ts"))
    (child_wrote, tell_parent), (parent_closed, tell_child) = os.pipe(), os.pipe()

    def child() -> bool:
        first = store.write(mapped("first/a.ts")) is not None
        os.write(tell_parent, b".")
        os.read(parent_closed, 1)
        return first and all(store.write(mapped(f"w{i}/a.ts")) is not None for i in range(20))

    def parent() -> None:
        os.read(child_wrote, 1)
        store.close()
        os.write(tell_child, b".")

    assert _in_a_child(child, parent) == 0
    written = {m.key for m in cf.SQLiteCodeMapStore(str(tmp_path / "maps.db")).live()}
    assert written == {"codemap:main", "codemap:first"} | {f"codemap:w{i}" for i in range(20)}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_an_in_memory_store_forked_while_a_thread_uses_it_serves_the_child() -> None:
    # The store's lock, held by a parent thread at the fork, was held in the child by a
    # thread that is not there: the child's first call waited forever.
    store = cf.SQLiteCodeMapStore(":memory:")
    store.write(mapped("src/a.ts"))
    inside, go_on = threading.Event(), threading.Event()

    def clock() -> float:  # read inside the store's lock
        if threading.current_thread().name == "user":
            inside.set()
            go_on.wait(60)
        return time.time()

    store._clock = clock  # type: ignore[method-assign]
    user = threading.Thread(target=store.live, name="user")
    user.start()
    inside.wait(60)
    # Fixed, the fork waits for the store's lock (no thread is inside the store at the
    # fork); the user thread is let go once the fork asks for it, or at once unfixed.
    lock = store._lock
    asked = threading.Event()

    class AnnouncedLock:
        def acquire(self, *args: Any) -> bool:
            if threading.current_thread() is threading.main_thread():
                asked.set()
            return bool(lock.acquire(*args))

        def release(self) -> None:
            lock.release()

        def __enter__(self) -> bool:
            return self.acquire()

        def __exit__(self, *exc: object) -> None:
            self.release()

    store._lock = AnnouncedLock()  # type: ignore[assignment]
    releaser = threading.Thread(target=lambda: (asked.wait(60), go_on.set()))
    releaser.start()
    status = _in_a_child(lambda: [m.key for m in store.live()] == ["codemap:src"])
    go_on.set()
    user.join(60)
    releaser.join(60)
    assert status == 0
    assert [m.key for m in store.live()] == ["codemap:src"]


def test_a_relative_sqlite_path_names_the_file_it_named_when_opened(tmp_path: Path, monkeypatch: Any) -> None:
    # Each thread connects when it first uses the store: a relative path was resolved
    # against the working directory of that moment, another file.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    store = cf.SQLiteCodeMapStore("maps.db")
    store.write(mapped("src/a.ts"))
    monkeypatch.chdir(tmp_path / "b")
    seen: list[object] = []
    thread = threading.Thread(target=lambda: seen.append([m.key for m in store.live()]))
    thread.start()
    thread.join(60)
    assert seen == [["codemap:src"]]
    assert not (tmp_path / "b" / "maps.db").exists()
