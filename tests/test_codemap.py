"""Working memory and code maps (SPEC §6), case by case, with native == reference checks
for ranking and paths, and consolidate → merge → files → removal round trips."""

from __future__ import annotations

import gc
import re
from datetime import date, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import contextfold as cf
import pytest
from contextfold import reference
from hypothesis import assume, example, given
from hypothesis import strategies as st

from .conftest import examples, native_required
from .hostile_types import LyingStr

ROOT = "C:\\code\\repo"


def memory_with(observations: list[tuple[str, str]], task: str = "fix the run store") -> cf.WorkingMemory:
    memory = cf.WorkingMemory()
    memory.set_task(task)
    for kind, item in observations:
        memory.observe(kind, item)  # type: ignore[arg-type]
    return memory


def test_brief_sections_thresholds_and_counts(backend: str) -> None:
    memory = memory_with([("read", "a.py")] * 9)
    assert memory.brief() is None  # 9 observations
    memory.observe("read", "  ")  # counted, not recorded
    assert memory.size == 10 and memory.snapshot.read == ("a.py",) * 9
    brief = memory.brief()
    assert brief is not None and "- a.py (9×)" in brief
    memory = memory_with(
        [("created", "n.py"), ("edited", "e.py"), ("edited", "n.py"), ("deleted", "d.py"), ("read", "e.py")]
        + [("read", f"r{i:02}.py") for i in range(27)]
        + [("searched", f"q{i}") for i in range(17)]
    )
    brief = memory.brief()
    assert brief is not None
    sections = brief.split("\n\n")
    assert sections[1].splitlines() == ["Changed:", "- n.py", "- e.py"]
    assert sections[2].splitlines() == ["Deleted:", "- d.py"]
    read = sections[3].splitlines()
    assert read[0] == "Read:" and "- e.py" not in read and read[-1] == "- … 2 more" and len(read) == 27
    assert len(sections[4].splitlines()) == 1 + 15
    prose = [line for line in sections[0].splitlines()]
    assert not any(line.startswith("- ") for line in prose)


def test_observe_forms_and_errors() -> None:
    memory = cf.WorkingMemory()
    memory.observe({"kind": "searched", "query": " budget "})
    memory.observe({"kind": "edited", "path": "x.py"})
    assert memory.snapshot.searched == ("budget",) and memory.snapshot.edited == ("x.py",)
    with pytest.raises(ValueError, match="unknown observation kind"):
        memory.observe("opened", "x.py")  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match=r"^observation path: expected str, got int$"):
        memory.observe("read", 3)  # type: ignore[arg-type]
    assert memory.size == 2
    memory.set_task("  fix\n\tthe   store ")
    assert memory.snapshot.task == "fix the store"
    assert memory.brief(observations=50) is not None and memory.brief(observations=3) is None


def test_memory_arguments_are_checked_by_name() -> None:
    # Each raised a bare TypeError or KeyError naming nothing, or was taken silently.
    memory = cf.WorkingMemory()
    for path in ("src/a.py", "src/b.py", "src/c.py"):
        memory.observe("read", path)
    for observations in ("12", 2.5, float("nan"), True):
        with pytest.raises(cf.ArgumentError, match="observations must be an int"):
            memory.brief(observations)  # type: ignore[arg-type]
    for min_files in ("3", None, 2.5):
        with pytest.raises(cf.ArgumentError, match="min_files must be an int"):
            cf.consolidate(memory.snapshot, min_files=min_files)  # type: ignore[arg-type]
    # A kind is read by the text it holds: a str that says it equals anything is no kind.
    with pytest.raises(cf.ArgumentError, match="unknown observation kind 'zzz'"):
        memory.observe(LyingStr("zzz"), "a.py")  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentError, match="unknown observation kind 'zzz'"):
        memory.observe({"kind": LyingStr("zzz"), "path": "a.py"})
    assert memory.size == 3
    memory.observe(LyingStr("searched"), "budget")
    assert memory.snapshot.searched == ("budget",)


