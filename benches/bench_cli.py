"""``contextfold pack`` over 40 copies of the corpus JSONL (about 81 MB) at an 8,000-token
budget, as a user runs it (a new interpreter each time, its start included), beside the
five-line loop a user would otherwise write: ``json.loads`` + ``pack_handoff`` +
``json.dumps`` a line. Both outputs are checked equal as JSON before timing.

    pytest benches/bench_cli.py --benchmark-enable --benchmark-group-by=group
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .bench_request import bodies

BUDGET = 8_000
COPIES = 40

LOOP = """
import json, sys
from contextfold import pack_handoff
with open(sys.argv[1], "rb") as lines, open(sys.argv[2], "w") as out:
    for line in lines:
        row = json.loads(line)
        pack = pack_handoff(row["messages"], target_context_tokens=int(sys.argv[3]))
        out.write(json.dumps({**row, "messages": pack.messages}) + "\\n")
"""


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "corpus-x40.jsonl"
    path.write_bytes(b"".join(body + b"\n" for body in bodies()) * COPIES)
    return path


def cli(jsonl: Path, out: Path) -> list[str]:
    pack = ["pack", str(jsonl), "--context-tokens", str(BUDGET), "-o", str(out)]
    return [sys.executable, "-c", "import sys; from contextfold.cli import main; sys.exit(main())", *pack]


def loop(jsonl: Path, out: Path) -> list[str]:
    return [sys.executable, "-c", LOOP, str(jsonl), str(out), str(BUDGET)]


@pytest.mark.parametrize("command", [cli, loop], ids=["contextfold pack", "json.loads + pack_handoff + json.dumps"])
def bench_pack_81_mb_of_jsonl(benchmark: Any, command: Any, jsonl: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    subprocess.run(command(jsonl, out), check=True, capture_output=True)
    check = tmp_path / "check.jsonl"
    subprocess.run(loop(jsonl, check), check=True)
    packed, expected = out.read_bytes().splitlines(), check.read_bytes().splitlines()
    assert len(packed) == len(bodies()) * COPIES
    assert all(json.loads(a) == json.loads(b) for a, b in zip(packed, expected, strict=True))
    benchmark.group = f"{COPIES} copies of the corpus JSONL, {len(bodies()) * COPIES:,} lines"
    benchmark.pedantic(lambda: subprocess.run(command(jsonl, out), check=True, capture_output=True), rounds=7)
