"""Independent checks on packed framework transcripts (identity, order, tool pairs), and
the text of a corpus message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def openai_segments(roles: Sequence[str], has_calls: Sequence[bool]) -> list[list[int]]:
    """Indices grouped as the packer must keep them: a call with the tool answers after it."""
    segments: list[list[int]] = []
    i = 0
    while i < len(roles):
        segment = [i]
        if roles[i] == "assistant" and has_calls[i]:
            while i + 1 < len(roles) and roles[i + 1] == "tool":
                i += 1
                segment.append(i)
        segments.append(segment)
        i += 1
    return segments


def kept_positions(inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """Input indices of the outputs that ARE inputs (by identity), and the other outputs."""
    position = {id(m): i for i, m in enumerate(inputs)}
    kept: list[int] = []
    others: list[Any] = []
    for m in outputs:
        if id(m) in position and inputs[position[id(m)]] is m:
            kept.append(position[id(m)])
        else:
            others.append(m)
    return kept, others


def assert_segments_whole(segments: Sequence[Sequence[int]], kept: Sequence[int]) -> None:
    """Every segment is wholly kept or wholly dropped, and kept order is input order."""
    assert list(kept) == sorted(kept), "kept messages out of input order"
    chosen = set(kept)
    for segment in segments:
        inside = [i in chosen for i in segment]
        assert all(inside) or not any(inside), f"segment {segment} split: kept {inside}"


def content_text(content: Any) -> str:
    """A corpus message's content as text: a string as it is, the text parts joined by a newline."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
