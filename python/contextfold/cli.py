"""The ``contextfold`` command line.

- ``contextfold demo``: packs a generated agent run into a small window and shows it.
- ``contextfold pack FILE.jsonl --context-tokens N``: packs one transcript a line (a list
  of messages, or a request body as :func:`contextfold.pack_request` takes it: an object
  with ``messages`` and, for Anthropic shape, ``system``, or a Responses body with
  ``input`` and ``instructions``; its ``tools`` are counted) and writes the packed
  transcripts as JSONL, one line per good input line, in order. It runs on the bytes
  path: the input is read in large blocks whose lines are packed on every core
  (``--threads``), and every byte of a line outside its packed array, and every kept
  message, is copied as it was. ``--tokenizer o200k_base`` (or ``cl100k_base``) counts
  tokens exactly instead of by chars/4; ``--sizing provider`` sizes images a flat
  ``--image-tokens`` and thinking signatures as nothing.
- ``contextfold window FILE.jsonl``: where each transcript's history window starts.
- ``contextfold bench [FILE.jsonl]``: times native vs reference vs LangChain and prints
  a table; ``--plot FILE.png`` draws it (with matplotlib). What it leaves out (a peer not
  installed, the plot) is said on standard error.

Standard output carries only data; progress, summaries and errors go to standard error.
A bad line is reported with its 1-based number and the run goes on; the exit code is 1
when any line failed, 2 (with one message, no traceback) for bad options, an unreadable
input, a closed output or running out of memory (a line with no end).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import IO, Any

from . import __version__, _backend, backend, message_tokens_array, pack_handoff, window_start
from ._contract import DEFAULT_IMAGE_TOKENS, ENCODINGS, SIZINGS, PackOptions, bytes_options, thread_count, whole
from ._edits import ClearThinking, ClearToolUses
from .errors import ArgumentError, ContextfoldError
from .window import HISTORY_TOKEN_BUDGET, HISTORY_WINDOW

BLOCK = 1 << 21
"""Bytes of input read at a time (or 256 KB a CPU, on machines with more than 8); the
whole lines of each read are packed together. 2 MB reads ran the corpus 20% faster than
8 MB ones: their input and output stay in cache and their buffers are reused rather than
mapped afresh."""


@dataclass
class Line:
    """One input line: its number, the row it held (or why it is bad)."""

    number: int
    row: Any = None
    messages: Any = None
    system: Any = None
    error: str | None = None


def read_lines(stream: IO[bytes]) -> Iterator[Line]:
    """Every non-blank line, parsed, with its 1-based number; a line that cannot be read
    as ``pack`` reads it (not UTF-8, not JSON, nested past the recursion limit, an integer
    past the digit limit) is reported in its :class:`Line`, and the lines after it are
    still read."""
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            # Strict UTF-8, as pack reads it: json.loads(bytes) would take a surrogate
            # encoded in UTF-8, which the bytes path refuses.
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Line(number, error=f"not UTF-8: invalid byte at byte {exc.start}")
            continue
        try:
            row = json.loads(text.removeprefix("\ufeff"))  # a byte-order mark, as pack takes it
        except json.JSONDecodeError as exc:
            yield Line(number, error=f"not JSON: {exc}")
            continue
        except (RecursionError, ValueError) as exc:
            yield Line(number, error=f"not JSON that can be loaded: {exc}")
            continue
        if isinstance(row, list):
            yield Line(number, row, row)
        elif isinstance(row, dict) and isinstance(row.get("messages"), list):
            yield Line(number, row, row["messages"], row.get("system"))
        else:
            yield Line(number, error="expected a list of messages or an object with a 'messages' list")


@dataclass
class Summary:
    transcripts: int = 0
    failed: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    dropped: int = 0
    unfit: int = 0
    uncounted: int = 0
    seconds: float = 0.0


def _open_input(path: str) -> IO[bytes]:
    if path != "-":
        return open(path, "rb")
    if sys.stdin is None:
        raise OSError("standard input is closed")
    return sys.stdin.buffer


def _open_output(path: str | None, source: IO[bytes]) -> AbstractContextManager[IO[bytes]]:
    """The output file, or standard output (left open). One that is the input (``source``),
    by name or by a link, is refused: opening it for writing would empty it unread, and
    appending to it (``>> F``) would read back what is written, without end."""
    if path is not None:
        try:
            target = os.stat(path)
        except FileNotFoundError:
            pass
        else:
            if _is_file_of(target, source):
                raise ArgumentError(f"-o {path} is the input file: writing it would erase the transcripts unread")
        return open(path, "wb")
    if sys.stdout is None:
        raise OSError("standard output is closed")
    try:
        written = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):  # a stream with no file behind it
        written = None
    if written is not None and _is_file_of(written, source):
        raise ArgumentError("standard output is the input file: the run would read back what it writes")
    sys.stdout.flush()
    return nullcontext(sys.stdout.buffer)


def _is_file_of(target: os.stat_result, source: IO[bytes]) -> bool:
    """Whether ``target`` is the regular file ``source`` reads (a terminal or a pipe may
    be both ends of a run)."""
    try:
        read = os.fstat(source.fileno())
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(read.st_mode) and (target.st_dev, target.st_ino) == (read.st_dev, read.st_ino)


def _blocks(stream: IO[bytes], size: int) -> Iterator[tuple[bytes, bytes]]:
    """The input in blocks: a large read, and the rest of the line it stopped in."""
    while block := stream.read(size):
        yield block, b"" if block.endswith(b"\n") else stream.readline()


def _say(line: str) -> None:
    """A line on standard error, whole: logs are grepped (rich would wrap it at 80
    columns off a terminal). A closed standard error loses the line, not the run."""
    if sys.stderr is not None:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


@contextmanager
def _progress() -> Iterator[Callable[[int], None]]:
    """Advances a progress bar on standard error when it is a terminal; rich is only
    imported then."""
    if sys.stderr is None or not sys.stderr.isatty():
        yield lambda done: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("packing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=sys.stderr), transient=True) as progress:
        task = progress.add_task("pack", total=None)
        yield lambda done: progress.advance(task, done)


_FLAGS = {
    "target_context_tokens": "--context-tokens",
    "reserve_output_tokens": "--reserve-output-tokens",
    "image_tokens": "--image-tokens",
    "chunk_tokens": "--chunk-tokens",
    "ClearToolUses.keep": "--keep-tool-uses",
    "ClearToolUses.trigger": "--clear-trigger",
    "ClearToolUses.clear_at_least": "--clear-at-least",
    "ClearToolUses.exclude_tools": "--exclude-tool",
    "ClearToolUses.placeholder": "--placeholder",
    "ClearThinking.keep": "--clear-thinking",
}
"""The flags, by the names the errors of the options they set give them."""

_FLAG_NAMES = re.compile(r"\b(?:" + "|".join(re.escape(name) for name in _FLAGS) + r")\b")


@contextmanager
def flags_named() -> Iterator[None]:
    """The options' checks, said with the flags as they were typed (only around them: other
    errors quote file names and values, which are not to be rewritten)."""
    try:
        yield
    except ArgumentError as exc:
        raise type(exc)(_FLAG_NAMES.sub(lambda name: _FLAGS[name[0]], str(exc))) from None


def _pack(args: argparse.Namespace) -> int:
    # Options are checked once, before any line is read: a bad one is one message.
    with flags_named():
        options = PackOptions(
            target_context_tokens=args.context_tokens,
            reserve_output_tokens=args.reserve_output_tokens,
            estimate_tokens=args.tokenizer,
            shape=args.shape,
            cut=args.cut,
            sizing=args.sizing,
            image_tokens=args.image_tokens,
            chunk_tokens=args.chunk_tokens,
            edits=_edits(args),
        )
        bytes_options(options)
    if args.tokenizer is not None:  # loaded once: one that cannot load is one message, not every line bad
        message_tokens_array([{"role": "user", "content": "x"}], estimate_tokens=args.tokenizer)
    threads = thread_count(args.threads, "--threads")
    summary = Summary()
    started = time.perf_counter()
    with _open_input(args.file) as stream, _open_output(args.output, stream) as out, _progress() as advance:
        first_line = 1
        for block, rest in _blocks(stream, max(BLOCK, (os.cpu_count() or 1) * (BLOCK // 8))):
            output, newlines, packed, before, after, dropped, unfit, uncounted, errors = _backend.impl.pack_lines(
                block, rest, options, threads
            )
            out.write(output)
            out.flush()
            for index, message in errors:
                _say(f"line {first_line + index}: {message}")
            summary.transcripts += packed
            summary.failed += len(errors)
            summary.tokens_before += before
            summary.tokens_after += after
            summary.dropped += dropped
            summary.unfit += unfit
            summary.uncounted += uncounted
            first_line += newlines
            advance(packed + len(errors))
    summary.seconds = time.perf_counter() - started
    rate = summary.transcripts / summary.seconds if summary.seconds else 0.0
    _say(
        f"packed {summary.transcripts} transcript(s) in {summary.seconds:.2f}s ({rate:,.0f}/s, {backend} backend): "
        f"tokens {summary.tokens_before:,} -> {summary.tokens_after:,}, {summary.dropped:,} message(s) dropped, "
        f"{summary.unfit} did not fit, {summary.failed} bad line(s)"
        + (
            f"; tokens before left out {summary.uncounted} line(s) that dropped a message no reader sizes"
            if summary.uncounted
            else ""
        )
    )
    return 1 if summary.failed else 0


def _window(args: argparse.Namespace) -> int:
    # Bad options are one error for the run, not one a line.
    whole("--window", args.window, 4)
    whole("--token-budget", args.token_budget, 4)
    failed = 0
    with _open_input(args.file) as stream, _open_output(None, stream) as out:
        out.write(b"line\tmessages\ttokens\twindow_start\twindow_messages\twindow_tokens\n")
        for line in read_lines(stream):
            try:
                if line.error is not None:
                    raise ValueError(line.error)
                sizes = message_tokens_array(line.messages)
                start = window_start(line.messages, window=args.window, token_budget=args.token_budget)
            except (ContextfoldError, TypeError, ValueError) as exc:
                failed += 1
                _say(f"line {line.number}: {exc}")
                continue
            total, kept, n = int(sizes.sum()), int(sizes[start:].sum()), len(line.messages)
            out.write(f"{line.number}\t{n}\t{total}\t{start}\t{n - start}\t{kept}\n".encode())
    return 1 if failed else 0


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .synthetic import agent_run

    console = Console()
    run = agent_run(whole("--turns", args.turns, 0, 1_000))  # a table row a message: a screenful or a few
    with flags_named():
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
        f"({len(pack.kept)} kept{'' if pack.note is None else ' + the note'}), {pack.tokens:,} tokens; "
        f"fits={pack.fits}; backend={backend}",
        highlight=False,
    )
    if pack.note is not None:
        console.print("\nThe note that replaces the dropped middle:", style="bold")
        console.print(pack.note, markup=False, highlight=False, soft_wrap=True)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(args)


DESCRIPTION = "Keep LLM transcripts inside a model's context window: exactly, deterministically, fast."

EXAMPLES = """examples:
  contextfold demo                                   pack a generated agent run and show it
  contextfold pack runs.jsonl --context-tokens 8000 > packed.jsonl
  contextfold window runs.jsonl                      where each history window starts
  contextfold bench --plot bench.png                 native vs reference vs LangChain

