"""Working memory and code maps against the seeds' own behaviour (../shared/vectors), on
both backends."""

from __future__ import annotations

from datetime import datetime

import contextfold as cf

from .conftest import vectors


def entry_lines(content: str) -> list[str]:
    return [line for line in content.split("\n") if line.startswith("- ") or line.startswith("(+")]


def test_consolidate(backend: str) -> None:
    for case in vectors("consolidate"):
        snapshot, options = case["args"]
        at = datetime.fromisoformat(options["at"].replace("Z", "+00:00"))
        got = cf.consolidate(snapshot, at=at, root=options.get("root"))
        expected = case["expected"]
        if expected is None:
            assert got is None, case
            continue
        assert got is not None, case
        assert got.key == expected["key"]
        assert entry_lines(got.content) == entry_lines(expected["content"]), case
        assert at.date().isoformat() in got.content.split("\n")[0]


def test_merge_consolidated(backend: str) -> None:
    for case in vectors("merge_consolidated"):
        assert cf.merge_consolidated(*case["args"]) == case["expected"], case


def test_consolidated_files_and_removal(backend: str) -> None:
    for case in vectors("consolidated_files"):
        assert cf.consolidated_files(*case["args"]) == case["expected"], case
    for case in vectors("without_consolidated_files"):
        content, paths = case["args"]
        assert cf.without_consolidated_files(content, paths) == case["expected"], case


def test_working_memory_brief(backend: str) -> None:
    for case in vectors("working_memory_brief_bullets"):
        task, observations = case["args"]
        memory = cf.WorkingMemory()
        if task is not None:
            memory.set_task(task)
        for observation in observations:
            memory.observe(observation)
        brief = memory.brief()
        got = None if brief is None else [line[2:] for line in brief.split("\n") if line.startswith("- ")]
        assert got == case["expected"], case


def test_recall(backend: str) -> None:
    for case in vectors("areas_of_paths_in"):
        assert cf.areas_of_paths_in(*case["args"]) == case["expected"], case
    for case in vectors("areas_named_in"):
        assert cf.areas_named_in(*case["args"]) == case["expected"], case
    for case in vectors("area_of_path"):
        assert cf.area_of_path(*case["args"]) == case["expected"], case


def test_consolidated_facts_for(backend: str) -> None:
    for case in vectors("consolidated_facts_for"):
        facts, areas = case["args"]
        got = cf.consolidated_facts_for(facts, areas)
        assert got == case["expected"], case
        assert all(any(g is f for f in facts) for g in got)


def test_rank_by_count(backend: str) -> None:
    for case in vectors("rank_by_count"):
        assert [list(pair) for pair in cf.rank_by_count(case["args"][0])] == case["expected"], case


def test_volatile_tail(backend: str) -> None:
    for case in vectors("volatile_tail"):
        assert cf.volatile_tail(case["args"][0]) == case["expected"], case