def test_consolidate_rules(backend: str) -> None:
    snapshot = {
        "task": "fix   the\nstore",
        "created": ["C:\\code\\repo\\src\\store\\new.ts"],
        "edited": ["/c/code/repo/src/store/run.ts", "src/store/run.ts"],
        "deleted": ["src/store/old.ts"],
        "read": ["src/store/index.ts", "src/store/index.ts", "src/api/x.ts", "node_modules/x/y.js", "yarn.lock"],
    }
    memory = cf.consolidate(snapshot, at=date(2026, 11, 30), root=ROOT)
    assert memory is not None and memory.key == "codemap:src/store"
    lines = memory.content.split("\n")
    assert "2026-11-30" in lines[0] and '"fix the store"' in lines[0]
    assert lines[2:] == [
        "- src/store/new.ts (changed)",
        "- src/store/run.ts (changed)",
        "- src/store/index.ts (read 2×)",
        "- src/api/x.ts",
        "- src/store/old.ts (deleted)",
    ]
    # the newer rule: fewer than min_files distinct files -> None, changed or not
    assert cf.consolidate({"edited": ["a/b.ts"]}) is None
    assert cf.consolidate({"edited": ["a/b.ts"]}, min_files=1) is not None
    assert cf.consolidate({"read": ["/abs/x.ts", "../y.ts", "dist/z.js"]}) is None


def test_area_choice_and_caps(backend: str) -> None:
    deep = [f"packages/memory/src/working/f{i}.ts" for i in range(5)] + ["api/x.ts"]
    assert cf.consolidate({"read": deep}).key == "codemap:packages/memory/src/working"  # type: ignore[union-attr]
    split = ["a/b/c.ts", "a/b/d.ts", "x/y/z.ts", "x/y/w.ts", "q.ts"]
    assert cf.consolidate({"read": split}).key == "codemap:a/b"  # type: ignore[union-attr]
    assert cf.consolidate({"read": ["a.ts", "b.ts", "c.ts"]}).key == "codemap:(root)"  # type: ignore[union-attr]
    many = cf.consolidate({"edited": [f"src/f{i:02}.ts" for i in range(15)], "deleted": ["src/gone.ts"]})
    assert many is not None
    lines = many.content.split("\n")
    assert len([line for line in lines if line.endswith("(changed)")]) == 12
    assert lines[-2:] == ["- src/gone.ts (deleted)", "(+3 more file(s) touched)"]
    assert cf.consolidated_key("x" * 300) == "codemap:" + "x" * 247
    assert cf.consolidated_key("a" * 246 + "😀") == "codemap:" + "a" * 246  # never splits a pair


