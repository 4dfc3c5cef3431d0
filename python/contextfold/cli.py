"""The ``contextfold`` command line.

- ``contextfold demo``: packs a generated agent run into a small window and shows it.
- ``contextfold pack FILE.jsonl --context-tokens N``: packs one transcript a line (a list
  of messages, or an object with ``messages`` and, for Anthropic shape, ``system``) and
  writes the packed transcripts as JSONL, one line per good input line, in order.
- ``contextfold window FILE.jsonl``: where each transcript's history window starts.
- ``contextfold bench [FILE.jsonl]``: times native vs reference vs LangChain, prints a
  table and writes a plot.

Standard output carries only data; progress, summaries and errors go to standard error.
A bad line is reported with its 1-based number and the run goes on; the exit code is 1
when any line failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from . import backend, message_tokens_array, pack_handoff, pack_many, tokens_of, window_start
from ._contract import ENCODINGS
from .errors import ContextfoldError
from .window import HISTORY_TOKEN_BUDGET, HISTORY_WINDOW

BATCH = 256
"""Lines packed together by ``pack_many``."""


@dataclass
class Line:
    """One input line: its number, the row it held (or why it is bad)."""

    number: int
    row: Any = None
    messages: Any = None
    system: Any = None
    error: str | None = None


def _read(stream: IO[bytes]) -> Iterator[Line]:
    """Every non-blank line, parsed, with its 1-based number."""
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            yield Line(number, error=f"not JSON: {exc}")
            continue
        if isinstance(row, list):
            yield Line(number, row, row)
        elif isinstance(row, dict) and isinstance(row.get("messages"), list):
            yield Line(number, row, row["messages"], row.get("system"))
        else:
            yield Line(number, error="expected a list of messages or an object with a 'messages' list")


def _dump(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: write it escaped
        text = json.dumps(value)
    return text


@dataclass
class Summary:
    transcripts: int = 0
    failed: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    dropped: int = 0
    unfit: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def _estimate(args: argparse.Namespace) -> Any:
    """``--tokenizer``: None for chars/4, else the embedded encoding's name."""
    return None if args.tokenizer == "chars" else args.tokenizer


def _pack_batch(batch: list[Line], args: argparse.Namespace, summary: Summary) -> list[str]:
    """Packed output lines for the good lines of a batch; bad lines reported."""
    good = [line for line in batch if line.error is None]
    options = {
        "target_context_tokens": args.context_tokens,
        "reserve_output_tokens": args.reserve_output_tokens,
        "shape": args.shape,
        "cut": args.cut,
        "estimate_tokens": _estimate(args),
    }
    try:
        systems = [line.system for line in good]
        packs: list[Any] = pack_many([line.messages for line in good], systems=systems, **options)
    except (ContextfoldError, TypeError, ValueError):
        packs = []
        for line in good:  # find the bad lines one by one
            try:
                packs.append(pack_handoff(line.messages, system=line.system, **options))
            except (ContextfoldError, TypeError, ValueError) as exc:
                line.error = str(exc)
                packs.append(None)
    out = []
    for line in good:
        pack = packs.pop(0)
        if line.error is not None:
            continue
        summary.tokens_before += tokens_of(line.messages, estimate_tokens=_estimate(args))
        summary.tokens_after += pack.tokens
        summary.dropped += pack.dropped
        summary.unfit += not pack.fits
        if isinstance(line.row, list):
            out.append(_dump(pack.messages))
        else:
            out.append(_dump({**line.row, "messages": pack.messages}))
    for line in batch:
        if line.error is not None:
            summary.failed += 1
            summary.errors.append(f"line {line.number}: {line.error}")
        else:
            summary.transcripts += 1
    return out


def _open_input(path: str) -> IO[bytes]:
    return sys.stdin.buffer if path == "-" else open(path, "rb")


