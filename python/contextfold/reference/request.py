"""Request bodies packed through Python objects: the reference for ``contextfold-core``'s
request module.

The body is decoded as UTF-8 and walked at its top level only: each member is loaded by
the standard library's decoder (``JSONDecoder.raw_decode``, the scanner ``json.loads``
runs), and the items of the ``messages`` (or ``input``) array one by one, so their
positions come with their values. The loaded items go to the reference
:func:`pack_handoff` (with the body's ``system`` or ``instructions`` and ``tools``), and
the packed body is spliced from the input text exactly as the native path splices bytes.
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._contract import (
    EncodingName,
    PackedRequest,
    PackOptions,
    RequestHead,
    as_bytes,
    bytes_options,
    check_pinned,
    check_tools,
    loaded_head,
    pack_options,
)
from .._edits import AppliedEdit
from .._js import entry
from ..errors import ArgumentError, ContextfoldError, MessageError, MessageTypeError, RequestError
from .pack import _prompt_tokens, handoff
from .tokens import message_tokens, tokens_in

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

_SPACE = re.compile(r"[ \t\n\r]*")
_STRING_OR_NUMBER = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?(\d+)(\.\d+)?([eE][-+]?\d+)?')
"""A JSON string (passed over) or a whole number (its integer digits, fraction and
exponent): each token from its start, so digits inside a string, a fraction or an
exponent are not taken for an integer; linear, with no backtracking."""


def _long_integer(text: str, limit: int) -> int | None:
    """Where the first integer of more than ``limit`` digits starts (its sign included),
    the place the native scanner names."""
    for found in _STRING_OR_NUMBER.finditer(text):
        if found[1] is not None and found[2] is None and found[3] is None and len(found[1]) > limit:
            return found.start()
    return None


_DECODER = json.JSONDecoder()
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_NO_TRANSCRIPT = "expected a list of messages or an object with a 'messages' or 'input' list"
_ARRAYS = ("messages", "input")
"""Members whose array items are packed (and so whose layout is recorded)."""

Outcome = tuple[bytes, int, bool, int, "str | None", list[int], "int | None", "tuple[AppliedEdit, ...]"]


_JSON_WORDS = {
    "Expecting value": "expecting a value",
    "Expecting property name enclosed in double quotes": "expecting a property name in double quotes",
    "Expecting ':' delimiter": "expecting ':'",
    "Unterminated string starting at": "an unterminated string",
    "Invalid control character at": "an unescaped control character in a string",
    "Invalid \\escape": "an invalid escape",
    "Invalid \\uXXXX escape": "an invalid escape",
    "Extra data": "extra data after the value",
}
"""``json``'s messages as the native scanner words them (its "Expecting ',' delimiter"
is worded by the bracket left open, see :func:`_innermost`)."""


def _innermost(text: str, pos: int) -> str | None:
    """The innermost bracket still open at ``pos`` (``{`` or ``[``), strings skipped."""
    stack: list[str] = []
    i = 0
    while i < pos:
        c = text[i]
        if c == '"':
            try:
                i = _scanstring(text, i + 1)[1]
            except ValueError:  # a string json refused ends the text that was read
                return stack[-1] if stack else None
            continue
        if c in "{[":
            stack.append(c)
        elif c in "}]" and stack:
            stack.pop()
        i += 1
    return stack[-1] if stack else None


class _Layout:
    """Where the messages array and its items lie in the text (character positions)."""

    def __init__(self, open_at: int) -> None:
        self.open = open_at
        self.close = open_at
        self.items: list[tuple[int, int]] = []


class _Body:
    """A request body's text, its root value's members, and the layouts of its
    ``messages`` and ``input`` arrays."""

    def __init__(self, body: bytes, transcripts: bool) -> None:
        try:
            self.text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"not UTF-8: invalid byte at byte {exc.start}", exc.start) from None
        self.transcripts = transcripts
        self.members: dict[str, Any] = {}
        self.messages: Any = None
        self.has_messages = False
        self.layouts: dict[str, _Layout] = {}
        self.root: Any = None
        try:
            self._walk(1 if self.text.startswith("\ufeff") else 0)
        except json.JSONDecodeError as exc:
            words = _JSON_WORDS.get(exc.msg, exc.msg.lower())
            if exc.msg == "Expecting ',' delimiter":  # worded, as natively, by the open bracket
                words = "expecting ',' or '}'" if _innermost(self.text, exc.pos) == "{" else "expecting ',' or ']'"
            raise self._error(words, exc.pos) from None
        except RequestError:
            raise  # the walk's own (a ValueError too: not to be wrapped below)
        except RecursionError:
            raise RequestError("not JSON that can be loaded: nested deeper than Python's recursion limit") from None
        except ValueError as exc:  # an integer past Python's digit limit: json says not where
            limit = sys.get_int_max_str_digits()
            at = _long_integer(self.text, limit)
            if at is None:
                raise RequestError(f"not JSON that can be loaded: {exc}") from None
            raise self._error(f"an integer of more than {limit} digits", at) from None

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
            self.messages, i = self._array(i, "messages")
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
            if key in _ARRAYS and text.startswith("[", i):
                value, i = self._array(i, key)
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

    def _array(self, i: int, key: str) -> tuple[list[Any], int]:
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
        self.layouts[key] = layout
        return items, i + 1

    def splice(
        self, key: str, kept: list[int], note: dict[str, Any] | None, note_at: int, edited: dict[int, Any]
    ) -> bytes:
        """The body with the ``key`` array holding ``kept`` and the note at ``note_at``;
        ``edited`` maps an input index to the message an edit made of it."""
        text, layout = self.text, self.layouts[key]
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
            elif item in edited:
                parts.append(_rewritten(text, spans[item], self.loaded(key)[item], edited[item]))
            else:
                parts.append(text[spans[item][0] : spans[item][1]])
        parts.append(text[last_end:])
        return "".join(parts).encode("utf-8")

    def loaded(self, key: str) -> list[Any]:
        return self.messages if key == "messages" else self.members[key]  # type: ignore[no-any-return]


# An edited message, spliced (``rewrite.rs``): only the values an edit replaced are written
# anew, a removed block leaves with its separator, every other character is copied.


def _rewritten(text: str, span: tuple[int, int], original: dict[str, Any], edited: dict[str, Any]) -> str:
    start, end = span
    changes: list[tuple[int, int, str]] = []
    members = _members(text, start)
    for key in ("content", "output", "arguments", "input"):
        before, after = entry(original, key), entry(edited, key)
        if after is before or key not in members:
            continue
        if key == "content" and type(before) is list and type(after) is list:
            changes += _block_changes(text, members[key][0], before, after)
        else:
            changes.append((*members[key], _json(after)))
    calls, new_calls = entry(original, "tool_calls"), entry(edited, "tool_calls")
    if new_calls is not calls and "tool_calls" in members:
        spans = _items(text, members["tool_calls"][0])
        for (at, _), call, new_call in zip(spans, calls or (), new_calls or (), strict=False):
            if new_call is not call:
                function = _members(text, at).get("function")
                arguments = None if function is None else _members(text, function[0]).get("arguments")
                if arguments is not None:
                    changes.append((*arguments, _json("{}")))
    parts: list[str] = []
    copied = start
    for change_start, change_end, value in sorted(changes):
        parts += (text[copied:change_start], value)
        copied = change_end
    parts.append(text[copied:end])
    return "".join(parts)


def _block_changes(text: str, at: int, before: list[Any], after: list[Any]) -> list[tuple[int, int, str]]:
    """A content list's changes: a block replaced in place has its changed members written
    anew; a run of removed (thinking) blocks goes with the separator before it, or, at
    the front, with the one after it."""
    spans = _items(text, at)
    changes: list[tuple[int, int, str]] = []
    j = k = 0
    while j < len(before):
        block = before[j]
        if k < len(after) and after[k] is block:
            j, k = j + 1, k + 1
        elif _kind_of(block) in _THINKING:
            last = j
            while last + 1 < len(before) and _kind_of(before[last + 1]) in _THINKING:
                if k < len(after) and after[k] is before[last + 1]:
                    break
                last += 1
            if j > 0:
                changes.append((spans[j - 1][1], spans[last][1], ""))
            elif last + 1 < len(spans):
                changes.append((spans[j][0], spans[last + 1][0], ""))
            else:
                changes.append((spans[j][0], spans[last][1], ""))
            j = last + 1
        else:
            inner = _members(text, spans[j][0])
            for key in ("content", "input"):
                value = entry(after[k], key)
                if key in inner and value is not entry(block, key):
                    changes.append((*inner[key], _json(value)))
            j, k = j + 1, k + 1
    return changes


_THINKING = ("thinking", "redacted_thinking")


def _kind_of(block: Any) -> Any:
    return entry(block, "type") if issubclass(type(block), dict) else None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _members(text: str, at: int) -> dict[str, tuple[int, int]]:
    """Each member of the object at ``at``: its value's span (the last, for a repeated key)."""
    out: dict[str, tuple[int, int]] = {}
    i = _skip(text, at + 1)
    while text.startswith('"', i):
        key, i = _scanstring(text, i + 1)
        i = _skip(text, _skip(text, i) + 1)
        _, end = _DECODER.raw_decode(text, i)
        out[key] = (i, end)
        i = _skip(text, end)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
    return out


def _items(text: str, at: int) -> list[tuple[int, int]]:
    """The spans of the items of the array at ``at``."""
    out = []
    i = _skip(text, at + 1)
    while not text.startswith("]", i) and i < len(text):
        _, end = _DECODER.raw_decode(text, i)
        out.append((i, end))
        i = _skip(text, end)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
    return out


def _skip(text: str, i: int) -> int:
    match = _SPACE.match(text, i)
    return i if match is None else match.end()


def pack_request(body: Any, options: PackOptions | None, keywords: Mapping[str, Any]) -> PackedRequest | None:
    """One body packed into a :class:`PackedRequest`, under the call's options as
    :func:`~contextfold.reference.pack.pack_handoff` takes them (never None here)."""
    options = pack_options(None, keywords) if options is None else options
    estimate = bytes_options(options)
    data, dropped, fits, tokens, note, kept, _, applied = _pack(as_bytes(body), options, estimate, transcripts=False)
    return PackedRequest(data, fits, tokens, options.budget, dropped, note, kept, applied)


def pack_requests(bodies: list[Any], options: PackOptions, threads: int = 1) -> list[PackedRequest | Exception]:
    """Each body's :class:`PackedRequest` or the exception it raised, in order
    (``threads`` is unused: the reference packs one body after another)."""
    estimate = bytes_options(options)
    out: list[PackedRequest | Exception] = []
    for body in bodies:
        try:
            data = as_bytes(body)
        except Exception as exc:  # as natively: what reading a body raises (a released buffer) is its outcome
            out.append(exc)
            continue
        try:
            data, dropped, fits, tokens, note, kept, _, applied = _pack(data, options, estimate, False)
            out.append(PackedRequest(data, fits, tokens, options.budget, dropped, note, kept, applied))
        except (ContextfoldError, TypeError) as exc:
            out.append(exc)
    return out


def request_head(body: bytes) -> RequestHead | None:
    """What a gateway reads of a request body before packing it, as ``json.loads`` reads
    it: ``(model, caps, messages, input)``, the ``model`` when a str, each of
    ``OUTPUT_CAPS`` when a count (an int of 0 or more), and the lengths of ``messages``
    and ``input`` when lists; all None for a body that is not a JSON object. Natively:
    None in place of the whole when a cap is an int past 2**63 - 1, which only
    ``json.loads`` reads exactly (this reads every one); and a body nested past Python's
    recursion limit, which ``json.loads`` refuses, is read (as the bytes path packs it),
    where this gives all None."""
    return loaded_head(body)


def pack_lines(
    block: bytes, rest: bytes, options: PackOptions, threads: int = 1
) -> tuple[bytes, int, int, int, int, int, int, int, list[tuple[int, str]]]:
    """The non-blank lines of a JSONL block followed by ``rest`` (the end of its last
    line) packed: ``(output, newlines, packed, tokens_before, tokens_after, dropped,
    unfit, uncounted, errors)`` (``newlines``: how many the block and ``rest`` hold;
    ``uncounted``: the packed lines whose tokens before are unknown, as a message the
    pack dropped unread is one no reader sizes, left out of ``tokens_before``;
    ``errors``: each bad line's index in the block and its message)."""
    lines = (block + rest).split(b"\n")
    numbered = [(index, line) for index, line in enumerate(lines) if line.strip()]
    output, _, totals, errors = _pack_rows([line for _, line in numbered], b"\n", options)
    return (b"".join(output), len(lines) - 1, *totals, [(numbered[row][0], error) for row, error in errors])


def pack_rows(
    data: Buffer, offsets: Buffer, wide: bool, start: int, count: int, options: PackOptions, threads: int = 1
) -> tuple[bytes, bytes, int, int, int, int, int, int, list[tuple[int, str]]]:
    """Rows ``start:start + count`` of an Arrow binary or string column (its ``data``
    and ``offsets`` buffers, as unsigned bytes; 64-bit offsets when ``wide``) packed:
    ``(data, offsets, packed, tokens_before, tokens_after, dropped, unfit, uncounted,
    errors)`` (``uncounted`` as :func:`pack_lines` has it),
    the packed column's buffers (offsets as wide as the input's, from 0; a bad row empty)
    and each bad row's index among the rows and its message."""
    values = memoryview(data)
    width = 8 if wide else 4
    held = memoryview(offsets)
    ends = held[: len(held) // width * width].cast("q" if wide else "i")  # as natively, a partial offset is none
    if start + count + 1 > len(ends):
        raise ArgumentError(f"offsets: {len(ends)} offsets hold no rows {start}..{start + count}")
    rows: list[bytes] = []
    for row in range(start, start + count):
        begin, end = ends[row], ends[row + 1]
        if not 0 <= begin <= end <= len(values):
            raise ArgumentError(
                f"offsets: row {row} runs from {begin} to {end}, backwards or outside the {len(values)} bytes of data"
            )
        rows.append(bytes(values[begin:end]))
    output, row_ends, totals, errors = _pack_rows(rows, b"", options)
    if not wide and row_ends and row_ends[-1] > 2**31 - 1:
        raise ArgumentError(
            "the packed column passes 2 GiB, past 32-bit offsets: pass a large_string or large_binary column"
        )
    packed_offsets = array("q" if wide else "i", [0, *row_ends]).tobytes()
    return (b"".join(output), packed_offsets, *totals, errors)


def _pack_rows(
    rows: list[bytes], end: bytes, options: PackOptions
) -> tuple[list[bytes], list[int], tuple[int, int, int, int, int, int], list[tuple[int, str]]]:
    """Each row packed and followed by ``end`` (a bad one: nothing): ``(pieces, ends,
    (packed, tokens_before, tokens_after, dropped, unfit, uncounted), errors)``, ``ends``
    where each row ends in the joined pieces."""
    estimate = bytes_options(options)
    output: list[bytes] = []
    ends: list[int] = []
    size = packed = before = after = dropped = unfit = uncounted = 0
    errors: list[tuple[int, str]] = []
    for index, row in enumerate(rows):
        try:
            body, gone, fits, tokens, _, _, tokens_before, _ = _pack(row, options, estimate, transcripts=True)
        except ContextfoldError as exc:
            errors.append((index, str(exc)))
        else:
            output += (body, end)
            size += len(body) + len(end)
            packed, before, after = packed + 1, before + (tokens_before or 0), after + tokens
            dropped, unfit, uncounted = dropped + gone, unfit + (not fits), uncounted + (tokens_before is None)
        ends.append(size)
    return output, ends, (packed, before, after, dropped, unfit, uncounted), errors


def _pack(body: bytes, options: PackOptions, estimate: EncodingName | None, transcripts: bool) -> Outcome:
    """``(body, dropped, fits, tokens, note, kept, input_tokens)`` for one body;
    ``body`` is the input object when nothing changed."""
    parsed = _Body(body, transcripts)
    members = parsed.members
    key = "messages" if parsed.has_messages else "input" if "input" in members else None
    if key is None:
        if transcripts:
            raise RequestError(_NO_TRANSCRIPT)
        if isinstance(parsed.root, dict):
            raise RequestError("request body: no 'messages' or 'input' member")
        raise RequestError(f"request body: expected a JSON object, got {type(parsed.root).__name__}")
    items = parsed.messages if key == "messages" else members["input"]
    responses = key == "input"
    field = "instructions" if responses else "system"
    system, tools = members.get(field), members.get("tools")
    if system is not None and not isinstance(system, (str, list)):
        raise MessageTypeError(f"{field}: expected str, list or None, got {type(system).__name__}", None, field)
    check_tools(tools)
    if transcripts and not isinstance(items, (list, str) if responses else list):
        raise RequestError(_NO_TRANSCRIPT)
    shape = "responses" if responses and options.shape == "auto" else options.shape
    if responses and isinstance(items, str):
        return _one_message(body, items, system, tools, options, estimate)
    if not isinstance(items, list):
        wanted = "a list or str" if responses else "a list"
        raise MessageTypeError(f"{key}: expected {wanted}, got {type(items).__name__}", None, "")
    if shape != options.shape:
        options = replace(options, shape=shape)
    pack = handoff(items, options, system, tools)
    n = len(items)
    input_tokens = _tokens_in(items, estimate, options.images, shape) if transcripts else None
    if pack.note is None and not pack.applied_edits and pack.kept == list(range(n)):
        return body, 0, pack.fits, pack.tokens, None, pack.kept, input_tokens, ()
    # The note is the message whose content is the note's text itself (edited messages
    # are new dicts too).
    note_at = next((k for k, m in enumerate(pack.messages) if entry(m, "content") is pack.note), len(pack.messages))
    note = None if pack.note is None else pack.messages[note_at]
    kept_messages = [m for k, m in enumerate(pack.messages) if pack.note is None or k != note_at]
    edited = {i: m for i, m in zip(pack.kept, kept_messages, strict=True) if m is not items[i]}
    out = parsed.splice(key, pack.kept, note, note_at, edited)
    return out, pack.dropped, pack.fits, pack.tokens, pack.note, pack.kept, input_tokens, pack.applied_edits


def _tokens_in(items: list[Any], estimate: EncodingName | None, images: int | None, shape: str) -> int | None:
    """Tokens of every message, or None when one the pack dropped unread cannot be sized
    (the body packs all the same, as :func:`pack_request` packs it)."""
    try:
        return tokens_in(items, estimate, images, shape)
    except MessageError:
        return None


def _one_message(
    body: bytes,
    text: str,
    system: Any,
    tools: Any,
    options: PackOptions,
    estimate: EncodingName | None,
) -> Outcome:
    """A Responses body whose ``input`` is a string: one user message, counted, never
    packed (the body comes back as it is)."""
    check_pinned(options.pinned, 1)
    own = message_tokens({"role": "user", "content": text}, estimate, options.images)
    tokens = own + _prompt_tokens(system, tools, estimate, options.images)
    return body, 0, tokens <= options.budget, tokens, None, [0], own, ()