def test_at_is_utc() -> None:
    late = datetime(2026, 11, 30, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    memory = cf.consolidate({"read": ["a/b.ts", "a/c.ts", "a/d.ts"]}, at=late)
    assert memory is not None and "2026-12-01" in memory.content
    naive = cf.consolidate({"read": ["a/b.ts", "a/c.ts", "a/d.ts"]}, at=datetime(2026, 1, 2, 23, 59))
    assert naive is not None and "2026-01-02" in naive.content
    with pytest.raises(cf.ArgumentError, match=r"^at must be a datetime, a date or None, got str$"):
        cf.consolidate({"read": ["a/b.ts", "a/c.ts", "a/d.ts"]}, at="2026-01-01")  # type: ignore[arg-type]


def test_merge_keeps_earlier_files_and_drops_deleted(backend: str) -> None:
    prior = "Code map of `src`.\nStart here:\n- src/a.ts (changed)\n- src/b.ts (read 3×)\n- src/c.ts"
    nxt = "New header.\nStart:\n- src/d.ts (changed)\n- src/c.ts (deleted)"
    merged = cf.merge_consolidated("codemap:src", prior, nxt)
    assert merged.split("\n") == [
        "New header.",
        "Start:",
        "- src/d.ts (changed)",
        "- src/a.ts (changed earlier)",
        "- src/b.ts (read 3×)",
    ]
    assert cf.merge_consolidated("other:x", prior, nxt) == nxt
    assert cf.merge_consolidated("codemap:src", "  ", nxt).split("\n")[2:] == ["- src/d.ts (changed)"]
    assert cf.consolidated_files(merged) == ["src/d.ts", "src/a.ts", "src/b.ts"]
    assert (
        cf.without_consolidated_files(merged, ["SRC\\A.ts", "./src//b.ts"])
        == "New header.\nStart:\n- src/d.ts (changed)"
    )
    assert cf.without_consolidated_files(merged, ["src/a.ts", "src/b.ts", "src/d.ts"]) is None
    assert cf.consolidated_files("- a.ts\r\n- b.ts") == ["b.ts"]  # `.` is not \r, as in JavaScript


def test_recall(backend: str) -> None:
    assert cf.area_of_path("api/src/run.ts") == "api/src"
    assert cf.area_of_path("package.json") == "(root)"
    assert cf.area_of_path("./api/src/") == "api/src"
    assert cf.area_of_path("  ") == ""
    text = "see https://x.io/a/b.ts and /abs/c.ts, ../d.ts, e.g, (src/runStore/run.ts). Also package.json"
    assert cf.areas_of_paths_in(text) == ["src/runStore", "(root)"]
    areas = ["brain-embedded/src/runStore", "api/src", "app/components/ui", "src/run-store/deep/more"]
    assert cf.areas_named_in("fix the run store", areas) == ["src/run-store/deep/more", "brain-embedded/src/runStore"]
    assert cf.areas_named_in("the RunStore bug", areas)[-1] == "brain-embedded/src/runStore"
    assert cf.areas_named_in("fix src and ui", areas) == []  # generic and short names never match
    facts = [{"key": "codemap:api"}, {"key": "codemap:api/src/deep"}, {"key": "other"}, {"key": "codemap:web"}]
    assert cf.consolidated_facts_for(facts, ["api/src"]) == [facts[1], facts[0]]
    assert cf.consolidated_facts_for(facts, []) == []
    assert cf.consolidated_area("codemap:a/b") == "a/b" and cf.consolidated_area("x") is None


def test_facts_for_an_area_are_at_most_six_most_specific_first() -> None:
    # SPEC §6: consolidated_facts_for(facts, areas, max=6).
    nested = [{"key": "codemap:" + "/".join("abcdefgh"[: depth + 1])} for depth in range(8)]
    assert cf.MAX_RECALLED_MAPS == 6
    assert cf.consolidated_facts_for(nested, ["a/b/c/d/e/f/g/h"]) == nested[:1:-1]
    assert cf.consolidated_facts_for(nested[::-1], ["a/b/c/d/e/f/g/h"], max=8) == nested[::-1]


def test_paths(backend: str) -> None:
    assert cf.canonical_path(" .\\a\\\\b/./c ") == "a/b/c"
    assert cf.canonical_path("/c/Code/x") == "c:/Code/x"
    assert cf.repo_path("/C/CODE/repo/src/x.ts", ROOT) == "src/x.ts"
    assert cf.repo_path("D:/other/x.ts", ROOT) is None
    assert cf.repo_path("/abs/x.ts") is None and cf.repo_path("/abs/x.ts", "/") is None
    assert cf.repo_path("src/.git/x") is None and cf.repo_path("a/pnpm-lock.yaml") is None
    assert cf.repo_path("a/b\ud800.ts") == "a/b\ud800.ts"  # a lone surrogate survives
    with pytest.raises(cf.ArgumentTypeError, match=r"^path: expected str, got int$"):
        cf.repo_path(3)  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match=r"items\[1\]: expected str"):
        cf.rank_by_count(["a", 1])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("path", "root", "expected"),
    [
        # A drive root compares case-insensitively as any drive folder does (it compared
        # case-sensitively once its slash was stripped to "C:").
        ("c:\\src\\a.ts", "C:\\", "src/a.ts"),
        ("C:/src/a.ts", "c:/", "src/a.ts"),
        ("c:/src/a.ts", "C:", "src/a.ts"),
        # Case folded as Python's str.lower folds it, on both backends: the final sigma, and
        # a letter newer Unicode tables case but the interpreter's may not.
        ("c:/ΑΣ/x", "C:/ας", "x"),
        ("C:/ας/x", "C:/ΑΣ", "x"),
        ("C:/ΑΣ/x", "c:/ασ", "x" if "ΑΣ".lower() == "ασ" else None),
        ("C:/\ua7cb/x", "C:/\u0264", "x" if "\ua7cb".lower() == "\u0264" else None),
        # Cut where the root's folder ends, not at the root's length: U+0130 lowers to two
        # characters (it cut an absolute "/src/a.ts", or lost the "s").
        ("c:/i\u0307/src/a.ts", "C:/\u0130", "src/a.ts"),
        ("C:/\u0130/src/a.ts", "c:/i\u0307", "src/a.ts"),
        ("C:/\u0130x/src/a.ts", "c:/i\u0307", None),
    ],
)
def test_drive_paths_fold_case_as_python_does(backend: str, path: str, root: str, expected: str | None) -> None:
    assert cf.repo_path(path, root) == expected


