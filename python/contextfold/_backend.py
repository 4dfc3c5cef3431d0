"""Chooses the implementation behind the public API: the native extension or the reference.

``CONTEXTFOLD_BACKEND=python`` forces the pure-Python reference; ``native`` requires the
extension (an ImportError when it is missing); unset, the extension is used when it
imports, and an extension that is there but fails to load (a missing symbol, a build for
another Python) is a ``RuntimeWarning`` naming the reason, not a silent 10-80x slowdown.
The choice is made once, when contextfold is imported. This is the one module that
imports either backend; public modules call through :data:`impl`.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING


def _reference() -> ModuleType:
    # Imported only when used: it is most of `import contextfold`'s time.
    from . import reference

    return reference


def _choose() -> tuple[str, ModuleType]:
    wanted = os.environ.get("CONTEXTFOLD_BACKEND", "").strip().lower()
    if wanted not in ("", "native", "python"):
        raise ImportError(f"CONTEXTFOLD_BACKEND must be 'native' or 'python', not {wanted!r}")
    if wanted == "python":
        return "python", _reference()
    try:
        _native = importlib.import_module(f"{__package__}._native")
    except ImportError as exc:
        if wanted == "native":
            raise
        # Not built (a source checkout) is silent; built but not loading (a missing
        # symbol, a build for another Python) is said.
        builds = [f for f in os.listdir(os.path.dirname(__file__)) if f.startswith("_native.") and f != "_native.pyi"]
        if builds or not (isinstance(exc, ModuleNotFoundError) and exc.name == f"{__package__}._native"):
            found = f"; found {', '.join(sorted(builds))}" if builds else ""
            message = f"contextfold: the native extension did not load ({exc}{found}); using the pure-Python reference"
            # Level 4: past this function, this module and contextfold's __init__, to the
            # importing line (the warnings module skips importlib's frames).
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        return "python", _reference()
    return "native", _native


if TYPE_CHECKING:
    # Both backends have the reference's signatures (the extension's stubs re-export
    # them), so the reference module is the type of either.
    from . import reference

    impl = reference
    name: str
else:
    name, impl = _choose()


def implementation(which: str) -> ModuleType:
    """The backend module named ``"native"`` or ``"python"`` (ImportError when the
    extension is not built)."""
    if which == "python":
        return _reference()
    if which == "native":
        from . import _native

        return _native
    raise ValueError(f"backend must be 'native' or 'python', not {which!r}")


@contextmanager
def using(backend: str | ModuleType) -> Iterator[ModuleType]:
    """Runs the public API on ``backend`` (a name or a backend module) inside the block:
    for tests and benchmarks that compare the two. Not thread-safe."""
    chosen = implementation(backend) if isinstance(backend, str) else backend
    here = globals()
    saved, here["impl"] = here["impl"], chosen
    try:
        yield chosen
    finally:
        here["impl"] = saved
