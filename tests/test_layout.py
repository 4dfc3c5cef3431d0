"""The package's import graph: the rule that keeps each behaviour in one obvious place.

``reference/`` is the pure-Python twin of ``_native`` and stands only on the shared floor
(``_contract``, ``_js``, ``errors``); public modules reach a backend only through
``_backend``, never by importing ``reference/`` themselves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import contextfold

PACKAGE = Path(contextfold.__file__).parent
FLOOR = {"contextfold._contract", "contextfold._edits", "contextfold._js", "contextfold.errors"}


def _imports(path: Path) -> set[str]:
    """Absolute names of the contextfold modules ``path`` imports."""
    module = "contextfold." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
            names = [f"{target}.{alias.name}" for alias in node.names]
            found.update(n if n.rpartition(".")[2] in {"reference", "_native"} else target for n in names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("contextfold")}


def _modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "reference" not in p.relative_to(PACKAGE).parts[:1])


def test_the_graph_is_read() -> None:
    # The checks below mean something only if imports are found at all.
    assert "contextfold._contract" in _imports(PACKAGE / "pack.py")
    assert "contextfold.reference" in _imports(PACKAGE / "_backend.py")
    assert "contextfold._contract" in _imports(PACKAGE / "reference" / "pack.py")


def test_no_public_module_imports_the_reference() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(n for n in _imports(path) if n.startswith("contextfold.reference"))
        for path in _modules(PACKAGE)
        if path.name != "_backend.py"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_reference_stands_only_on_the_floor() -> None:
    for path in sorted((PACKAGE / "reference").glob("*.py")):
        outside = {n for n in _imports(path) if not n.startswith("contextfold.reference")}
        assert outside <= FLOOR, (path.name, outside - FLOOR)


def test_the_floor_imports_nothing_above_it() -> None:
    for name in ("_contract.py", "_edits.py", "_js.py", "errors.py"):
        assert _imports(PACKAGE / name) <= FLOOR, name


def test_the_reference_modules_import_each_other_in_one_direction() -> None:
    # A circle (tokens needing provider needing tokens) hides which module a rule lives in.
    graph = {
        f"contextfold.reference.{p.stem}": {n for n in _imports(p) if n.startswith("contextfold.reference.")}
        for p in (PACKAGE / "reference").glob("*.py")
        if p.name != "__init__.py"
    }

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        return any(n == target or (n not in seen and reaches(n, target, seen | {n})) for n in graph.get(start, ()))

    assert "contextfold.reference.tokens" in graph["contextfold.reference.pack"]  # the graph is read
    assert [m for m in graph if reaches(m, m, set())] == []