PATHY = st.lists(
    st.sampled_from(
        [*"ab./\\ C:c.-_\ufeff\x1cé😀ΣσςİI\ua7cb", "i\u0307", "\ud800", "..", "node_modules", "dist", "yarn.lock"]
    ),
    max_size=12,
).map("".join)


@pytest.mark.slow
@examples(5_000)
@given(PATHY, st.one_of(st.none(), PATHY))
def test_paths_native_equals_reference(path: str, root: str | None) -> None:
    native = native_required()
    assert native.canonical_path(path) == reference.canonical_path(path)
    assert native.repo_path(path, root) == reference.repo_path(path, root)


# Long paths sharing prefixes, so the order is decided in the first and second eight-byte
# words and in the tail.
LONG_PATHS = [f"src/{d}/file_{n}.ts" for d in ("pkg1", "pkg10", "pkgé") for n in (1, 10, 100, 1000)]


@pytest.mark.slow
@examples(3_000)
@given(st.lists(st.one_of(PATHY, st.sampled_from(["a", "B", "b", "é", "_x", "a1", *LONG_PATHS])), max_size=60))
def test_rank_native_equals_reference(items: list[str]) -> None:
    native = native_required()
    items += ["".join(list(s)) for s in items]  # equal strings as other objects (two characters on), of every kind
    assert native.rank_by_count(items) == reference.rank_by_count(items)


@pytest.mark.parametrize("enabled", [True, False])
def test_rank_leaves_the_collector_as_it_found_it(enabled: bool) -> None:
    """The native ranking pauses the cyclic collector while it builds its results: the
    collector is on again after it (off if it was off), and at most the one collection its
    results leave due has run (at the first allocation after it). From Python 3.12 a
    collection due while C code allocates waits for bytecode anyway: there the count
    cannot tell the pause, and only the restored state is checked."""
    native = native_required()
    items = [f"src/file_{i % 3_000}.ts" for i in range(20_000)]
    collections: list[str] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        collections.append(phase)

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    gc.collect()
    gc.callbacks.append(seen)
    try:
        ranked = native.rank_by_count(items)
        ran = collections.count("start")
        assert gc.isenabled() is enabled
        assert ran <= 1 if enabled else ran == 0
        with pytest.raises(cf.ArgumentTypeError, match=rf"^items\[{len(items)}\]: expected str, got int$"):
            native.rank_by_count([*items, 3])
        assert gc.isenabled() is enabled
    finally:
        gc.callbacks.remove(seen)
        (gc.enable if was else gc.disable)()
    assert ranked == reference.rank_by_count(items)


@examples(500)
@given(
    st.lists(st.tuples(st.sampled_from(["read", "created", "edited", "deleted"]), PATHY), max_size=40),
    st.lists(st.tuples(st.sampled_from(["read", "edited", "deleted"]), PATHY), max_size=20),
)
@example(first=[("read", "a")], second=[("read", "C"), ("read", "c")])
def test_round_trips(first: list[tuple[str, str]], second: list[tuple[str, str]]) -> None:
    a = cf.consolidate(memory_with(first).snapshot, at=date(2026, 1, 1), root=ROOT, min_files=1)
    b = cf.consolidate(memory_with(second).snapshot, at=date(2026, 1, 2), root=ROOT, min_files=1)
    assume(a is not None and b is not None)
    merged = cf.merge_consolidated(b.key, a.content if a.key == b.key else None, b.content)
    files = cf.consolidated_files(merged)
    deleted_by_b = {line[2:-10] for line in b.content.split("\n") if line.endswith(" (deleted)")}
    assert not deleted_by_b & set(files)
    assert len(files) == len(set(files)) <= 12
    assert all(f in files for f in cf.consolidated_files(b.content)[:12])
    if files:
        assert cf.without_consolidated_files(merged, files) is None
        rest = cf.without_consolidated_files(merged, files[:1])
        # Paths are compared canonically and case-insensitively: `C` takes `c` with it.
        same = cf.canonical_path(files[0]).lower()
        left = [f for f in files[1:] if cf.canonical_path(f).lower() != same]
        assert (None if rest is None else cf.consolidated_files(rest)) == (left or None)


