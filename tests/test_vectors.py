"""The seeds' own behaviour (../shared/vectors), on both backends."""

from __future__ import annotations

from typing import Any

import contextfold as cf
import pytest

from .conftest import vectors


def built(roles: list[str], lengths: list[int]) -> list[dict[str, Any]]:
    return [{"role": r, "content": "x" * n} for r, n in zip(roles, lengths, strict=True)]


def test_message_tokens(backend: str) -> None:
    for case in vectors("message_tokens"):
        assert cf.message_tokens(case["args"][0]) == case["expected"], case


def test_window_start(backend: str) -> None:
    for case in vectors("window_start"):
        convo = built(*case["args"])
        assert cf.window_start(convo) == case["expected"], case.get("note")
        assert cf.windowed(convo) == convo[case["expected"] :]


def test_compact_tail_start_for_budget(backend: str) -> None:
    for case in vectors("compact_tail_start_for_budget"):
        roles, lengths, budget = case["args"]
        assert cf.compact_tail_start_for_budget(built(roles, lengths), budget) == case["expected"], case.get("note")


def test_pinned_directive_index(backend: str) -> None:
    for case in vectors("pinned_directive_index"):
        roles, lengths, tail_start = case["args"]
        assert cf.pinned_directive_index(built(roles, lengths), tail_start) == case["expected"], case.get("note")


@pytest.mark.parametrize("fn", ["message_tokens", "window_start"])
def test_vectors_are_present(fn: str) -> None:
    assert len(vectors(fn)) > 100
