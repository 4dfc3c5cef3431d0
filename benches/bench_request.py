"""pack_request on corpus request bodies (the corpus lines as they are stored) at an
8,000-token budget, beside what a gateway does without it: ``orjson.loads`` alone (only
parsing, with the fastest Python JSON library), and ``json.loads`` + ``pack_handoff`` +
``json.dumps``. And pack_requests on 10,000 bodies with 1 and 2 threads, and the corpus as
Responses bodies (``input`` items, ``instructions``, ``tools``) counted by chars/4 and by
exact o200k_base counts. The corpus bodies again in each of four JSON styles (compact with
``ensure_ascii=False``, ``orjson.dumps``, ``json.dumps``'s default with a ``\\uXXXX`` escape
for every non-ASCII character, and ``indent=2``): pack_request beside ``orjson.loads`` and
the json pipeline, and pack_requests on 1 and 2 threads. Outputs are checked against the
object path before timing.

    pytest benches/bench_request.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from contextfold import (
    DEFAULT_COUNT_CACHE_BYTES,
    _backend,
    pack_handoff,
    pack_request,
    pack_requests,
    reference,
    set_count_cache,
)
from contextfold.synthetic import responses_items

from .conftest import SHARED, native

BUDGET = 8_000


@cache
def bodies() -> list[bytes]:
    path = SHARED / "corpus" / "transcripts.jsonl"
    if not path.exists():
        pytest.skip(f"corpus not found at {path} (set CONTEXTFOLD_SHARED)")
    return path.read_bytes().splitlines()


def object_path(body: bytes) -> bytes:
    """What a gateway does without pack_request."""
    request = json.loads(body)
    pack = pack_handoff(request["messages"], target_context_tokens=BUDGET)
    return json.dumps({**request, "messages": pack.messages}).encode()


def check_bodies(packed: list[Any]) -> None:
    for body, result in zip(bodies(), packed, strict=True):
        assert json.loads(result.body) == json.loads(object_path(body))


@pytest.mark.parametrize("backend", ["native", "python"])
def bench_pack_request(benchmark: Any, backend: str) -> None:
    impl = native() if backend == "native" else reference
    with _backend.using(impl):
        check_bodies([pack_request(b, target_context_tokens=BUDGET) for b in bodies()])
        benchmark.group = f"request bodies @ {BUDGET}"
        benchmark(lambda: [pack_request(b, target_context_tokens=BUDGET) for b in bodies()])


def bench_orjson_loads_alone(benchmark: Any) -> None:
    orjson = pytest.importorskip("orjson")
    assert [orjson.loads(b) for b in bodies()] == [json.loads(b) for b in bodies()]
    benchmark.group = f"request bodies @ {BUDGET}"
    benchmark(lambda: [orjson.loads(b) for b in bodies()])


def bench_json_loads_pack_handoff_dumps(benchmark: Any) -> None:
    with _backend.using(native()):
        benchmark.group = f"request bodies @ {BUDGET}"
        benchmark(lambda: [object_path(b) for b in bodies()])


def bench_orjson_loads_pack_handoff_dumps(benchmark: Any) -> None:
    orjson = pytest.importorskip("orjson")

    def run(body: bytes) -> bytes:
        request = orjson.loads(body)
        pack = pack_handoff(request["messages"], target_context_tokens=BUDGET)
        return bytes(orjson.dumps({**request, "messages": pack.messages}))

    with _backend.using(native()):
        assert [json.loads(run(b)) for b in bodies()] == [json.loads(object_path(b)) for b in bodies()]
        benchmark.group = f"request bodies @ {BUDGET}"
        benchmark(lambda: [run(b) for b in bodies()])


@pytest.mark.parametrize("threads", [1, 2])
def bench_pack_requests(benchmark: Any, threads: int) -> None:
    batch = [bodies()[i % len(bodies())] for i in range(10_000)]
    with _backend.using(native()):
        one_by_one = [pack_request(b, target_context_tokens=BUDGET) for b in bodies()]
        assert pack_requests(batch[: len(bodies())], target_context_tokens=BUDGET, threads=threads) == one_by_one
        benchmark.group = "pack_requests, 10,000 corpus bodies"
        benchmark.pedantic(
            lambda: pack_requests(batch, target_context_tokens=BUDGET, threads=threads), rounds=5, iterations=1
        )


STYLES: dict[str, Callable[[Any], bytes]] = {
    "compact": lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":")).encode(),
    "orjson": lambda o: bytes(pytest.importorskip("orjson").dumps(o)),
    "default": lambda o: json.dumps(o).encode(),
    "indent": lambda o: json.dumps(o, indent=2).encode(),
}


@cache
def styled_bodies(style: str) -> list[bytes]:
    """The corpus bodies written again in one JSON style, checked against the object path."""
    out = [STYLES[style](json.loads(b)) for b in bodies()]
    with _backend.using(native()):
        for body in out:
            packed = pack_request(body, target_context_tokens=BUDGET).body
            assert json.loads(packed) == json.loads(object_path(body))
    return out


@pytest.mark.parametrize("style", list(STYLES))
def bench_styles_pack_request(benchmark: Any, style: str) -> None:
    with _backend.using(native()):
        styled = styled_bodies(style)
        benchmark.group = f"styles: {style}"
        benchmark(lambda: [pack_request(b, target_context_tokens=BUDGET) for b in styled])


@pytest.mark.parametrize("style", list(STYLES))
def bench_styles_orjson_loads(benchmark: Any, style: str) -> None:
    orjson = pytest.importorskip("orjson")
    styled = styled_bodies(style)
    benchmark.group = f"styles: {style}"
    benchmark(lambda: [orjson.loads(b) for b in styled])


@pytest.mark.parametrize("style", list(STYLES))
def bench_styles_json_pipeline(benchmark: Any, style: str) -> None:
    with _backend.using(native()):
        styled = styled_bodies(style)
        benchmark.group = f"styles: {style}"
        benchmark(lambda: [object_path(b) for b in styled])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("style", list(STYLES))
def bench_styles_pack_requests(benchmark: Any, style: str, threads: int) -> None:
    styled = styled_bodies(style)
    batch = [styled[i % len(styled)] for i in range(2_000)]
    with _backend.using(native()):
        one_by_one = [pack_request(b, target_context_tokens=BUDGET) for b in styled]
        assert pack_requests(batch[: len(styled)], target_context_tokens=BUDGET, threads=threads) == one_by_one
        benchmark.group = f"styles: {style}, pack_requests on 2,000 bodies"
        benchmark.pedantic(
            lambda: pack_requests(batch, target_context_tokens=BUDGET, threads=threads), rounds=7, iterations=1
        )


TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}]


@cache
def responses_bodies() -> list[bytes]:
    """The corpus transcripts as Responses request bodies."""
    return [
        json.dumps(
            {
                "model": "m",
                "instructions": "Be brief.",
                "tools": TOOLS,
                "input": responses_items(json.loads(b)["messages"]),
            }
        ).encode()
        for b in bodies()
    ]


@pytest.mark.parametrize("estimate", [None, "o200k_base"])
def bench_pack_request_responses(benchmark: Any, estimate: Any) -> None:
    """Exact counts with the count cache off: this times the encoder (bench_replay.py
    times the cache)."""

    def pack_all() -> list[Any]:
        return [pack_request(b, target_context_tokens=BUDGET, estimate_tokens=estimate) for b in responses_bodies()]

    with _backend.using(native()):
        for body, packed in zip(responses_bodies(), pack_all(), strict=True):
            request = json.loads(body)
            pack = pack_handoff(
                request["input"],
                target_context_tokens=BUDGET,
                estimate_tokens=estimate,
                system=request["instructions"],
                tools=request["tools"],
                shape="responses",
            )
            assert json.loads(packed.body) == {**request, "input": pack.messages}
        benchmark.group = f"Responses bodies @ {BUDGET}"
        set_count_cache(0)
        try:
            benchmark(pack_all)
        finally:
            set_count_cache(DEFAULT_COUNT_CACHE_BYTES)


@pytest.mark.parametrize("how", ["pack_column native", "pack_column reference", "to_pylist + pack_lines native"])
def bench_arrow_column(benchmark: Any, how: str) -> None:
    """2,000 corpus rows as an Arrow column: packed where they lie, against each row made a
    Python object, packed as a line and made a column again (the outputs checked equal)."""
    pa = pytest.importorskip("pyarrow", reason="pyarrow comes with the integrations extra")
    from contextfold.integrations.arrow import pack_column
    from contextfold.integrations.dask import pack_lines

    column = pa.array([bodies()[i % len(bodies())] for i in range(2_000)], pa.large_binary())

    def through_python() -> Any:
        return pa.array([line.encode() for line in pack_lines(column.to_pylist(), target_context_tokens=BUDGET)])

    def in_place() -> Any:
        return pack_column(column, target_context_tokens=BUDGET)[0]

    run = through_python if how.startswith("to_pylist") else in_place
    backend = reference if how.endswith("reference") else native()
    with _backend.using(backend):
        assert run().to_pylist() == through_python().to_pylist()
        benchmark.group = "2,000 corpus rows as an Arrow column"
        benchmark.pedantic(run, rounds=3 if backend is reference else 7, iterations=1)
