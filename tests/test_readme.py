"""The README's Python examples, run as written: in order and in one namespace, as a reader
pasting them into a session would, in a temporary folder (the files they make go there).
The names they leave to the reader (a request body, a transcript, an LLM call) are given
here; the LLM call is a stub. Where a comment states an expression's value
(``expr  # value``), the value is checked. The OpenAI Agents SDK example needs the SDK and
a model: it runs in tests/integrations/test_openai_agents.py."""

from __future__ import annotations

import ast
import asyncio
import inspect
import io
import json
import re
import tokenize
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold.synthetic import agent_run

from .offline_tiktoken import tiktoken_encoding

README = Path(__file__).parents[1] / "README.md"
AGENTS = "from agents import"


def readme_examples() -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def stated_value(comment: str) -> tuple[bool, Any]:
    """(True, value) when ``comment`` opens with a Python literal (the longest that parses:
    ``(True, 3490, 3500)``, ``25: ⌈UTF-16 length / 4⌉ + 4``), else (False, None)."""
    for end in range(len(comment), 0, -1):
        try:
            return True, ast.literal_eval(comment[:end])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return False, None


def comments(block: str) -> dict[int, str]:
    """Each line's comment, joined with the comment-only lines right after it."""
    found: dict[int, str] = {}
    alone = set()
    for token in tokenize.generate_tokens(io.StringIO(block).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string[1:].strip()
            if not token.line[: token.start[1]].strip():
                alone.add(token.start[0])
    joined: dict[int, str] = {}
    for line in sorted(found):
        if line in alone and line - 1 in joined:
            owner = max(k for k in joined if k < line)
            joined[owner] += " " + found[line]
            joined[line] = ""  # continued above
        else:
            joined[line] = found[line]
    return joined


def run_example(block: str, namespace: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Runs ``block`` a statement at a time (top-level ``await`` allowed); returns
    (expression, value, stated value) for each expression whose comment states one."""
    said = comments(block)
    checked = []
    module = compile(block, "README.md", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    for statement in module.body:
        expression = isinstance(statement, ast.Expr)
        tree: ast.mod = ast.Expression(statement.value) if expression else ast.Module([statement], [])
        code = compile(tree, "README.md", "eval" if expression else "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        value = eval(code, namespace)
        if inspect.CO_COROUTINE & code.co_flags:
            value = asyncio.run(value)
        has_value, stated = stated_value(said.get(statement.end_lineno or statement.lineno, ""))
        if expression and has_value:
            checked.append((ast.get_source_segment(block, statement), value, stated))
    return checked


async def complete(request: dict[str, Any]) -> str:
    """The LLM call the README leaves to the reader, stubbed: a fixed summary."""
    assert set(request) >= {"system", "user", "max_tokens"}
    return "The user asked to fix the budget reset; limits.py and budget.py were read."


def test_the_readme_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if cf.backend == "python":
        tiktoken_encoding("o200k_base")  # the reference counts o200k_base through tiktoken
    examples = [b for b in readme_examples() if AGENTS not in b]
    assert len(examples) >= 4, "the README's examples were not found"
    long_run = agent_run(120)  # past the 80-message window: the fold calls the summariser
    given = {
        "body": json.dumps({"model": "gpt-4o", "messages": agent_run(24)}).encode(),
        "bodies": [json.dumps({"messages": agent_run(n)}).encode() for n in (4, 24, 60)],
        "transcript": long_run,
        "system_prompt": "You fix bugs.",
        "complete": complete,
    }
    namespace: dict[str, Any] = dict(given)
    printed = io.StringIO()
    with redirect_stdout(printed):  # on_folded=print
        checked = [c for block in examples for c in run_example(block, namespace)]
    assert [(code, value) for code, value, _ in checked] == [(code, stated) for code, _, stated in checked]
    assert len(checked) >= 6, checked
    # Each given name was used, and the stub was called: the examples ran, not just parsed.
    assert namespace["code_map"] is not None and namespace["store"].get(namespace["code_map"].key)
    assert "TranscriptFold" in printed.getvalue() and "The user asked" in namespace["request"][1]["content"]
    namespace["store"].close()
