"""Chooses the implementation behind the public API: the native extension or the reference.

``CONTEXTFOLD_BACKEND=python`` forces the pure-Python reference; ``native`` requires the
extension (an ImportError when it is missing); unset, the extension is used when it
imports. The choice is made once, when contextfold is imported.
"""

from __future__ import annotations

import os
from types import ModuleType

from . import reference


def _choose() -> tuple[str, ModuleType]:
    wanted = os.environ.get("CONTEXTFOLD_BACKEND", "").strip().lower()
    if wanted not in ("", "native", "python"):
        raise ImportError(f"CONTEXTFOLD_BACKEND must be 'native' or 'python', not {wanted!r}")
    if wanted == "python":
        return "python", reference
    try:
        from . import _native
    except ImportError:
        if wanted == "native":
            raise
        return "python", reference
    return "native", _native


name, impl = _choose()