def _pack(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    summary = Summary()
    started = time.perf_counter()
    out = sys.stdout if args.output is None else open(args.output, "w", encoding="utf-8")
    progress = Progress(
        TextColumn("packing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err, transient=True
    )
    try:
        with _open_input(args.file) as stream, progress:
            task = progress.add_task("pack", total=None)
            batch: list[Line] = []
            for line in _read(stream):
                batch.append(line)
                if len(batch) == BATCH:
                    _flush(batch, args, summary, out, err)
                    progress.advance(task, len(batch))
                    batch = []
            _flush(batch, args, summary, out, err)
            progress.advance(task, len(batch))
    finally:
        if out is not sys.stdout:
            out.close()
    summary.seconds = time.perf_counter() - started
    rate = summary.transcripts / summary.seconds if summary.seconds else 0.0
    err.print(
        f"packed {summary.transcripts} transcript(s) in {summary.seconds:.2f}s ({rate:,.0f}/s, {backend} backend): "
        f"tokens {summary.tokens_before:,} -> {summary.tokens_after:,}, {summary.dropped:,} message(s) dropped, "
        f"{summary.unfit} did not fit, {summary.failed} bad line(s)",
        highlight=False,
    )
    return 1 if summary.failed else 0


def _flush(batch: list[Line], args: argparse.Namespace, summary: Summary, out: IO[str], err: Console) -> None:
    if not batch:
        return
    for text in _pack_batch(batch, args, summary):
        out.write(text)
        out.write("\n")
    out.flush()
    for message in summary.errors:
        err.print(message, highlight=False, markup=False)
    summary.errors.clear()


def _window(args: argparse.Namespace) -> int:
    failed = 0
    with _open_input(args.file) as stream:
        print("line\tmessages\ttokens\twindow_start\twindow_messages\twindow_tokens")
        for line in _read(stream):
            try:
                if line.error is not None:
                    raise ValueError(line.error)
                sizes = message_tokens_array(line.messages)
                start = window_start(line.messages, window=args.window, token_budget=args.token_budget)
            except (ContextfoldError, TypeError, ValueError) as exc:
                failed += 1
                print(f"line {line.number}: {exc}", file=sys.stderr)
                continue
            total, kept = int(sizes.sum()), int(sizes[start:].sum())
            print(f"{line.number}\t{len(line.messages)}\t{total}\t{start}\t{len(line.messages) - start}\t{kept}")
    return 1 if failed else 0


def _demo(args: argparse.Namespace) -> int:
    from .synthetic import agent_run

    console = Console()
    run = agent_run(args.turns)
    pack = pack_handoff(
        run, target_context_tokens=args.context_tokens, reserve_output_tokens=args.reserve_output_tokens
    )
    sizes = message_tokens_array(run)
    kept = set(pack.kept)
    table = Table(title=f"A {len(run)}-message agent run packed into {pack.budget:,} tokens", title_justify="left")
    for column in ("#", "role", "tools", "tokens", "text", "kept"):
        table.add_column(column, justify="right" if column in ("#", "tokens") else "left")
    for i, m in enumerate(run):
        tools = ", ".join(c["function"]["name"] for c in m.get("tool_calls") or []) or m.get("name", "")
        text = str(m.get("content") or "").replace("\n", " ")[:48]
        table.add_row(str(i), m["role"], tools, str(sizes[i]), text, "kept" if i in kept else "[dim]dropped[/dim]")
    console.print(table)
    console.print(
        f"before: {len(run)} messages, {int(sizes.sum()):,} tokens  ->  after: {len(pack.messages)} messages "
        f"({len(pack.kept)} kept + the note), {pack.tokens:,} tokens; fits={pack.fits}; backend={backend}",
        highlight=False,
    )
    if pack.note is not None:
        console.print("\nThe note that replaces the dropped middle:", style="bold")
        console.print(pack.note, markup=False, highlight=False, soft_wrap=True)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contextfold", description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    pack = commands.add_parser("pack", help="pack each transcript of a JSONL file into a context window")
    pack.add_argument("file", help="JSONL file of transcripts, or - for standard input")
    pack.add_argument("--context-tokens", type=int, required=True, help="the model's context window, in tokens")
    pack.add_argument("--reserve-output-tokens", type=int, default=0, help="tokens kept free for the reply")
    pack.add_argument("--shape", choices=["auto", "openai", "anthropic"], default="auto")
    pack.add_argument("--cut", choices=["greedy", "chunked"], default="greedy")
    pack.add_argument(
        "--tokenizer",
        choices=["chars", *ENCODINGS],
        default="chars",
        help="how tokens are counted: chars/4 (the default) or an OpenAI encoding, exactly",
    )
    pack.add_argument("-o", "--output", help="write the packed JSONL here instead of standard output")
    pack.set_defaults(run=_pack)

    demo = commands.add_parser("demo", help="pack a generated agent run and show before/after")
    demo.add_argument("--turns", type=int, default=24, help="tool-calling turns in the generated run")
    demo.add_argument("--context-tokens", type=int, default=4_000)
    demo.add_argument("--reserve-output-tokens", type=int, default=500)
    demo.set_defaults(run=_demo)

    win = commands.add_parser("window", help="where each transcript's history window starts")
    win.add_argument("file", help="JSONL file of transcripts, or - for standard input")
    win.add_argument("--window", type=int, default=HISTORY_WINDOW, help="messages kept at most")
    win.add_argument("--token-budget", type=int, default=HISTORY_TOKEN_BUDGET, help="tokens kept at most")
    win.set_defaults(run=_window)

    bench = commands.add_parser("bench", help="time native vs reference vs LangChain; write a table and a plot")
    bench.add_argument("file", nargs="?", help="JSONL transcripts to time (default: generated agent runs)")
    bench.add_argument("--context-tokens", type=int, default=8_000)
    bench.add_argument("--sizes", default="50,100,200,500,1000", help="generated transcript lengths, in messages")
    bench.add_argument("--repeat", type=int, default=5, help="timing repetitions (the best is kept)")
    bench.add_argument("--plot", default="contextfold-bench.png", help="where to write the PNG plot")
    bench.set_defaults(run=_bench)

    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (OSError, ContextfoldError) as exc:
        print(f"contextfold: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
