"""Tests of contextfold.integrations with the real frameworks (the `integrations` extra)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

import pytest


def need(module: str, extra: str) -> ModuleType:
    """Imports ``module``; without it, skips, except under CI (``CI=true``), where it fails."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is not installed ({exc}): pip install 'contextfold[{extra}]'"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must test every integration: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def adapter_reports(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The reports the framework adapters logged (``contextfold.adapter``), oldest first."""
    return [r.contextfold for r in caplog.records if r.name == "contextfold.adapter"]  # type: ignore[attr-defined]


def expected_report(pack: Any, adapter: str, route: str, messages_out: int) -> dict[str, Any]:
    """What a framework adapter reports of ``pack`` (a ``HandoffPack``) sent on as
    ``messages_out`` messages: its counts, as read off the pack."""
    folded = bool(pack.dropped or pack.applied_edits)
    return {
        "adapter": adapter,
        "model": None,
        "route": route,
        "messages_in": len(pack.kept) + pack.dropped,
        "messages_out": messages_out,
        "tokens_in": None if folded else pack.tokens,
        "tokens_out": pack.tokens,
        "budget": pack.budget,
        "folded": folded,
        "fits": pack.fits,
        "dropped": pack.dropped,
        "cleared_tool_uses": sum(e.cleared_tool_uses for e in pack.applied_edits),
        "cleared_thinking_turns": sum(e.cleared_thinking_turns for e in pack.applied_edits),
    }
