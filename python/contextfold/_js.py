"""JavaScript's semantics where they differ from Python's, in one place: UTF-16 lengths and
cuts, whitespace and trim, number printing, and JSON as ``JSON.stringify`` writes it.

Both backends and the public modules stand on these rules; the native core has its own
copy in Rust (text.rs, json.rs), held equal by the differential tests.

Python's ``json.dumps`` differs from JavaScript in ways that change lengths: floats
(``1.0`` vs ``1``, ``1e16`` vs ``10000000000000000``), ``NaN`` (``null`` in JavaScript),
big integers (JavaScript rounds them to doubles), lone surrogates (escaped as ``\\udxxx``
by JavaScript) and the order of integer-like object keys. These functions follow
JavaScript. Both walk nested values with an explicit stack, so deep nesting cannot
exhaust Python's recursion limit.

Values are read as JSON reads them, through their built-in storage: a subclass of
``dict``, ``list`` or ``str`` is the dict, list or str it holds, and its own methods
(``get``, ``__getitem__``, ``__missing__``, ``__iter__``, ``__len__``, ``__eq__``, …)
are never called; a key is found as ``dict.get`` finds it. The native backend reads
Python objects the same way (see :func:`plain` and :data:`entry`).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, TypeGuard, TypeVar

from .errors import MessageTypeError, MessageValueError

__all__ = [
    "JS_SPACES",
    "JS_SPACE_CHARS",
    "MAX_DEPTH",
    "collapse_spaces",
    "compact_json",
    "entry",
    "field_of",
    "has_entry",
    "is_dict",
    "is_int",
    "is_list",
    "is_str",
    "js_number",
    "js_trim",
    "json_length",
    "list_value",
    "listed",
    "mapping_get",
    "plain",
    "read_once",
    "str_value",
    "utf16_cut",
    "utf16_len",
]

T = TypeVar("T")

MAX_DEPTH = 100_000
"""Deepest nesting followed before a value is rejected as too deep (or circular)."""

entry = dict.get
"""``entry(obj, key)``: a dict's entry as its storage holds it (a subclass's own ``get``,
``__getitem__`` or ``__missing__`` is not called)."""
has_entry = dict.__contains__
"""``has_entry(obj, key)``: whether the dict's storage holds ``key``."""


def listed(items: list[Any]) -> list[Any]:
    """A new list of a list's items, as its storage holds them (a subclass's own
    ``__iter__`` never runs), read once the new list is made: ``list.copy`` takes the
    length before it allocates, and on 3.10 and 3.11 a collection that allocation runs
    (a finaliser or ``gc`` callback that empties the list) left it reading items that were
    gone, a crash (CPython issue 75348). Growing a list runs no collection."""
    return [*items] if type(items) is list else [*list.__iter__(items)]


def is_list(value: object) -> TypeGuard[list[Any]]:
    """Whether ``value`` is a list (or a subclass) by its type: an object whose
    ``__class__`` claims ``list``, which ``isinstance`` believes, is none, and ``list``'s
    own methods refuse it."""
    return issubclass(type(value), list)


def is_dict(value: object) -> TypeGuard[dict[Any, Any]]:
    """Whether ``value`` is a dict (or a subclass) by its type, as :func:`is_list`. The
    readers write the test inline, ``issubclass(type(value), dict)``, where the call would
    cost more than the test and the type checker needs no narrowing."""
    return issubclass(type(value), dict)