def test_snapshot_is_a_copy(backend: str) -> None:
    memory = memory_with([("read", "a.ts")])
    snap = memory.snapshot
    memory.observe("read", "b.ts")
    assert snap.read == ("a.ts",) and isinstance(snap, cf.WorkingMemorySnapshot)
    assert cf.consolidate(snap) is None


def _facts_like(keys: list[str]) -> list[Any]:
    class Fact:
        def __init__(self, key: str) -> None:
            self.key = key

    return [Fact(k) for k in keys]


def test_facts_may_be_objects(backend: str) -> None:
    facts = _facts_like(["codemap:a/b", "codemap:a"])
    assert cf.consolidated_facts_for(facts, ["a/b/c"]) == facts


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda text: cf.without_consolidated_files("- src/a.ts", text), "paths"),
        (lambda text: cf.areas_named_in("fix the gateway", text), "areas"),
        (lambda text: cf.consolidated_facts_for([{"key": "codemap:src/gateway"}], text), "areas"),
        (lambda text: cf.rank_by_count(text), "items"),
    ],
)
def test_a_bare_str_for_many_paths_is_refused(backend: str, call: Any, name: str) -> None:
    # A str iterates as its characters: each call gave a silent nothing (or ranked letters).
    for text in ("src/gateway", b"src/gateway"):
        with pytest.raises(cf.ArgumentTypeError, match=f"{name} must be an iterable of"):
            call(text)


def test_a_negative_count_of_maps_is_refused() -> None:
    facts = [{"key": "codemap:src"}, {"key": "codemap:src/gateway"}]
    with pytest.raises(cf.ArgumentError, match="max must be at least 0, got -1"):
        cf.consolidated_facts_for(facts, ["src/gateway"], max=-1)
    assert cf.consolidated_facts_for(facts, ["src/gateway"], max=0) == []


@pytest.mark.parametrize("brk", ["\n", "\r\n", "\r", "\u2028", "\u2029"])
def test_a_path_holding_a_line_break_is_never_mapped(backend: str, brk: str) -> None:
    # A map is one entry a line (SPEC §11): such a path forged an entry of its own and
    # took the real one's note. U+2028 and U+2029 end a line for the map's readers too
    # (SPEC §12: `.` matches neither): a path holding one could not be listed, invalidated
    # or merged.
    memory = cf.WorkingMemory()
    for path in ("src/app/a.py", "src/app/b.py", "src/app/c.py"):
        memory.observe("read", path)
    memory.observe("edited", f"src/app/x.py{brk}- src/app/secrets.py (changed)")
    mapped = cf.consolidate(memory.snapshot)
    assert mapped is not None
    assert cf.consolidated_files(mapped.content) == ["src/app/a.py", "src/app/b.py", "src/app/c.py"]
    assert "secrets" not in mapped.content


def test_a_path_that_reads_back_as_a_note_is_never_mapped(backend: str) -> None:
    # `- docs/c (v2)` reads back as docs/c with the note "v2", and `- docs/notes (deleted)`
    # as a deletion: a file read once (written without a note of its own) came back under
    # another name, or took a listed file out of the map at the next merge (helper-84).
    read = ["docs/notes (deleted)", "docs/a.md", "docs/b.md", "docs/c (v2)", "docs/d (1).md", "docs/e (f (g))"]
    mapped = cf.consolidate({"read": read})
    assert mapped is not None
    assert cf.consolidated_files(mapped.content) == ["docs/a.md", "docs/b.md", "docs/d (1).md", "docs/e (f (g))"]
    assert "(v2)" not in mapped.content and "notes" not in mapped.content


