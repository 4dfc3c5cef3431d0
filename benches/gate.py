"""The benchmark gate's measurements: each speed ratio the project promises, measured in
one run and written as JSON for ``.ci/bench_gate.py``, which holds them to the floors in
``benches/floors.toml``.

A ratio is ``time(baseline) / time(contender)``: above 1 the contender is faster. The two
sides run interleaved (contender, baseline, contender, ...), each round timing a batch of
calls of about ``--round-ms`` milliseconds per side, and the median of the per-round
ratios is kept, so a burst of load on a shared machine moves a round or two, not the
figure. The first call of each side (warm-up) sizes the rounds.

    python -m benches.gate --out bench.json            # short mode, as CI runs it
    python -m benches.gate --rounds 21 --round-ms 200  # steadier figures
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import contextfold
from contextfold import ClearToolUses, pack_handoff, pack_many, pack_request, pack_requests, reference
from contextfold._backend import using
from contextfold._contract import EncodingName
from contextfold.bench import langchain_trimmer
from contextfold.synthetic import responses_items

from .bench_codemap import ITEMS, counter_sorted, fresh_in_order, then_allocate
from .bench_replay import replay
from .bench_request import STYLES, bodies, check_bodies, object_path, styled_bodies
from .conftest import corpus, repeated

BUDGET = 8_000
Call = Callable[[], Any]


@dataclass(frozen=True)
class Pair:
    """A ratio to measure: time(``baseline``) / time(``contender``). Single-threaded
    work is timed in CPU time, which a busy machine's other processes barely move;
    threaded work in wall time, the only clock that sees what threads gain. With
    ``setup``, each call of either side is given fresh arguments it makes, untimed."""

    contender: Callable[..., Any]
    baseline: Callable[..., Any]
    clock: Callable[[], float] = time.process_time
    setup: Callable[[], tuple[Any, ...]] | None = None


def _packer(impl: Any, convos: list[list[dict[str, Any]]], edits: tuple[Any, ...] = ()) -> Call:
    # Keywords as a user types them, as bench_pack.py calls it and as LangChain's side is
    # called: a pack without edits names none (`edits=()` cost the options lookup a
    # second keyword, 7% of a corpus pack), and none is unpacked from a dict (a call with
    # `**keywords` goes through an argument tuple and the dict: 0.11 µs more a call).
    if edits:

        def run() -> list[Any]:
            with using(impl):
                return [pack_handoff(c, target_context_tokens=BUDGET, edits=edits) for c in convos]

    else:

        def run() -> list[Any]:
            with using(impl):
                return [pack_handoff(c, target_context_tokens=BUDGET) for c in convos]

    return run


def _windower(impl: Any, convos: list[list[dict[str, Any]]]) -> Call:
    return lambda: [impl.window_start(c, 80, 64_000) for c in convos]


def _distinct_batch(n: int) -> list[list[dict[str, Any]]]:
    """n corpus transcripts, each a distinct copy (as a gateway's requests are)."""
    pool = corpus()
    return [json.loads(json.dumps(pool[i % len(pool)])) for i in range(n)]


def _long_batch(n: int, length: int) -> list[list[dict[str, Any]]]:
    """n distinct copies of a ``length``-message transcript (long agent runs)."""
    return [json.loads(json.dumps(repeated(length))) for _ in range(n)]


def pairs() -> dict[str, Pair]:
    """Every ratio the gate knows, by the name ``floors.toml`` gives it. Outputs are
    checked equal (or, for peers, counted) before anything is timed."""
    from contextfold import _native

    out: dict[str, Pair] = {}
    for name, convos in (("corpus", corpus()), ("1000", [repeated(1_000)])):
        native, python = _packer(_native, convos), _packer(reference, convos)
        assert [(p.kept, p.note) for p in native()] == [(p.kept, p.note) for p in python()]
        out[f"pack_handoff {name}: native vs reference"] = Pair(native, python)
        prepare = langchain_trimmer(BUDGET)
        if prepare is not None:
            trim = prepare(convos)
            assert len(trim()) == len(convos)
            out[f"pack_handoff {name}: native vs LangChain trim_messages"] = Pair(native, trim)

    # What context editing costs: packing the corpus with ClearToolUses() against without.
    edited = _packer(_native, corpus(), (ClearToolUses(),))
    checked = _packer(reference, corpus(), (ClearToolUses(),))
    assert [(p.kept, p.applied_edits) for p in edited()] == [(p.kept, p.applied_edits) for p in checked()]
    out["pack_handoff corpus: native edit+fold vs fold"] = Pair(edited, _packer(_native, corpus()))

    convos = [repeated(1_000)]
    window, window_reference = _windower(_native, convos), _windower(reference, convos)
    assert window() == window_reference()
    out["windowed 1000: native vs reference"] = Pair(window, window_reference)
    scan = getattr(_native, "_scan_floor", None)  # only in builds with the bench-floor feature
    if scan is not None:
        out["windowed 1000: native vs the C-like floor"] = Pair(window, lambda: [scan(c) for c in convos])

    for name, transcripts in (("2,000 corpus", _distinct_batch(2_000)), ("720 long", _long_batch(720, 120))):
        expected = [pack_handoff(c, target_context_tokens=BUDGET) for c in transcripts[:50]]

        def many(threads: int | None, transcripts: list[list[dict[str, Any]]] = transcripts) -> Call:
            return lambda: pack_many(transcripts, target_context_tokens=BUDGET, threads=threads)

        for threads in (None, 1, 2):
            assert pack_many(transcripts[:50], target_context_tokens=BUDGET, threads=threads) == expected
        out[f"pack_many {name}: 2 threads vs 1"] = Pair(many(2), many(1), time.perf_counter)
        out[f"pack_many {name}: default vs 1 thread"] = Pair(many(None), many(1), time.perf_counter)

    responses = [responses_items(repeated(1_000))]
    native, python = _packer(_native, responses), _packer(reference, responses)
    assert native() == python()
    out["pack_handoff responses 1000: native vs reference"] = Pair(native, python)

    requests = bodies()
    pack_all = partial(_request_packer, requests)
    with using(_native):
        check_bodies([pack_request(b, target_context_tokens=BUDGET) for b in requests])
    out["pack_request corpus: native vs json.loads + pack_handoff + json.dumps"] = Pair(
        pack_all, lambda: [object_path(b) for b in requests]
    )
    try:
        import orjson
    except ImportError:
        orjson_loads = None
        styles = [style for style in STYLES if style != "orjson"]  # written by orjson.dumps
    else:
        orjson_loads = orjson.loads
        styles = list(STYLES)
        out["pack_request corpus: native vs orjson.loads alone"] = Pair(
            pack_all, lambda: [orjson.loads(b) for b in requests]
        )
    # Issue #26: the same bodies written in each of four JSON styles (styled_bodies checks
    # each against the object path); json.loads and orjson read indented and escaped
    # bodies at their own speeds, so each style is its own ratio.
    styled = {style: styled_bodies(style) for style in styles}
    for style, written in styled.items():
        packer = partial(_request_packer, written)
        out[f"pack_request corpus, {style} JSON: native vs json.loads + pack_handoff + json.dumps"] = Pair(
            packer, lambda written=written: [object_path(b) for b in written]
        )
        if orjson_loads is not None:
            out[f"pack_request corpus, {style} JSON: native vs orjson.loads alone"] = Pair(
                packer, lambda written=written, loads=orjson_loads: [loads(b) for b in written]
            )

    try:
        import pyarrow as pa
    except ImportError:
        pass
    else:
        out["pack_column 2,000 corpus rows: Arrow buffers vs to_pylist + pack_lines"] = _arrow_pair(pa, requests)

    batch = [requests[i % len(requests)] for i in range(10_000)]
    with using(_native):
        assert pack_requests(batch[: len(requests)], target_context_tokens=BUDGET, threads=2) == [
            pack_request(b, target_context_tokens=BUDGET) for b in requests
        ]

    def batched(threads: int, batch: list[bytes] = batch) -> Call:
        def run() -> list[Any]:
            with using(_native):
                return pack_requests(batch, target_context_tokens=BUDGET, threads=threads)

        return run

    out["pack_requests 10,000 corpus: 2 threads vs 1"] = Pair(batched(2), batched(1), time.perf_counter)
    for style, written in styled.items():
        styled_batch = [written[i % len(written)] for i in range(10_000)]
        with using(_native):
            assert pack_requests(written, target_context_tokens=BUDGET, threads=2) == [
                pack_request(b, target_context_tokens=BUDGET) for b in written
            ]
        out[f"pack_requests 10,000 corpus, {style} JSON: 2 threads vs 1"] = Pair(
            batched(2, styled_batch), batched(1, styled_batch), time.perf_counter
        )

    def replayed(estimate: EncodingName | None) -> Call:
        def run() -> list[Any]:
            with using(_native):
                return replay(estimate)

        return run

    # The count cache warm (the gate's warm-up call fills it): a replayed conversation's
    # exact packing costs about what chars/4 costs.
    out["pack_request replay, turns 2+: o200k_base (warm count cache) vs chars/4"] = Pair(
        replayed("o200k_base"), replayed(None)
    )

    for name, items in ITEMS.items():
        rank, counter = partial(_native.rank_by_count, items), partial(counter_sorted, items)
        assert rank() == counter()
        out[f"rank_by_count 100,000 items, {name}: native vs Counter+sorted"] = Pair(rank, counter)
    # Paths made just before each call, in the order made (no str has its hash cached),
    # and the collection the results leave due paid with the call.
    rank, counter = then_allocate(_native.rank_by_count), then_allocate(counter_sorted)
    assert rank(*fresh_in_order()) == counter(*fresh_in_order())
    out["rank_by_count 100,000 fresh paths, in order: native vs Counter+sorted"] = Pair(
        rank, counter, setup=fresh_in_order
    )
    return out


def _arrow_pair(pa: Any, requests: list[bytes]) -> Pair:
    """An Arrow column packed from its buffers, against the same rows made Python strings,
    packed as lines and made a column again (what a batch function without an Arrow path
    does); the outputs checked equal first."""
    from contextfold.integrations.arrow import pack_column
    from contextfold.integrations.dask import pack_lines

    column = pa.array([requests[i % len(requests)] for i in range(2_000)], pa.large_binary())

    def in_place() -> Any:
        with using(contextfold._native):
            return pack_column(column, target_context_tokens=BUDGET)[0]

    def through_python() -> Any:
        with using(contextfold._native):
            return pa.array([line.encode() for line in pack_lines(column.to_pylist(), target_context_tokens=BUDGET)])

    assert in_place().to_pylist() == through_python().to_pylist()
    return Pair(in_place, through_python)


def _request_packer(requests: list[bytes]) -> list[Any]:
    with using(contextfold._native):
        return [pack_request(b, target_context_tokens=BUDGET) for b in requests]


def _timed(pair: Pair, fn: Callable[..., Any], calls: int) -> float:
    """Seconds a call of ``fn`` (a side of ``pair``), over ``calls`` calls. With a setup,
    each call is clocked alone: the gate runs on Linux, where the clocks count
    nanoseconds (Windows' process clock ticks every 15.6 ms)."""
    clock, setup = pair.clock, pair.setup
    if setup is None:
        started = clock()
        for _ in range(calls):
            fn()
        return (clock() - started) / calls
    spent = 0.0
    for _ in range(calls):
        arguments = setup()
        started = clock()
        fn(*arguments)
        spent += clock() - started
    return spent / calls


def measure(pair: Pair, rounds: int, round_s: float) -> dict[str, Any]:
    """The median over ``rounds`` of time(baseline) / time(contender), sides interleaved,
    each side called often enough a round to take about ``round_s`` seconds."""
    contender_calls = max(1, round(round_s / max(_timed(pair, pair.contender, 1), 1e-7)))
    baseline_calls = max(1, round(round_s / max(_timed(pair, pair.baseline, 1), 1e-7)))
    ratios, contender_s, baseline_s = [], [], []
    for _ in range(rounds):
        contender_s.append(_timed(pair, pair.contender, contender_calls))
        baseline_s.append(_timed(pair, pair.baseline, baseline_calls))
        ratios.append(baseline_s[-1] / contender_s[-1])
    return {
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "contender_s": statistics.median(contender_s),
        "baseline_s": statistics.median(baseline_s),
        "calls": [contender_calls, baseline_calls],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench.json", help="where to write the JSON (default: bench.json)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds per ratio (default: 9)")
    parser.add_argument("--round-ms", type=float, default=50, help="milliseconds per side per round (default: 50)")
    parser.add_argument("-k", default="", help="measure only the ratios whose name contains this")
    args = parser.parse_args(argv)

    from contextfold import _native

    if _native.build_profile != "release":
        print("the benchmark gate needs a release build of the extension", file=sys.stderr)
        return 2
    started = time.perf_counter()
    found = {name: pair for name, pair in pairs().items() if args.k in name}
    gc.freeze()  # the fixtures are long-lived: keep the collector from rescanning them
    results = {}
    for name, pair in found.items():
        results[name] = measure(pair, args.rounds, args.round_ms / 1e3)
        print(f"{results[name]['ratio']:9.2f}x  {name}", flush=True)
    report = {
        "python": platform.python_version(),
        "contextfold": contextfold.__version__,
        "cpus": os.cpu_count(),
        "rounds": args.rounds,
        "round_ms": args.round_ms,
        "seconds": time.perf_counter() - started,
        "ratios": results,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
