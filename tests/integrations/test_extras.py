"""Frameworks are optional: a missing one names its extra; the base import loads none."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

ADAPTERS = [
    ("contextfold.integrations.langchain", "langchain_core.messages", "langchain"),
    ("contextfold.integrations.langchain", "langchain.agents.middleware", "langchain"),
    ("contextfold.integrations.langchain_edits", "langchain.agents.middleware.context_editing", "langchain"),
    ("contextfold.integrations.langgraph", "langgraph", "langgraph"),
    ("contextfold.integrations.litellm", "litellm", "litellm"),
    ("contextfold.integrations.pydantic_ai", "pydantic_ai.messages", "pydantic-ai"),
    ("contextfold.integrations.openai_agents", "agents", "openai-agents"),
    ("contextfold.integrations.arrow", "pyarrow", "arrow"),
]
FRAMEWORKS = (
    "litellm",
    "langchain",
    "langchain_core",
    "langgraph",
    "pydantic_ai",
    "agents",
    "dask",
    "pyarrow",
    "openai",
    "uvicorn",
)


@pytest.mark.parametrize(("adapter", "framework", "extra"), ADAPTERS)
def test_a_missing_framework_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, framework, None)  # import of it now fails, as if not installed
    for name in [n for n in sys.modules if n.startswith("contextfold.integrations.")]:
        monkeypatch.delitem(sys.modules, name)
    # The adapter names the first of its packages that will not import: this one, or one
    # it imports before it when that is missing too (langchain before langchain_core).
    with pytest.raises(ImportError, match=rf"^\w+ is not installed: pip install 'contextfold\[{extra}\]'$"):
        importlib.import_module(adapter)


def test_dask_pipeline_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextfold.integrations.dask import pack_jsonl

    monkeypatch.setitem(sys.modules, "dask.bag", None)
    with pytest.raises(ImportError, match=r"pip install 'contextfold\[dask\]'"):
        pack_jsonl("x.jsonl", target_context_tokens=100)


def test_the_base_import_loads_no_framework() -> None:
    code = (
        "import sys, contextfold, contextfold.integrations, contextfold.integrations.dask\n"
        f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


EXTRAS = [
    ("langchain", "langchain"),
    ("langgraph", "langgraph"),
    ("litellm", "litellm"),
    ("pydantic_ai", "pydantic-ai"),
    ("openai_agents", "openai-agents"),
    ("dask", "dask"),
    ("arrow", "arrow"),
]


def _imported_packages(adapter: str) -> set[str]:
    """The top-level packages an adapter module imports (anywhere in it, lazily too),
    following its imports of sibling adapters; the standard library and contextfold aside."""
    import ast
    from pathlib import Path

    import contextfold.integrations

    folder = Path(contextfold.integrations.__file__).parent
    found: set[str] = set()
    for node in ast.walk(ast.parse((folder / f"{adapter}.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module and not node.module.startswith("_"):
            found |= _imported_packages(node.module)
    return {name for name in found if name not in sys.stdlib_module_names and name != "contextfold"}


def _installs(extra: str) -> set[str]:
    """The distributions ``pip install 'contextfold[extra]'`` brings in, by name, as the
    installed contextfold's metadata and its dependencies' say (the closure)."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [("contextfold", frozenset({extra}))]
    while todo:
        name, extras = todo.pop()
        try:
            required = requires(name) or []
        except PackageNotFoundError:
            continue  # a dependency not installed here (a marker for another platform)
        for line in required:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in extras or {""}):
                key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
                if key not in seen:
                    seen.add(key)
                    todo.append((requirement.name, key[1]))
    return {name for name, _ in seen}


@pytest.mark.parametrize(("adapter", "extra"), EXTRAS)
def test_an_extra_installs_what_its_adapter_imports(adapter: str, extra: str) -> None:
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    from packaging.utils import canonicalize_name

    try:
        version("contextfold")
    except PackageNotFoundError:
        pytest.skip("contextfold is not installed: its extras are read from the installed metadata")
    distributions = packages_distributions()
    imported = _imported_packages(adapter)
    missing = sorted(name for name in imported if name not in distributions)
    if missing:
        pytest.skip(f"not installed here: {missing}")
    needed = {canonicalize_name(d) for name in imported for d in distributions[name]}
    assert needed <= _installs(extra), f"contextfold[{extra}] does not install {sorted(needed - _installs(extra))}"
