"""The drop-in promise: the native extension and the reference have the same functions
with the same signatures (the stub for ``_native`` re-exports the reference's)."""

from __future__ import annotations

import inspect
import subprocess
import sys

from contextfold import reference

from .conftest import native_required


def shape(fn: object) -> list[tuple[str, object, object]]:
    """Parameter names, kinds and defaults (annotations aside: native has none)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]


def test_native_and_reference_signatures_are_identical() -> None:
    native = native_required()
    for name in reference.__all__:
        assert shape(getattr(native, name)) == shape(getattr(reference, name)), name


def test_native_exports_nothing_the_reference_lacks() -> None:
    native = native_required()
    public = {n for n in dir(native) if not n.startswith("_") and callable(getattr(native, n))}
    assert public == set(reference.__all__)


def test_numpy_is_imported_only_when_an_array_is_asked_for() -> None:
    # A gateway that only packs should not pay numpy's import (and its BLAS threads).
    script = (
        "import sys, contextfold as cf\n"
        "cf.pack_handoff([{'role': 'user', 'content': 'hi'}], target_context_tokens=10)\n"
        "assert 'numpy' not in sys.modules, 'numpy imported by packing'\n"
        "sizes = cf.message_tokens_array([{'role': 'user', 'content': 'hi'}])\n"
        "assert sizes.tolist() == [5] and 'numpy' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
