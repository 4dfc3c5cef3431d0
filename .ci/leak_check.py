"""Leak check: the resident memory after 1,000,000 native ``pack_handoff`` calls (and
100,000 with keywords no options are kept for, and 100,000 that raise) stays within
a few MB of what it was after the first 10,000.

    python .ci/leak_check.py [--calls N] [--failing N] [--slack-mb MB]

A leak of one small object a call (a string, a list, an exception's arguments) shows as
tens of MB over a million calls; allocator noise stays under a MB or two.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import sys
import time
from collections.abc import Callable

import contextfold as cf

WARM_UP = 10_000


def resident_mb() -> float:
    """This process's resident set size, in MB (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def growth(call: Callable[[], object], calls: int) -> tuple[float, float, float]:
    """(RSS after the warm-up, RSS after ``calls`` calls, seconds taken), in MB."""
    for _ in range(WARM_UP):
        call()
    gc.collect()
    before = resident_mb()
    started = time.perf_counter()
    for _ in range(calls - WARM_UP):
        call()
    gc.collect()
    return before, resident_mb(), time.perf_counter() - started


def transcript() -> list[dict[str, object]]:
    """A small agent exchange that does not fit its budget: packing drops, notes and keeps."""
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in a.py, please. " * 4},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "def f():\n    return 1\n" * 20},
        {"role": "assistant", "content": "The function returns 1; the test expects 2. Changing it."},
        {"role": "user", "content": [{"type": "text", "text": "Thanks — and run the tests. ✓"}]},
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000, help="pack_handoff calls (default: 1,000,000)")
    parser.add_argument("--failing", type=int, default=100_000, help="calls that raise (default: 100,000)")
    parser.add_argument("--slack-mb", type=float, default=4.0, help="the growth allowed, in MB (default: 4)")
    args = parser.parse_args(argv)
    if cf.backend != "native":
        print("the leak check is for the native extension; it is not active", file=sys.stderr)
        return 2

    messages = transcript()
    pack = cf.pack_handoff(messages, target_context_tokens=150)
    assert pack.dropped > 0 and pack.note, "the transcript must make the packer drop and note"
    bad = [*messages[:-1], {"role": 5, "content": "a role that is not a string"}]

    def packs() -> object:
        return cf.pack_handoff(messages, target_context_tokens=150)

    budgets = itertools.cycle(range(150, 2_150))  # more sets of keywords than pack_options keeps

    def remembers() -> object:
        return cf.pack_handoff(messages, target_context_tokens=next(budgets))

    def raises() -> object:
        try:
            cf.pack_handoff(bad, target_context_tokens=150)
        except cf.MessageTypeError as e:
            return e
        raise AssertionError("a message with role 5 was packed")

    failed = 0
    checks = (
        ("pack_handoff", packs, args.calls),
        ("pack_handoff with new keywords", remembers, args.failing),
        ("pack_handoff raising", raises, args.failing),
    )
    for name, call, calls in checks:
        before, after, seconds = growth(call, calls)
        verdict = "ok" if after - before <= args.slack_mb else "LEAK"
        failed += verdict == "LEAK"
        print(
            f"{verdict:4}  {name}: {calls:,} calls in {seconds:.1f} s; RSS {before:.1f} MB after {WARM_UP:,},"
            f" {after:.1f} MB after {calls:,} ({after - before:+.2f} MB, allowed {args.slack_mb:g})"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