def test_texts_and_lists_of_the_wrong_type_are_named(backend: str) -> None:
    with pytest.raises(cf.ArgumentTypeError, match="items must be an iterable of str, got NoneType"):
        cf.rank_by_count(None)  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match="text: expected str, got NoneType"):
        cf.areas_of_paths_in(None)  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match="text: expected str, got int"):
        cf.areas_named_in(5, ["src"])  # type: ignore[arg-type]
    with pytest.raises(cf.ArgumentTypeError, match="request: expected str, got NoneType"):
        cf.SQLiteCodeMapStore().recall(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("created", "words"),
    [
        ("src/app.py", "must be an iterable of paths, not a str"),
        ("", "must be an iterable of paths, not a str"),
        (5, "must be an iterable of paths, got int"),
        (0, "must be an iterable of paths, got int"),  # falsy, it was taken as no list
        (False, "must be an iterable of paths, got bool"),
    ],
)
def test_a_snapshot_list_that_is_one_str_or_no_iterable_is_named(backend: str, created: Any, words: str) -> None:
    # One path given as a str would be read as its characters, each a "file".
    snapshot = {"task": "fix", "created": created, "edited": [], "deleted": [], "read": [], "searched": []}
    with pytest.raises(cf.ArgumentTypeError, match=f"^snapshot created {words}$"):
        cf.consolidate(snapshot, min_files=1)
    with pytest.raises(cf.ArgumentTypeError, match=f"^snapshot created {words}$"):
        cf.consolidate(SimpleNamespace(**snapshot), min_files=1)


def _seed_areas_of_paths_in(text: str) -> list[str]:
    """``areas_of_paths_in`` with the seed's own regular expressions (quadratic on a long
    run of letters or a long token in a backtracking engine): the oracle for short texts."""
    from contextfold._js import JS_SPACE_CHARS
    from contextfold.codemap import _PATH_TOKEN

    line = "[^\n\r\u2028\u2029]"
    out: list[str] = []
    for raw in _PATH_TOKEN.findall(re.sub(f"[a-zA-Z][a-zA-Z0-9+.-]*://[^{JS_SPACE_CHARS}]+", " ", text)):
        token = re.sub(r"^[(]+|[.)]+\Z", "", raw)
        if not token or token[0] in "\\/" or ".." in re.split(r"[\\/]", token):
            continue
        if not ("/" in token or "\\" in token or re.match(f"[^.]{{2,}}{line}*\\.[A-Za-z][A-Za-z0-9]{{0,7}}\\Z", token)):
            continue
        area = cf.area_of_path(token)
        if area and area not in out:
            out.append(area)
        if len(out) >= 24:
            break
    return out


_URL_PIECES = st.sampled_from(
    [
        *("a", "Z", "1", "+", ".", "-", ":", "/", "://", "http://", " ", "\t", "\u00a0", "(", ")"),
        *("\u2028", "\ufeff", "\x85", "\x1c", "é", "\u212a", "\u3000"),  # JavaScript's spaces, and not
    ]
)
_PATH_PIECES = st.sampled_from(["src/", "a.py", ".ts", "..", "\\", "@", "_", "x", "é"])


@given(st.lists(st.one_of(_URL_PIECES, _PATH_PIECES), max_size=40).map("".join))
@example("see http://a.b/c and src/x.py")
@example("1+a.b-://x ://y 9://z q://")
@example("((src/a.py).)")
def test_paths_in_a_text_are_found_as_the_seeds_expressions_find_them(text: str) -> None:
    assert cf.areas_of_paths_in(text) == _seed_areas_of_paths_in(text)


@pytest.mark.parametrize(
    "filler", ["a" * 1_000_000, ")" * 1_000_000 + "a", "." * 1_000_000 + "a", "9" * 1_000_000 + "://x"]
)
def test_a_long_run_in_a_request_is_read_in_linear_time(filler: str) -> None:
    """A pasted digest or blob in request text (``recall``'s input): the seed's expressions
    rescan a run from each of its characters, hours for a million; read once here. No
    time is asserted: the quadratic version simply would not finish the suite."""
    assert cf.areas_of_paths_in(f"{filler} see src/app/main.py") == ["src/app"]
    assert cf.SQLiteCodeMapStore().recall(f"why {filler}") == []


_TRIM_PIECES = st.sampled_from([" ", "\t", "\n", "\u00a0", "\u2003", "\ufeff", "\x1c", "\x85", "a", "/", "./", "b.py"])


def _seed_trim(text: str) -> str:
    from contextfold._js import JS_SPACE_CHARS

    return re.sub(f"^[{JS_SPACE_CHARS}]+|[{JS_SPACE_CHARS}]+\\Z", "", text)


