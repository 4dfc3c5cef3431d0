"""Tests of contextfold.integrations with the real frameworks (the `integrations` extra)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

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
