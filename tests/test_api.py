"""The drop-in promise: the native extension and the reference have the same functions
with the same signatures (the stub for ``_native`` re-exports the reference's)."""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import contextfold
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


def test_the_reference_is_imported_only_when_it_runs() -> None:
    # Most of `import contextfold`'s time; a gateway on the native backend never needs it.
    native_required()
    script = "import sys, contextfold\nassert 'contextfold.reference' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", script], check=True, env={**os.environ, "CONTEXTFOLD_BACKEND": "native"})


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


BROKEN_EXTENSION = """
import importlib.abc, sys, warnings

class Broken(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "contextfold._native":
            raise ImportError("undefined symbol: PyFake_Symbol")

sys.meta_path.insert(0, Broken())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import contextfold
assert contextfold.backend == "python", contextfold.backend
assert contextfold.__version__, "a version without the extension"
print("|".join(f"{w.filename}: {w.message}" for w in caught if issubclass(w.category, RuntimeWarning)))
"""


def load(script: str, **env: str) -> str:
    """What ``script`` prints in a new interpreter, the backend left to choose."""
    environ = {k: v for k, v in os.environ.items() if k != "CONTEXTFOLD_BACKEND"} | env
    return subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True, env=environ
    ).stdout


def test_an_extension_that_fails_to_load_is_said_not_hidden(tmp_path: Path) -> None:
    # Built but broken (a missing symbol): the reference still runs, 10-80x slower, so
    # the reason is given as a warning at the user's import.
    said = load(BROKEN_EXTENSION)
    assert said.startswith("<string>: contextfold: the native extension did not load")
    assert "undefined symbol: PyFake_Symbol" in said
    # Not built at all (a source checkout): silent.
    package = Path(contextfold.__file__).parent
    shutil.copytree(package, tmp_path / "contextfold", ignore=shutil.ignore_patterns("_native.*.so", "_native.*.pyd"))
    not_built = BROKEN_EXTENSION.replace('raise ImportError("undefined symbol: PyFake_Symbol")', "return None")
    assert load(not_built, PYTHONPATH=str(tmp_path)).strip() == ""
    # Built for another Python: said, naming the build found.
    (tmp_path / "contextfold" / "_native.cpython-399-x86_64-linux-gnu.so").write_bytes(b"")
    said = load(not_built, PYTHONPATH=str(tmp_path))
    assert "did not load" in said and "found _native.cpython-399-x86_64-linux-gnu.so" in said


def test_a_source_tree_not_installed_imports_with_the_workspace_version() -> None:
    # On the reference backend the version came from the installed distribution's
    # metadata: a source tree on the path, never installed, failed to import at all.
    script = """
import importlib.metadata as metadata
installed = metadata.version
def version(name):
    if name == "contextfold":
        raise metadata.PackageNotFoundError(name)
    return installed(name)
metadata.version = version
import contextfold
print(contextfold.__version__)
"""
    source_tree = (Path(contextfold.__file__).parents[2] / "Cargo.toml").is_file()
    expected = contextfold.__version__ if source_tree else "0+unknown"
    assert load(script, CONTEXTFOLD_BACKEND="python").strip() == expected


def test_the_reference_backend_leaves_the_extension_unloaded() -> None:
    # CONTEXTFOLD_BACKEND=python is the way round an extension that fails in a process.
    script = "import sys, contextfold\nassert 'contextfold._native' not in sys.modules\nprint(contextfold.__version__)"
    assert load(script, CONTEXTFOLD_BACKEND="python").strip() == contextfold.__version__


def test_a_fresh_interpreter_names_the_backend_it_runs() -> None:
    # SPEC §1: native is the default when the extension imports; CONTEXTFOLD_BACKEND=python forces the reference.
    native_required()
    script = "import contextfold\nprint(contextfold.backend)"
    assert load(script).strip() == "native"
    assert load(script, CONTEXTFOLD_BACKEND="python").strip() == "python"