def _seed_area_of_path(path: str) -> str:
    """``area_of_path`` with the seed's expressions (quadratic on a long inner run)."""
    norm = re.sub(r"/+\Z", "", re.sub(r"^(\./)+", "", _seed_trim(path).replace("\\", "/")))
    if not norm or not re.search(r"\.[A-Za-z][A-Za-z0-9]{0,7}\Z", norm):
        return norm
    slash = norm.rfind("/")
    return norm[:slash] if slash > 0 else "(root)"


@given(st.lists(_TRIM_PIECES, max_size=30).map("".join))
def test_trims_and_areas_read_as_the_seeds_expressions_read_them(text: str) -> None:
    """``String#trim`` and a path's area, as the seed's ``^\\s+|\\s+$`` and ``/+$`` read
    them (JavaScript's spaces: U+FEFF in, U+001C and U+0085 out)."""
    from contextfold._js import js_trim

    assert js_trim(text) == _seed_trim(text)
    assert cf.area_of_path(text) == _seed_area_of_path(text)


@pytest.mark.parametrize("run", [" " * 1_000_000, "/" * 1_000_000])
def test_a_long_run_inside_a_path_or_an_observation_is_read_in_linear_time(run: str) -> None:
    """``\\s+$`` and ``/+$`` rescan a run inside the text from each of its characters:
    hours for a million. No time is asserted: the quadratic version would not finish."""
    from contextfold._js import js_trim

    assert js_trim(f" a{run}b ") == f"a{run}b"
    assert cf.area_of_path(f"src{run}x/a.py") == f"src{run}x"
    memory = cf.WorkingMemory()
    memory.observe("searched", f" a{run}b ")
    assert memory.snapshot.searched == (f"a{run}b",)


def test_a_path_utf8_cannot_hold_is_left_out_so_the_map_can_be_stored(backend: str) -> None:
    """A file name ``os.listdir`` decoded with surrogate escapes (not UTF-8 on disk), or a
    task holding a lone surrogate, made the whole area's map one every store refuses."""
    import os

    odd = os.fsdecode(b"src/caf\xe9.py")
    memory = cf.WorkingMemory()
    memory.set_task("fix caf\udce9")
    for path in ("src/a.py", "src/b.py", "src/c.py", odd):
        memory.observe("read", path)
    made = cf.consolidate(memory.snapshot)
    assert made is not None and odd not in made.content and "fix caf\ufffd" in made.content
    store = cf.SQLiteCodeMapStore()
    store.write(made)
    assert [m.key for m in store.live()] == [made.key]


@pytest.mark.parametrize("snapshot", [None, ["src/a.py", "src/b.py", "src/c.py"], 7])
def test_a_snapshot_that_is_none_is_refused(backend: str, snapshot: Any) -> None:
    """Neither a snapshot, a mapping nor an object with its fields: it read as a run that
    touched nothing (None, no map, no error)."""
    with pytest.raises(cf.ArgumentTypeError, match="snapshot must be a WorkingMemorySnapshot"):
        cf.consolidate(snapshot)


def test_a_blank_path_or_query_is_counted_not_recorded() -> None:
    # SPEC §6: a blank path or query is counted but not recorded.
    memory = memory_with([("read", "a.py"), ("searched", "budget")])
    before = memory.snapshot
    for kind, blank in (("read", ""), ("edited", " \t"), ("searched", "  "), ("searched", "\ufeff\n")):
        memory.observe(kind, blank)  # type: ignore[arg-type]
    memory.observe({"kind": "created", "path": " "})
    memory.observe({"kind": "searched", "query": ""})
    assert memory.size == 2 + 6
    assert memory.snapshot == before


def test_no_brief_when_nothing_was_recorded() -> None:
    # SPEC §6: brief() is None when nothing is recorded, whatever the count of observations.
    memory = memory_with([("read", " ")] * 6 + [("searched", "")] * 6)
    assert memory.size == 12 and memory.brief() is None
    memory.observe("read", "a.py")  # one recorded: now there is something to say
    assert memory.brief() is not None


def test_an_item_holding_a_line_break_writes_no_lines_of_its_own_in_the_brief() -> None:
    # SPEC §6: the brief's list lines are `- <item>`. A file named with a line break (in
    # a hostile checkout) wrote a fake entry and a section of its own; it is left out, as
    # consolidate leaves it out of a map, and still counted.
    for breaking in ("\n", "\r\n", "\u2028", "\u2029"):
        evil = f"evil{breaking}- src/secret.ts (99×){breaking}{breaking}Changed:{breaking}- fake"
        memory = memory_with([("read", "a.py")] * 9 + [("read", evil), ("searched", f"q{breaking}x")])
        brief = memory.brief()
        assert brief is not None and memory.size == 11
        assert brief.splitlines()[-2:] == ["Read:", "- a.py (9×)"], brief
        assert memory.snapshot.read[-1] == evil  # recorded as observed


