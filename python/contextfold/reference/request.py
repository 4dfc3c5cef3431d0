"""Request bodies packed through Python objects: the reference for ``contextfold-core``'s
request module.

The body is decoded as UTF-8 and walked at its top level only: each member is loaded by
the standard library's decoder (``JSONDecoder.raw_decode``, the scanner ``json.loads``
runs), and the items of the ``messages`` array one by one, so their positions come with
their values. The loaded messages go to the reference :func:`pack_handoff`, and the
packed body is spliced from the input text exactly as the native path splices bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from .._contract import PackArguments, PackedRequest, as_bytes, pack_arguments
from ..errors import ContextfoldError, MessageTypeError, RequestError
from .pack import pack_handoff
from .tokens import tokens_of

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_NO_TRANSCRIPT = "expected a list of messages or an object with a 'messages' list"

Outcome = tuple[bytes, int, bool, int, "str | None", list[int], "int | None"]


class _Layout:
    """Where the messages array and its items lie in the text (character positions)."""

    def __init__(self, open_at: int) -> None:
        self.open = open_at
        self.close = open_at
        self.items: list[tuple[int, int]] = []


class _Body:
    """A request body's text, its root value's members, and the messages' layout."""

    def __init__(self, body: bytes, transcripts: bool) -> None:
        try:
            self.text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"not UTF-8: invalid byte at byte {exc.start}", exc.start) from None
        self.transcripts = transcripts
        self.members: dict[str, Any] = {}
        self.messages: Any = None
        self.has_messages = False
        self.layout: _Layout | None = None
        self.root: Any = None
        try:
            self._walk(1 if self.text.startswith("\ufeff") else 0)
        except json.JSONDecodeError as exc:
            raise self._error(exc.msg.lower(), exc.pos) from None
        except RecursionError:
            raise RequestError("not JSON that can be loaded: nested deeper than Python's recursion limit") from None
        except ValueError as exc:  # an integer past Python's digit limit
            raise RequestError(f"not JSON that can be loaded: {exc}") from None

    def _error(self, what: str, pos: int) -> RequestError:
        offset = len(self.text[:pos].encode("utf-8"))
        return RequestError(f"not JSON: {what} at byte {offset}", offset)

    def _skip(self, i: int) -> int:
        match = _SPACE.match(self.text, i)
        return i if match is None else match.end()

    def _expect(self, i: int, char: str, what: str) -> int:
        if not self.text.startswith(char, i):
            raise self._error(what, i)
        return self._skip(i + 1)

    def _walk(self, start: int) -> None:
        text = self.text
        i = self._skip(start)
        if i == len(text):
            raise RequestError("not JSON: the body is empty")
        if text.startswith("{", i):
            i = self._object(i)
        elif self.transcripts and text.startswith("[", i):
            self.messages, i = self._array(i)
            self.has_messages = True
            self.root = self.messages
        else:
            self.root, i = _DECODER.raw_decode(text, i)
        if self._skip(i) != len(text):
            raise self._error("extra data after the value", self._skip(i))

    def _object(self, i: int) -> int:
        text = self.text
        self.root = self.members
        i = self._skip(i + 1)
        if text.startswith("}", i):
            return i + 1
        while True:
            if not text.startswith('"', i):
                raise self._error("expecting a property name in double quotes", i)
            key, i = _scanstring(text, i + 1)
            i = self._expect(self._skip(i), ":", "expecting ':'")
            if key == "messages" and text.startswith("[", i):
                value, i = self._array(i)
            else:
                value, i = _DECODER.raw_decode(text, i)
            self.members[key] = value
            if key == "messages":
                self.messages, self.has_messages = value, True
            i = self._skip(i)
            if text.startswith(",", i):
                i = self._skip(i + 1)
            elif text.startswith("}", i):
                return i + 1
            else:
                raise self._error("expecting ',' or '}'", i)

    def _array(self, i: int) -> tuple[list[Any], int]:
        text = self.text
        layout = _Layout(i)
        items: list[Any] = []
        i = self._skip(i + 1)
        if not text.startswith("]", i):
            while True:
                value, end = _DECODER.raw_decode(text, i)
                items.append(value)
                layout.items.append((i, end))
                i = self._skip(end)
                if text.startswith(",", i):
                    i = self._skip(i + 1)
                elif text.startswith("]", i):
                    break
                else:
                    raise self._error("expecting ',' or ']'", i)
        layout.close = i
        self.layout = layout
        return items, i + 1

    def splice(self, kept: list[int], note: dict[str, Any] | None, note_at: int) -> bytes:
        """The body with the messages array holding ``kept`` and the note at ``note_at``."""
        text, layout = self.text, self.layout
        assert layout is not None
        spans = layout.items

        def separator(i: int) -> str:
            if 1 <= i < len(spans):
                return text[spans[i - 1][1] : spans[i][0]]
            return text[spans[0][1] : spans[1][0]] if len(spans) >= 2 else ","

        items: list[int | None] = list(kept)
        if note is not None:
            items.insert(min(note_at, len(items)), None)
        first_start = spans[0][0] if spans else layout.close
        last_end = spans[-1][1] if spans else layout.open + 1
        parts = [text[: layout.open + 1]]
        for k, item in enumerate(items):
            parts.append(text[layout.open + 1 : first_start] if k == 0 else separator(0 if item is None else item))
            if item is None:
                parts.append(json.dumps(note, ensure_ascii=False, separators=(",", ":")))
            else:
                parts.append(text[spans[item][0] : spans[item][1]])
        parts.append(text[last_end:])
        return "".join(parts).encode("utf-8")


