"""The ``contextfold`` command line.

``contextfold window FILE.jsonl`` reads one transcript a line (a list of messages, or an
object with ``messages``) and prints, for each, where its history window starts and its
token counts before and after windowing. ``-`` reads standard input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any

from . import backend, window_start
from .errors import ContextfoldError
from .tokens import message_tokens_array
from .window import HISTORY_TOKEN_BUDGET, HISTORY_WINDOW


def _transcripts(stream: IO[str]) -> Iterator[tuple[int, Any]]:
    """(1-based line number, parsed line or the exception) for each non-blank line."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, exc
            continue
        yield number, row.get("messages") if isinstance(row, dict) else row


def _window(args: argparse.Namespace) -> int:
    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    failed = 0
    with stream:
        print("line\tmessages\ttokens\twindow_start\twindow_messages\twindow_tokens")
        for number, messages in _transcripts(stream):
            try:
                if isinstance(messages, Exception):
                    raise messages
                sizes = message_tokens_array(messages)
                start = window_start(messages, window=args.window, token_budget=args.token_budget)
            except (ContextfoldError, TypeError, ValueError) as exc:
                failed += 1
                print(f"line {number}: {exc}", file=sys.stderr)
                continue
            total = int(sizes.sum())
            kept = int(sizes[start:].sum())
            print(f"{number}\t{len(messages)}\t{total}\t{start}\t{len(messages) - start}\t{kept}")
    print(f"backend: {backend}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="contextfold", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    win = commands.add_parser("window", help="where each transcript's history window starts")
    win.add_argument("file", help="JSONL file of transcripts, or - for standard input")
    win.add_argument("--window", type=int, default=HISTORY_WINDOW, help="messages kept at most")
    win.add_argument("--token-budget", type=int, default=HISTORY_TOKEN_BUDGET, help="tokens kept at most")
    win.set_defaults(run=_window)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