def test_deleted_lines_follow_the_listed_files_uncapped(backend: str) -> None:
    # SPEC §6: at most 12 changed/read entries, then (deleted) lines uncapped, then the overflow line.
    edited = [f"src/e{i:02}.ts" for i in range(15)]
    deleted = [f"src/d{i:02}.ts" for i in range(20)]
    made = cf.consolidate({"edited": edited, "deleted": deleted})
    assert made is not None
    lines = made.content.split("\n")[2:]
    assert lines == [
        *(f"- {p} (changed)" for p in edited[:12]),
        *(f"- {p} (deleted)" for p in deleted),
        "(+3 more file(s) touched)",
    ]


@pytest.mark.parametrize(
    ("path", "near"),
    [
        ("web/.next/server.js", "web/next/server.js"),
        ("a/.turbo/cache.json", "a/turbo/cache.json"),
        ("coverage/lcov.info", "coverages/lcov.info"),
        ("x/.builderforce/y.ts", "x/builderforce/y.ts"),
        ("package-lock.json", "package.json"),
        ("a/bun.lockb", "a/bun.ts"),
    ],
)
def test_build_output_and_lockfiles_are_rejected(backend: str, path: str, near: str) -> None:
    # SPEC §6: .next, .turbo, coverage, .builderforce segments and lockfiles are rejected.
    assert cf.repo_path(path) is None
    assert cf.repo_path(near) == near  # a path that only looks like one is kept


@pytest.mark.parametrize("root", ["", "./", "/"])
def test_a_root_that_canonicalises_to_nothing_is_no_root(backend: str, root: str) -> None:
    # SPEC §6: a root that canonicalises to "" or "/" means no root.
    assert cf.repo_path("/abs/src/x.ts", root) is None  # absolute, and no root to be under
    assert cf.repo_path("src/x.ts", root) == cf.repo_path("src/x.ts") == "src/x.ts"
    made = cf.consolidate({"read": ["/abs/a.ts", "/abs/b.ts", "/abs/c.ts", "src/d.ts"]}, root=root, min_files=1)
    assert made is not None and cf.consolidated_files(made.content) == ["src/d.ts"]


def test_size_and_snapshot_are_read_only() -> None:
    # SPEC §6: size and snapshot are read-only properties.
    memory = memory_with([("read", "a.py")])
    with pytest.raises(AttributeError):
        memory.size = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        memory.snapshot = cf.WorkingMemory().snapshot  # type: ignore[misc]
    assert memory.size == 1 and memory.snapshot.read == ("a.py",)


def test_an_overflow_line_needs_ascii_digits(backend: str) -> None:
    # SPEC §12: \d is ASCII only: "(+٣ more file(s) touched)" is no overflow line, so it stays a header line.
    nxt = "Header.\n- src/a.ts\n(+3 more file(s) touched)"
    assert cf.merge_consolidated("codemap:src", None, nxt).split("\n") == ["Header.", "- src/a.ts"]
    arabic = nxt.replace("3", "\u0663")
    assert cf.merge_consolidated("codemap:src", None, arabic).split("\n") == [
        "Header.",
        "(+\u0663 more file(s) touched)",
        "- src/a.ts",
    ]


def test_the_task_cut_counts_utf16_units_and_never_splits_a_pair(backend: str) -> None:
    # SPEC §12: the 200-character task cut is in UTF-16 units; a cut inside a pair falls before it.
    files = ["a/b.ts", "a/c.ts", "a/d.ts"]

    def asked(task: str) -> str:
        made = cf.consolidate({"task": task, "read": files})
        assert made is not None
        first = made.content.split("\n")[0]
        return first[first.index('asked: "') + 8 : first.rindex('"')]

    assert asked("a" * 199 + "😀b") == "a" * 199  # the pair would straddle unit 200
    assert asked("😀" * 100 + "c") == "😀" * 100  # 200 units: an astral character counts 2
    assert asked("a" * 200 + "b") == "a" * 200
