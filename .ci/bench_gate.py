"""The benchmark gate: fails when a ratio measured by ``benches/gate.py`` falls below its
floor in ``benches/floors.toml``.

    python .ci/bench_gate.py bench.json [benches/floors.toml]

Every floor must be measured (a floor marked ``optional`` may be absent from the run, as
the C-like floor helper is from builds without the ``bench-floor`` feature), and every
measured ratio must have a floor. Exit status: 0 when all hold, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tomllib


def check(measured: dict[str, dict[str, float]], floors: dict[str, dict[str, object]]) -> list[str]:
    """One line per ratio; a line starting with ``FAIL`` fails the gate."""
    lines = []
    for name, floor in floors.items():
        minimum = float(floor["floor"])  # type: ignore[arg-type]
        if name not in measured:
            verdict = "skip" if floor.get("optional") else "FAIL"
            lines.append(f"{verdict}  {'—':>8}  floor {minimum:6.2f}x  {name}: not measured in this run")
            continue
        ratio = measured[name]["ratio"]
        verdict = "ok  " if ratio >= minimum else "FAIL"
        lines.append(f"{verdict}  {ratio:7.2f}x  floor {minimum:6.2f}x  {name} (guards {floor['guards']})")
    lines += [f"FAIL  {measured[n]['ratio']:7.2f}x  {'no floor':>14}  {n}" for n in measured if n not in floors]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__, file=sys.stderr)
        return 2
    measured = json.loads(Path(argv[0]).read_text(encoding="utf-8"))["ratios"]
    floors_path = Path(argv[1]) if len(argv) == 2 else Path(__file__).resolve().parents[1] / "benches" / "floors.toml"
    floors = tomllib.loads(floors_path.read_text(encoding="utf-8"))
    lines = check(measured, floors)
    print("\n".join(lines))
    failed = sum(line.startswith("FAIL") for line in lines)
    print(f"benchmark gate: {len(lines) - failed} held, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
