"""Context edits: what packing the corpus with ``ClearToolUses()`` costs beside packing
it without (native and reference, one run), and, on the four longest corpus transcripts,
what the edit buys: messages visible at the same budget, and replayed turn by turn with
the chunked cut, how often the previous turn's packed messages stay a prefix of the next
one's and the cache-weighted input cost (cached tokens at a tenth of the price), each
beside folding alone and beside the server-side rule (every result but the newest 3
cleared on each request). The figures go to the benchmark's ``extra_info`` and to stdout
(``-s``).

    pytest benches/bench_edits.py --benchmark-enable --benchmark-group-by=group -s
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from contextfold import ClearToolUses, _backend, message_tokens, pack_handoff, reference
from contextfold.reference.edits import apply_edits

from .conftest import corpus, native

BUDGET = 8_000
HALF = BUDGET // 2
EDITS = [ClearToolUses()]


def _longest() -> list[list[dict[str, Any]]]:
    return sorted(corpus(), key=len)[-4:]


@pytest.mark.parametrize("edited", [False, True], ids=["fold", "edit+fold"])
@pytest.mark.parametrize("backend", ["native", "python"])
def bench_pack_corpus_with_edits(benchmark: Any, backend: str, edited: bool) -> None:
    impl = native() if backend == "native" else reference
    convos = corpus()
    edits = EDITS if edited else []
    with _backend.using(reference):
        expected = [pack_handoff(c, target_context_tokens=BUDGET, edits=edits) for c in convos]
    with _backend.using(impl):
        assert [pack_handoff(c, target_context_tokens=BUDGET, edits=edits) for c in convos] == expected
        benchmark.group = f"pack_handoff corpus @ {BUDGET}, with and without ClearToolUses()"
        benchmark(lambda: [pack_handoff(c, target_context_tokens=BUDGET, edits=edits) for c in convos])


def _server_rule(messages: list[dict[str, Any]], budget: int, cut: str = "chunked") -> Any:
    """Every tool result but the newest 3 cleared on each request (no steps), then folded."""
    cost = lambda i, m: message_tokens(m)  # noqa: E731
    edited, _, _ = apply_edits(messages, EDITS, cost=cost, base=0, budget=budget, step=1, responses=False)
    return pack_handoff(edited, target_context_tokens=budget, cut=cut)  # type: ignore[arg-type]


def _replay(run: list[dict[str, Any]], pack: Any) -> tuple[float, float]:
    """(cache-weighted input cost, share of turns whose previous packed messages are a
    prefix of theirs), a turn ending at each assistant message."""
    previous: list[str] | None = None
    cost = 0.0
    kept = turns = 0
    for end in (t for t in range(2, len(run) + 1) if run[t - 1].get("role") == "assistant"):
        out = pack(run[:end])
        written = [json.dumps(m, sort_keys=True) for m in out]
        sizes = [message_tokens(m) for m in out]
        if previous is not None:
            same = 0
            while same < min(len(previous), len(written)) and previous[same] == written[same]:
                same += 1
            cost += 0.1 * sum(sizes[:same]) + sum(sizes[same:])
            kept += same == len(previous)
            turns += 1
        previous = written
    return cost, kept / max(turns, 1)


def bench_what_the_edit_buys(benchmark: Any) -> None:
    native()
    rows = []
    for run in _longest():
        row: dict[str, Any] = {"messages": len(run)}
        for budget in (8_000, 32_000):
            alone = len(pack_handoff(run, target_context_tokens=budget).kept)
            edited = len(pack_handoff(run, target_context_tokens=budget, edits=EDITS).kept)
            row[f"visible x at {budget}"] = round(edited / alone, 2)
            server = len(_server_rule(run, budget, "greedy").kept)
            row[f"visible x at {budget} (server rule)"] = round(server / alone, 2)
        fold, fold_kept = _replay(run, lambda m: pack_handoff(m, target_context_tokens=BUDGET, cut="chunked").messages)
        stepped, stepped_kept = _replay(
            run, lambda m: pack_handoff(m, target_context_tokens=BUDGET, cut="chunked", edits=EDITS).messages
        )
        server, server_kept = _replay(run, lambda m: _server_rule(m, BUDGET).messages)
        # Chunks of half the budget (HALF), not the default quarter: the edit can only add
        # breaks to folding's own, and folding alone keeps the prefix on 74-76% of these turns.
        fold_half, fold_half_kept = _replay(
            run, lambda m: pack_handoff(m, target_context_tokens=BUDGET, cut="chunked", chunk_tokens=HALF).messages
        )
        stepped_half, stepped_half_kept = _replay(
            run,
            lambda m: (
                pack_handoff(m, target_context_tokens=BUDGET, cut="chunked", chunk_tokens=HALF, edits=EDITS).messages
            ),
        )
        row.update(
            {
                "prefix kept (fold)": round(fold_kept, 2),
                "prefix kept (edit+fold)": round(stepped_kept, 2),
                "prefix kept (server rule)": round(server_kept, 2),
                "prefix kept (fold, half-budget chunks)": round(fold_half_kept, 2),
                "prefix kept (edit+fold, half-budget chunks)": round(stepped_half_kept, 2),
                "cost edit+fold / fold": round(stepped / fold, 2),
                "cost server rule / fold": round(server / fold, 2),
                "cost edit+fold, half-budget chunks / fold": round(stepped_half / fold, 2),
                "cost fold, half-budget chunks / fold": round(fold_half / fold, 2),
            }
        )
        rows.append(row)
        print(row)
    benchmark.extra_info["transcripts"] = rows
    benchmark.group = "what ClearToolUses() buys (figures in extra_info)"
    longest = _longest()[-1]
    benchmark(lambda: pack_handoff(longest, target_context_tokens=BUDGET, cut="chunked", edits=EDITS))
