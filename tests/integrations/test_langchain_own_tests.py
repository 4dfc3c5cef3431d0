"""LangChain's own context-editing tests, run against contextfold's ``ClearToolUsesEdit``
(issue #24): the test module is taken from the sdist of the LangChain installed (PyPI
keeps it; nothing of it is stored here) and run in a child pytest with
``langchain_swap`` as a plugin."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from . import need

need("contextfold.integrations.langchain_edits", "langchain")

TEST_MODULE = "tests/unit_tests/agents/middleware/implementations/test_context_editing.py"
ROOT = Path(__file__).resolve().parents[2]
INDEX = "https://pypi.org/pypi/langchain/json"


def _sdist(version: str, into: Path) -> Path:
    """LangChain ``version``'s sdist from PyPI, or a skip (a fail under CI) when offline."""
    try:
        with urllib.request.urlopen(INDEX, timeout=30) as reply:
            urls = json.load(reply)["releases"][version]
        # A mirror may answer with URLs relative to the index's.
        url = urllib.parse.urljoin(INDEX, next(u["url"] for u in urls if u["packagetype"] == "sdist"))
        path = into / url.rsplit("/", 1)[-1]
        urllib.request.urlretrieve(url, path)
    except (OSError, StopIteration, KeyError, ValueError) as exc:
        reason = f"LangChain {version}'s sdist could not be fetched from PyPI: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def test_langchains_own_context_editing_tests_pass_with_contextfolds_edit(tmp_path: Path) -> None:
    version = importlib.metadata.version("langchain")
    with tarfile.open(_sdist(version, tmp_path)) as sdist:
        member = next(m for m in sdist.getmembers() if m.name.endswith(TEST_MODULE))
        source = sdist.extractfile(member)
        assert source is not None
        (tmp_path / "test_context_editing.py").write_bytes(source.read())
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.integrations.langchain_swap",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-o",
            "python_files=test_*.py",
            "--rootdir",
            str(tmp_path),
            "-q",
            str(tmp_path / "test_context_editing.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr
    assert run.returncode == 0, run.stdout + run.stderr
    assert "passed" in summary and "skipped" not in summary and "deselected" not in summary, summary