Standard output carries only data; progress, summaries and bad lines (with their numbers)
go to standard error. Exit code 1: a line was bad; 2: a bad option or an unreadable file.
"""


def _edits(args: argparse.Namespace) -> list[ClearToolUses | ClearThinking]:
    """The context edits the flags ask for, in the order they run."""
    edits: list[ClearToolUses | ClearThinking] = []
    if args.clear_tool_uses:
        edits.append(
            ClearToolUses(
                trigger=args.clear_trigger,
                keep=args.keep_tool_uses,
                clear_at_least=args.clear_at_least,
                exclude_tools=args.exclude_tool,
                clear_tool_inputs=args.clear_tool_inputs,
                placeholder=args.placeholder,
            )
        )
    if args.clear_thinking is not None:
        edits.append(ClearThinking(keep=args.clear_thinking))
    return edits


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="contextfold",
        description=DESCRIPTION,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"contextfold {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    pack = commands.add_parser("pack", help="pack each transcript of a JSONL file into a context window")
    pack.add_argument("file", help="JSONL file of transcripts, or - for standard input")
    pack.add_argument("--context-tokens", type=int, required=True, help="the model's context window, in tokens")
    pack.add_argument("--reserve-output-tokens", type=int, default=0, help="tokens kept free for the reply")
    pack.add_argument("--shape", choices=["auto", "openai", "anthropic", "responses"], default="auto")
    pack.add_argument("--cut", choices=["greedy", "chunked"], default="greedy")
    pack.add_argument(
        "--tokenizer", choices=ENCODINGS, help="count tokens exactly with this encoding (default: chars/4)"
    )
    pack.add_argument("--sizing", choices=SIZINGS, default="seed", help="provider: images a flat count (default: seed)")
    pack.add_argument(
        "--image-tokens", type=int, default=DEFAULT_IMAGE_TOKENS, help="what an image costs with --sizing provider"
    )
    pack.add_argument(
        "--chunk-tokens", type=int, help="the chunked cut's and clearing's step (default: a quarter of the budget)"
    )
    edits = pack.add_argument_group("context edits, applied before folding (docs/editing.md)")
    edits.add_argument("--clear-tool-uses", action="store_true", help="clear old tool results in place")
    edits.add_argument("--keep-tool-uses", type=int, default=3, metavar="N", help="newest tool uses kept (default 3)")
    edits.add_argument("--clear-trigger", type=int, metavar="TOKENS", help="clear above this (default: the budget)")
    edits.add_argument("--clear-at-least", type=int, default=0, metavar="TOKENS", help="clear only if it frees this")
    edits.add_argument(
        "--exclude-tool", action="append", default=[], metavar="NAME", help="never clear this tool's uses"
    )
    edits.add_argument("--clear-tool-inputs", action="store_true", help="empty the cleared calls' arguments too")
    edits.add_argument("--placeholder", default="[cleared]", help="what a cleared result says (default [cleared])")
    edits.add_argument(
        "--clear-thinking",
        type=int,
        nargs="?",
        const=1,
        metavar="KEEP",
        help="drop thinking but the newest KEEP turns'",
    )
    pack.add_argument("-o", "--output", help="write the packed JSONL here instead of standard output")
    pack.add_argument("--threads", type=int, help="threads packing lines (default: one a CPU)")
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

    bench = commands.add_parser("bench", help="time native vs reference vs LangChain: a table, and a plot on request")
    bench.add_argument("file", nargs="?", help="JSONL transcripts to time (default: generated agent runs)")
    bench.add_argument("--context-tokens", type=int, default=8_000)
    bench.add_argument("--sizes", default="50,100,200,500,1000", help="generated transcript lengths, in messages")
    bench.add_argument("--repeat", type=int, default=5, help="timing repetitions (the best is kept)")
    bench.add_argument("--plot", metavar="FILE.png", help="draw the times into this PNG (needs matplotlib)")
    bench.set_defaults(run=_bench)

    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except BrokenPipeError:
        # The reader went away: say so once, and keep the interpreter's final flush quiet.
        if sys.stdout is not None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _fail("standard output was closed")
    except (OSError, ContextfoldError, OverflowError) as exc:
        _fail(str(exc))
    except MemoryError:  # a line with no end (/dev/zero), or one past the memory there is
        _fail("out of memory (is a line too long?)")
    return 2


def _fail(message: str) -> None:
    _say(f"contextfold: {message}")


if __name__ == "__main__":
    sys.exit(main())
