"""Chunked cut keeps the packed prefix (the note and where the kept history starts) while
the longest corpus transcripts are replayed turn by turn (SPEC §5.10)."""

from __future__ import annotations

from typing import Any

import contextfold as cf

from .conftest import anthropic_corpus, openai_corpus

BUDGET = 8_000


def prefix_kept_share(convo: list[dict[str, Any]], cut: str, system: Any = None) -> tuple[int, int]:
    """(turns whose packed prefix equals the previous turn's, turns that were folded)."""
    kept = folded = 0
    previous = None
    for n in range(1, len(convo) + 1):
        pack = cf.pack_handoff(convo[:n], target_context_tokens=BUDGET, cut=cut, system=system)  # type: ignore[arg-type]
        prefix_len = next((i for i, k in enumerate(pack.kept) if convo[k]["role"] != "system"), len(pack.kept))
        prefix = (pack.note, pack.kept[prefix_len] if prefix_len < len(pack.kept) else None)
        if pack.dropped:
            folded += 1
            kept += prefix == previous
        previous = prefix
    return kept, folded


def longest() -> list[tuple[list[dict[str, Any]], Any]]:
    rows = [(c, None) for c in openai_corpus()] + [(r["messages"], r.get("system")) for r in anthropic_corpus()]
    return sorted(rows, key=lambda r: len(r[0]), reverse=True)[:4]


def test_chunked_keeps_the_prefix_on_most_replayed_turns() -> None:
    totals = {"greedy": [0, 0], "chunked": [0, 0]}
    for convo, system in longest():
        for cut, total in totals.items():
            kept, folded = prefix_kept_share(convo, cut, system)
            total[0] += kept
            total[1] += folded
    chunked_kept, chunked_folded = totals["chunked"]
    assert chunked_folded > 100  # the replay really folds
    assert chunked_kept / chunked_folded >= 0.85, totals
    assert totals["chunked"][0] / chunked_folded > totals["greedy"][0] / totals["greedy"][1]


def test_the_chunk_is_a_quarter_of_the_whole_budget_with_a_volatile_tail(backend: str) -> None:
    # SPEC §5.10 and §5.7: C = budget // 4 of the whole budget, while the history is packed
    # into the budget less the volatile tail, which goes back last.
    history = [{"role": "system", "content": "s"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} " + "x" * 400} for i in range(60)
    ]
    budget = 2_000
    for size in (200, 400, 600):
        tail = cf.volatile_tail(["y" * (4 * size)])
        assert tail is not None
        share = cf.message_tokens(tail)
        pack = cf.pack_handoff([*history, tail], target_context_tokens=budget, cut="chunked")
        alone = cf.pack_handoff(history, target_context_tokens=budget - share, cut="chunked", chunk_tokens=budget // 4)
        assert alone.fits and alone.dropped > 0
        assert (pack.kept, pack.note) == ([*alone.kept, len(history)], alone.note)
        # A quarter of the history's own share would put the cut elsewhere: the case decides.
        assert cf.pack_handoff(history, target_context_tokens=budget - share, cut="chunked").kept != alone.kept
