"""Code-map stores (SPEC §8): the write rule applied atomically, recall, invalidation and
expiry, on SQLite (memory and file) and Redis. Concurrent writers never lose an update."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import contextfold as cf
import pytest

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


def test_invalidate_takes_changed_files_out(make_store: object) -> None:
    store = make_store()  # type: ignore[operator]
    store.write(mapped("src/a.ts", "src/b.ts"))
    assert store.invalidate(["SRC\\A.ts"]) == 1
    assert cf.consolidated_files(store.get("codemap:src") or "") == ["src/b.ts"]
    assert store.invalidate(["src/zzz.ts"]) == 0
    assert store.invalidate(["src/b.ts"]) == 1 and store.get("codemap:src") is None


def test_expired_maps_do_not_come_back(make_store: object) -> None:
    store = make_store(ttl=timedelta(seconds=-1))  # type: ignore[operator]
    store.write(mapped("src/a.ts", "src/b.ts"))
    assert store.live() == [] and store.get("codemap:src") is None
    stored = store.write(mapped("src/c.ts"))  # the expired map is not merged in
    assert cf.consolidated_files(stored) == ["src/c.ts"]
    assert store.expire() >= 1


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
