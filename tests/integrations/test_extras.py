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
]
FRAMEWORKS = (
    "litellm",
    "langchain",
    "langchain_core",
    "langgraph",
    "pydantic_ai",
    "agents",
    "dask",
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