def pack_request(
    body: Any,
    target_context_tokens: int,
    reserve_output_tokens: int,
    pinned: Iterable[int],
    summary: str | None,
    shape: str,
    cut: str,
    chunk_tokens: int | None,
) -> PackedRequest:
    """One body packed into a :class:`PackedRequest`."""
    args = pack_arguments(
        target_context_tokens, reserve_output_tokens, None, pinned, summary, None, shape, cut, chunk_tokens
    )
    data = as_bytes(body)
    body, dropped, fits, tokens, note, kept, _ = _pack(data, args, transcripts=False)
    return PackedRequest(body, fits, tokens, args.budget, dropped, note, kept)


def pack_requests(
    bodies: list[Any],
    target_context_tokens: int,
    reserve_output_tokens: int,
    pinned: Iterable[int],
    summary: str | None,
    shape: str,
    cut: str,
    chunk_tokens: int | None,
    threads: int,
) -> list[PackedRequest | Exception]:
    """Each body's :class:`PackedRequest` or the exception it raised, in order
    (``threads`` is unused: the reference packs one body after another)."""
    args = pack_arguments(
        target_context_tokens, reserve_output_tokens, None, pinned, summary, None, shape, cut, chunk_tokens
    )
    out: list[PackedRequest | Exception] = []
    for body in bodies:
        try:
            data, dropped, fits, tokens, note, kept, _ = _pack(as_bytes(body), args, transcripts=False)
            out.append(PackedRequest(data, fits, tokens, args.budget, dropped, note, kept))
        except (ContextfoldError, TypeError) as exc:
            out.append(exc)
    return out


def pack_lines(
    block: bytes, target_context_tokens: int, reserve_output_tokens: int, shape: str, cut: str, threads: int
) -> tuple[bytes, int, int, int, int, int, list[tuple[int, str]]]:
    """The non-blank lines of a JSONL block packed: ``(output, packed, tokens_before,
    tokens_after, dropped, unfit, errors)`` (``errors``: each bad line's index in the
    block and its message)."""
    args = pack_arguments(target_context_tokens, reserve_output_tokens, None, (), None, None, shape, cut, None)
    output: list[bytes] = []
    packed = before = after = dropped = unfit = 0
    errors: list[tuple[int, str]] = []
    for index, line in enumerate(block.split(b"\n")):
        if not line.strip():
            continue
        try:
            body, gone, fits, tokens, _, _, tokens_before = _pack(line, args, transcripts=True)
        except ContextfoldError as exc:
            errors.append((index, str(exc)))
            continue
        output += (body, b"\n")
        packed, before, after = packed + 1, before + (tokens_before or 0), after + tokens
        dropped, unfit = dropped + gone, unfit + (not fits)
    return b"".join(output), packed, before, after, dropped, unfit, errors


def _pack(body: bytes, args: PackArguments, transcripts: bool) -> Outcome:
    """``(body, dropped, fits, tokens, note, kept, input_tokens)`` for one body;
    ``body`` is the input object when nothing changed."""
    parsed = _Body(body, transcripts)
    if not parsed.has_messages:
        if transcripts:
            raise RequestError(_NO_TRANSCRIPT)
        if isinstance(parsed.root, dict):
            raise RequestError("request body: no 'messages' member")
        raise RequestError(f"request body: expected a JSON object, got {type(parsed.root).__name__}")
    messages = parsed.messages
    system = parsed.members.get("system")
    if transcripts and not isinstance(messages, list):
        raise RequestError(_NO_TRANSCRIPT)
    if not isinstance(messages, list) and (system is None or isinstance(system, (str, list))):
        raise MessageTypeError(f"messages: expected a list, got {type(messages).__name__}", None, "")
    cut = "greedy" if args.chunk_tokens is None else "chunked"
    pack = pack_handoff(
        messages, args.budget, 0, None, args.pinned, args.summary, system, args.shape, cut, args.chunk_tokens
    )
    n = len(messages)
    input_tokens = tokens_of(messages) if transcripts else None
    if pack.note is None and pack.kept == list(range(n)):
        return body, 0, pack.fits, pack.tokens, None, pack.kept, input_tokens
    note_at = next(
        (k for k, m in enumerate(pack.messages) if k >= len(pack.kept) or m is not messages[pack.kept[k]]),
        len(pack.messages),
    )
    note = None if pack.note is None else pack.messages[note_at]
    out = parsed.splice(pack.kept, note, note_at)
    return out, pack.dropped, pack.fits, pack.tokens, pack.note, pack.kept, input_tokens
