"""A pytest plugin (``-p tests.integrations.langchain_swap``) that runs LangChain's own
context-editing tests with contextfold's ``ClearToolUsesEdit`` in place of LangChain's:
the name is replaced in LangChain's module before the tests import it, and collection
checks that every test module took the replacement. Coroutine tests run with
``asyncio.run`` (LangChain runs them with pytest-asyncio, which this suite does not need)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import langchain.agents.middleware.context_editing as context_editing
import pytest
from contextfold.integrations.langchain_edits import ClearToolUsesEdit

context_editing.ClearToolUsesEdit = ClearToolUsesEdit  # type: ignore[misc]


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        module = getattr(item, "module", None)
        if getattr(module, "ClearToolUsesEdit", ClearToolUsesEdit) is not ClearToolUsesEdit:
            raise pytest.UsageError(f"{item.nodeid} kept LangChain's ClearToolUsesEdit")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True
