"""``contextfold bench``: time packing and windowing, native vs reference vs LangChain.

Each implementation packs the same transcripts (generated agent runs of several lengths,
or the lines of a JSONL file) into the same budget; the best of ``--repeat`` runs is
kept. The table gives the time per transcript, messages per second and each
implementation's time relative to native; with ``--plot FILE.png`` (and matplotlib), a
plot shows time per transcript against transcript length, one line per implementation.
Standard error says what was left out and why: a peer that is not installed, the native
backend when the extension is not built, the plot.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from . import _backend, pack_handoff, windowed
from ._contract import handoff_budget, whole
from .cli import _say, flags_named, read_lines
from .errors import ArgumentError, ContextfoldError

Transcripts = list[list[dict[str, Any]]]

PEERS = ("trim_messages (langchain)",)
"""The implementations timed that are not contextfold's."""


def _best(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _implementations(budget: int) -> dict[str, Callable[[Transcripts], Callable[[], Any]]]:
    """name -> (transcripts -> a zero-argument timed call); each one left out is said."""
    found: dict[str, Callable[[Transcripts], Callable[[], Any]]] = {}
    for name, backend in (("native", "native"), ("reference", "python")):
        try:
            impl = _backend.implementation(backend)
        except ImportError as exc:  # the extension is not built, or does not load
            _say(f"pack_handoff and windowed ({name}) left out: {exc}")
            continue

        def packer(ts: Transcripts, impl: Any = impl) -> Callable[[], Any]:
            def run() -> Any:
                with _backend.using(impl):
                    return [pack_handoff(t, target_context_tokens=budget) for t in ts]

            return run

        def window(ts: Transcripts, impl: Any = impl) -> Callable[[], Any]:
            def run() -> Any:
                with _backend.using(impl):
                    return [windowed(t) for t in ts]

            return run

        found[f"pack_handoff ({name})"] = packer
        found[f"windowed ({name})"] = window
    trimmer = langchain_trimmer(budget)
    if trimmer is None:
        _say(f"{PEERS[0]} left out: langchain-core is not installed (pip install langchain-core)")
    else:
        found[PEERS[0]] = trimmer
    return found


def langchain_trimmer(budget: int) -> Callable[[Transcripts], Callable[[], Any]] | None:
    """LangChain's ``trim_messages`` as the peer it is compared with (keep the newest turns,
    keep the system message, start on a human turn, approximate token counts); None when
    langchain-core is not installed. Messages are converted before timing."""
    try:
        from langchain_core.messages import convert_to_messages, trim_messages
        from langchain_core.messages.utils import count_tokens_approximately
    except ImportError:
        return None

    def prepare(ts: Transcripts) -> Callable[[], Any]:
        built = [convert_to_messages(t) for t in ts]

        def run() -> Any:
            return [
                trim_messages(
                    m,
                    max_tokens=budget,
                    strategy="last",
                    token_counter=count_tokens_approximately,
                    include_system=True,
                    start_on="human",
                )
                for m in built
            ]

        return run

    return prepare


def _prepared(
    implementations: dict[str, Callable[[Transcripts], Callable[[], Any]]], groups: list[tuple[int, Transcripts]]
) -> dict[str, list[Callable[[], Any]]]:
    """Each implementation's run for each group, made before anything is timed. A peer
    that cannot read a transcript contextfold packs is left out, and said so: its times
    would be over other transcripts than ours."""
    runs: dict[str, list[Callable[[], Any]]] = {}
    for name, make in implementations.items():
        try:
            runs[name] = [make(transcripts) for _, transcripts in groups]
        except Exception as exc:  # whatever the peer raises for a transcript it cannot read
            if name not in PEERS:
                raise
            _say(f"{name} left out: it cannot read these transcripts ({type(exc).__name__}: {exc})")
    return runs


def _groups(args: argparse.Namespace) -> tuple[list[tuple[int, Transcripts]], int]:
    """(length, transcripts) groups to time, and how many lines were bad (each reported
    on standard error with its number; the good ones are timed)."""
    if args.file:
        by_length: dict[int, Transcripts] = {}
        bad = 0
        with open(args.file, "rb") as stream:
            for line in read_lines(stream):
                try:
                    if line.error is not None:
                        raise ValueError(line.error)
                    pack_handoff(line.messages, target_context_tokens=args.context_tokens)  # what is timed
                    windowed(line.messages)
                except (ContextfoldError, TypeError, ValueError) as exc:
                    bad += 1
                    _say(f"line {line.number}: {exc}")
                    continue
                by_length.setdefault(len(line.messages), []).append(line.messages)
        return sorted(by_length.items()), bad
    from .synthetic import agent_run

    groups = []
    for size in _sizes(args.sizes):
        run = agent_run(max(1, size // 3), seed=size)
        groups.append((size, [run[: size - 1] + run[-1:]]))
    return groups, 0


def _sizes(text: str) -> list[int]:
    """``--sizes``: transcript lengths from 1 to 100,000 messages, separated by commas."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ArgumentError(f"--sizes must be message counts separated by commas, got {text!r}") from None
    return [whole("--sizes", size, 1, 100_000) for size in sizes]


def run_bench(args: argparse.Namespace) -> int:
    repeat = whole("--repeat", args.repeat, 1)
    console = Console()
    with flags_named():  # checked once: a bad budget is one message, not every line bad
        handoff_budget(args.context_tokens)
    implementations = _implementations(args.context_tokens)
    groups, bad = _groups(args)
    if not groups:
        _say("contextfold: no transcript to time")
        return 1
    runs = _prepared(implementations, groups)
    times: dict[str, list[tuple[int, float]]] = {name: [] for name in runs}
    for name, prepared in runs.items():
        for (length, transcripts), run in zip(groups, prepared, strict=True):
            times[name].append((length, _best(run, repeat) / len(transcripts)))
    total_messages = sum(length * len(ts) for length, ts in groups)
    total_transcripts = sum(len(ts) for _, ts in groups)
    table = Table(
        title=f"{total_transcripts} transcript(s), {total_messages:,} messages, budget {args.context_tokens:,}"
    )
    for column in ("implementation", "per transcript", "messages/s", "vs native"):
        table.add_column(column, justify="left" if column == "implementation" else "right")
    totals = {
        name: sum(t * len(ts) for (_, t), (_, ts) in zip(points, groups, strict=True)) for name, points in times.items()
    }
    for name, total in totals.items():
        native_name = name.split(" (")[0] + " (native)"
        if name in PEERS:
            native_name = "pack_handoff (native)"
        base = totals.get(native_name)
        ratio = f"{total / base:.1f}x" if base else "-"
        table.add_row(name, f"{total / total_transcripts * 1e6:,.1f} µs", f"{total_messages / total:,.0f}", ratio)
    console.print(table)
    _plot(times, args.plot)
    return 1 if bad else 0


def _plot(times: dict[str, list[tuple[int, float]]], path: str | None) -> None:
    """Draws the times to ``path`` (a PNG), or says why no plot was written."""
    if path is None:
        _say("no plot written: pass --plot FILE.png to draw one")
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _say("no plot written: matplotlib is not installed (pip install matplotlib)")
        return
    figure, axes = plt.subplots(figsize=(8, 5))
    for name, points in times.items():
        xs, ys = zip(*sorted(points), strict=True) if points else ((), ())
        axes.plot(xs, [y * 1e6 for y in ys], marker="o", label=name, linestyle="--" if "windowed" in name else "-")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("transcript length (messages)")
    axes.set_ylabel("time per transcript (µs)")
    axes.set_title("contextfold: time per transcript against transcript length")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    _say(f"plot written to {path}")