def is_str(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a str (or a subclass) by its type, as :func:`is_list`."""
    return issubclass(type(value), str)


def mapping_get(value: object) -> Callable[..., Any] | None:
    """``value``'s own ``get`` when it is a mapping (a proxy that forwards one included),
    else None: an object whose ``__class__`` claims a mapping it does not implement
    (``isinstance`` believes it) is read as the plain object it is."""
    if not isinstance(value, Mapping):
        return None
    get = getattr(value, "get", None)
    return get if callable(get) else None


def field_of(value: object, name: str) -> Any:
    """Field ``name`` of a stored row or fact: a mapping's entry (:func:`mapping_get`), else
    the object's attribute; None when it has neither."""
    get = mapping_get(value)
    return get(name) if get is not None else getattr(value, name, None)


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an int (or a subclass) but no bool, by its type, as
    :func:`is_list`."""
    kind = type(value)
    return issubclass(kind, int) and kind is not bool


def read_once(items: Sequence[T]) -> Sequence[T]:
    """``items`` as a call that reads it more than once takes it: a list as it is now
    (:func:`listed`, so every reading agrees and no slice of the caller's list is taken),
    any other sequence as it is."""
    return listed(items) if is_list(items) else items


def list_value(value: Any) -> list[Any] | None:
    """The list a value holds (an exact one itself, a subclass's items through
    :func:`listed`); None for any other value."""
    if type(value) is list:
        return value
    return listed(value) if is_list(value) else None


def str_value(value: Any) -> str | None:
    """The str a value holds (a subclass read from its storage); None for any other value."""
    if type(value) is str:
        return value
    return str.__str__(value) if issubclass(type(value), str) else None


def stored(value: int) -> int:
    """An int's (or an int subclass's) stored value as a plain int: a subclass's own
    ``__int__``, ``__index__``, comparisons and repr never run (``int(value)`` would call
    its ``__int__``), as the native side reads it."""
    return int.__int__(value)


def shown(number: int) -> str:
    """A plain int as an error quotes it: in decimal, or by its size when it has more digits
    than Python writes (the ValueError writing it raises would replace the error)."""
    try:
        return str(number)
    except ValueError:
        return f"{'a negative int' if number < 0 else 'an int'} of {number.bit_length()} bits"


def quoted(value: Any) -> str:
    """A caller's value as an error quotes it: its repr, a str or an int by what it stores
    (an int as :func:`shown` writes it), one whose repr raises by its type, so the error
    is the one raised."""
    if is_str(value):
        return str.__repr__(str.__str__(value))
    if is_int(value):
        return shown(stored(value))
    try:
        return repr(value)
    except Exception as exc:  # a container holding an int too long to write, a hostile __repr__
        return f"a value of type {type(value).__name__} whose repr raises {type(exc).__name__}"


def plain(value: Any) -> Any:
    """The built-in value a ``str``, ``list`` or ``dict`` subclass holds (an exact one as
    it is); anything else as it is. Callers test ``type(value) is str`` (or list, dict)
    first where it matters, so the common case costs nothing. Types are told apart by
    identity, never hashed or compared: a metaclass may define ``__eq__`` (and so have
    no hash)."""
    kind = type(value)
    if kind is str or kind is list or kind is dict:
        return value
    # By its type, not isinstance: an object whose `__class__` claims one is none.
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, list):
        return listed(value)
    if issubclass(kind, dict):
        return dict(dict.items(value))
    return value


_CONTAINERS = (str, dict, list)
_MAX_SAFE = 2**53
_LONE_SURROGATE = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")
_SHAPE = "a JSON value (None, bool, int, float, str, list or dict)"


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (JavaScript's ``.length``)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) >> 1


JS_SPACE_CHARS = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
"""JavaScript's ``\\s`` (and ``String#trim``): unlike Python's, it includes U+FEFF and
excludes U+001C–U+001F and U+0085."""

JS_SPACES = frozenset("\t\n\x0b\x0c\r \xa0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)
"""The characters of :data:`JS_SPACE_CHARS`, for membership tests."""

_TRIMMED = "".join(sorted(JS_SPACES))


def js_trim(text: str) -> str:
    """``String.prototype.trim``, of the text a str (or subclass) holds. Not by
    ``^\\s+|\\s+$``: the second half rescans a run of spaces inside the text from each
    of its characters, quadratic in its length."""
    return str.strip(text, _TRIMMED)


_SPACE_RUN = re.compile(f"[{JS_SPACE_CHARS}]+")


def collapse_spaces(text: str) -> str:
    """``text.replace(/\\s+/g, ' ').trim()``."""
    return js_trim(_SPACE_RUN.sub(" ", text))


def utf16_cut(text: str, units: int) -> str:
    """The longest prefix of at most ``units`` UTF-16 units (JavaScript's ``slice(0, n)``),
    except that a cut never splits a surrogate pair: it falls before it."""
    if len(text) <= units and text.isascii():
        return text
    used = 0
    for i, c in enumerate(text):
        used += 2 if ord(c) > 0xFFFF else 1
        if used > units:
            return text[:i]
    return text


def _string_json_len(text: str) -> int:
    escaped = encode_basestring(text)
    if escaped.isascii():
        return len(escaped)
    return utf16_len(escaped) + 5 * len(_LONE_SURROGATE.findall(escaped))


def _escape_lone(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _string_json(text: str) -> str:
    escaped = encode_basestring(text)
    return escaped if escaped.isascii() else _LONE_SURROGATE.sub(_escape_lone, escaped)


def _json_number(value: Any) -> int | float | None:
    """The number a value stands for in JSON, by value: an ``int`` or ``float``, a subclass
    (``numpy.float64``) read through its built-in storage as ``json.dumps`` reads it (its
    own methods never run), or an object with ``__index__`` (``numpy.int64``) as the int it
    returns; None for anything else (``__index__`` raising an ``Exception`` included)."""
    cls = type(value)
    if cls is int or cls is float:
        exact: int | float = value
        return exact
    if issubclass(cls, int):
        return int.__index__(value)
    if issubclass(cls, float):
        return float.__float__(value)
    if hasattr(cls, "__index__"):
        try:
            return int.__index__(operator.index(value))  # an int subclass it returns, by storage
        except Exception:
            return None
    return None


def js_number(value: int | float) -> str:
    """``Number.prototype.toString`` of ``value`` as JSON writes it (``null`` when not finite)."""
    if isinstance(value, int):
        if -_MAX_SAFE <= value <= _MAX_SAFE:
            return str(value)
        try:
            value = float(value)
        except OverflowError:
            return "null"
    if value != value or value in (float("inf"), float("-inf")):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp = repr(float(abs(value))).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole) + int(exp or 0) - (len(whole + frac) - len((whole + frac).lstrip("0")))
    digits = digits.rstrip("0")
    k, n = len(digits), point
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * -n + digits
    else:
        e = n - 1
        head = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        body = f"{head}e{'+' if e > 0 else '-'}{abs(e)}"
    return sign + body


def _scalar_length(value: Any, field: str, index: int | None) -> int:
    if value is None:
        return 4
    if value is True:
        return 4
    if value is False:
        return 5
    number = _json_number(value)
    if number is not None:
        return len(js_number(number))
    raise _wrong_type(value, field, index)


def _plain_key(key: Any, field: str, index: int | None) -> str:
    if not is_str(key):
        raise MessageTypeError(
            f"{_where(field, index)}: expected str object keys, got {type(key).__name__}", index, field
        )
    return str.__str__(key)


def _where(field: str, index: int | None) -> str:
    """``message 3, field 'content'``; without the field for a whole item (``field=""``)."""
    where = "message" if index is None else f"message {index}"
    return f"{where}, field '{field}'" if field else where


def _wrong_type(value: Any, field: str, index: int | None) -> MessageTypeError:
    return MessageTypeError(f"{_where(field, index)}: expected {_SHAPE}, got {type(value).__name__}", index, field)


def _too_deep(field: str, index: int | None) -> MessageValueError:
    return MessageValueError(
        f"{_where(field, index)}: nested deeper than {MAX_DEPTH} levels (or circular)", index, field
    )


_END = object()

_DICT_ENTRIES: type[Any] = type(iter({}.items()))

DICT_KEYS_CHANGED = "dictionary keys changed during iteration"
"""What reading a dict raises when the caller's code run meanwhile changed it so that an
entry was passed over (the native ``DictEntries``), as Python's own iteration raises for
an entry it would see twice (and ``dictionary changed size during iteration``)."""


def _count_entries(frames: list[tuple[Any, Any]]) -> None:
    """Before a value's own code runs (a number's ``__index__``): each dict being walked
    has its entries counted from here on, so that one the code moves out of reach (a key
    popped and put back, the dict rebuilt) is not passed over unsaid."""
    for j, (skip, entries) in enumerate(frames):
        if skip is not False and type(entries) is _DICT_ENTRIES:
            frames[j] = (skip, _counted(entries, operator.length_hint(entries)))


def _counted(entries: Iterator[Any], left: int) -> Iterator[Any]:
    for entry in entries:
        left -= 1
        yield entry
    if left:
        raise RuntimeError(DICT_KEYS_CHANGED)


Visit = Callable[[dict[str, Any]], Any]
"""How :func:`json_length` measures an object: see its ``visit``."""

OPAQUE: Any = object()
"""What a ``visit`` callback of :func:`json_length` returns for an object it leaves
unmeasured (an image block)."""


def json_length(value: Any, field: str = "content", index: int | None = None, visit: Visit | None = None) -> int:
    """UTF-16 length of ``JSON.stringify(value)``, without building the text.

    ``visit(obj)``, when given, decides how each object is measured: None as text, a key
    to measure it without that entry (its comma and colon still count), or
    :data:`OPAQUE` not at all.
    """
    total = 0
    frames: list[tuple[Any, Any]] = []  # (False for a list, else the key left out, iterator)
    item: Any = value
    while True:
        if (cls := type(item)) is not str and cls is not dict and cls is not list and issubclass(cls, _CONTAINERS):
            # A dict subclass is walked in place, through its storage (as natively: a
            # change made meanwhile is seen as it is there); a str or list one as copied.
            cls = dict if issubclass(cls, dict) else type(item := plain(item))
        if cls is str:
            total += _string_json_len(item)
        elif cls is dict:
            skip = None if visit is None else visit(item)
            if skip is not OPAQUE:
                entries = dict.items(item)  # a subclass's too: its own items and len never run
                size = len(entries)
                total += 2 + 2 * size - (1 if size else 0)
                frames.append((skip, iter(entries)))
        elif cls is list:
            total += 2 + (len(item) - 1 if item else 0)
            frames.append((False, iter(item)))
        else:
            # (Types told apart by identity: a metaclass may define __eq__ or no hash.)
            if frames and cls is not int and cls is not float and cls is not bool and item is not None:
                _count_entries(frames)
            total += _scalar_length(item, field, index)
        while frames:
            skip, iterator = frames[-1]
            item = next(iterator, _END)
            if item is _END:
                frames.pop()
                continue
            if skip is not False:
                key, item = item
                if type(key) is not str:
                    key = _plain_key(key, field, index)
                if skip is not None and key == skip:
                    continue
                total += _string_json_len(key)
            if len(frames) >= MAX_DEPTH:
                raise _too_deep(field, index)
            break
        else:
            return total


def _array_index(key: Any) -> int | None:
    """The array index ``key`` names (a canonical decimal below 2**32 - 1), by which JavaScript
    writes it first; None for any other key, one that is not a str included (it is named
    when the text reaches it)."""
    if not is_str(key):
        return None
    k = str.__str__(key)
    if k.isdigit() and k.isascii() and (k == "0" or k[0] != "0") and (index := int(k)) < 2**32 - 1:
        return index
    return None


def _ordered_items(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Entries in JavaScript's order: array-index keys ascending, then the rest as inserted."""
    # Most keys open with a letter: only a str key opening with a digit, or a subclass's, is read.
    first = sorted(
        (i, n)
        for n, (k, _) in enumerate(pairs)
        if (type(k) is not str or "0" <= k[:1] <= "9") and (i := _array_index(k)) is not None
    )
    if not first:
        return pairs
    taken = {n for _, n in first}
    return [pairs[n] for _, n in first] + [pair for n, pair in enumerate(pairs) if n not in taken]


def compact_json(value: Any, field: str = "content", index: int | None = None, visit: Visit | None = None) -> str:
    """``JSON.stringify(value)``: compact, non-ASCII kept, lone surrogates escaped.

    ``visit``, when given, decides how each object is written, as :func:`json_length`
    measures it: :data:`OPAQUE` as nothing, a key's entry as its colon alone (commas kept),
    so the text's UTF-16 length is what :func:`json_length` gives with the same ``visit``.
    """
    out: list[str] = []
    frames: list[tuple[Any, Any, str]] = []  # (False for a list, else the key left out, iterator, closing)
    item: Any = value
    while True:
        if (cls := type(item)) is not str and cls is not dict and cls is not list and issubclass(cls, _CONTAINERS):
            cls = type(item := plain(item))
        if cls is str:
            out.append(_string_json(item))
        elif cls is dict:
            skip = None if visit is None else visit(item)
            if skip is OPAQUE:
                out.append("")  # the slot holds its place: a comma still follows it
            else:
                out.append("{")
                frames.append((skip, iter(_ordered_items(list(item.items()))), "}"))
        elif cls is list:
            out.append("[")
            frames.append((False, iter(item), "]"))
        elif item is None:
            out.append("null")
        elif item is True or item is False:
            out.append("true" if item else "false")
        elif (number := _json_number(item)) is not None:
            out.append(js_number(number))
        else:
            raise _wrong_type(item, field, index)
        while frames:
            skip, iterator, closing = frames[-1]
            nxt: Any = next(iterator, _END)
            if nxt is _END:
                frames.pop()
                out.append(closing)
                continue
            if out[-1] not in ("[", "{"):
                out.append(",")
            if skip is not False:
                key, nxt = nxt
                if type(key) is not str:  # checked as reached, as the core's walk does
                    key = _plain_key(key, field, index)
                if skip is not None and key == skip:
                    out.append(":")
                    continue
                out.append(_string_json(key))
                out.append(":")
            if len(frames) >= MAX_DEPTH:
                raise _too_deep(field, index)
            item = nxt
            break
        else:
            return "".join(out)
