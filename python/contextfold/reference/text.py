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
