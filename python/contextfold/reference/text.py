"""JavaScript's text rules where they differ from Python's."""

from __future__ import annotations

import re

JS_SPACE_CHARS = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
"""JavaScript's ``\\s`` (and ``String#trim``): unlike Python's, it includes U+FEFF and
excludes U+001C–U+001F and U+0085."""

_TRIM = re.compile(f"^[{JS_SPACE_CHARS}]+|[{JS_SPACE_CHARS}]+\\Z")


def js_trim(text: str) -> str:
    """``String.prototype.trim``."""
    return _TRIM.sub("", text)


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
