"""The type checker's ratchet: mypy's error count on ``rlsched`` and the ``type: ignore`` count may only fall.

    python scripts/mypy_ratchet.py            # `make typecheck` (CI): fails when either count rose
    python scripts/mypy_ratchet.py --update   # after a change that lowered them: write the new, lower baseline

mypy reads its settings from pyproject.toml (``[tool.mypy]``; mypy is pinned in the ``dev`` extra, so a
count means the same on every machine). The baseline is ``tests/data/mypy_ratchet.json``; ``--update``
refuses to raise it: a new error is fixed, not recorded.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "data" / "mypy_ratchet.json"
IGNORE = re.compile(r"#\s*type:\s*ignore")
FOUND = re.compile(r"^Found (\d+) errors? in \d+ files?", re.MULTILINE)


def mypy_errors(output: str) -> int:
    """The error count of a mypy run's output ("Found N errors in M files", or 0 on "Success")."""
    found = FOUND.search(output)
    if found:
        return int(found.group(1))
    if re.search(r"^Success: no issues found", output, re.MULTILINE):
        return 0
    raise ValueError(f"not a mypy summary: {output[-500:]!r}")


def type_ignores(package: Path) -> int:
    """``# type: ignore`` comments in the package's source."""
    return sum(len(IGNORE.findall(p.read_text(encoding="utf-8"))) for p in sorted(package.rglob("*.py")))


def compare(now: dict[str, int], baseline: dict[str, int]) -> list[str]:
    """One line per count above its baseline (empty: the ratchet holds)."""
    return [f"{key}: {now[key]} > {baseline[key]} (the baseline in {BASELINE.relative_to(ROOT)}); fix the new "
            "ones rather than raise it" for key in baseline if now[key] > baseline[key]]


def measure() -> tuple[dict[str, int], str]:
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False)
    output = run.stdout + run.stderr
    return {"errors": mypy_errors(output), "type_ignores": type_ignores(ROOT / "rlsched")}, output


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--update", action="store_true", help="write the counts as the new baseline (only if lower)")
    args = p.parse_args(argv)
    baseline = json.loads(BASELINE.read_text())
    now, output = measure()
    rose = compare(now, baseline)
    if rose:
        print(output, end="")
        print("mypy ratchet: " + "; ".join(rose), file=sys.stderr)
        return 1
    print(f"mypy ratchet holds: {now['errors']} errors (baseline {baseline['errors']}), {now['type_ignores']} "
          f"`type: ignore` (baseline {baseline['type_ignores']})")
    if args.update and now != baseline:
        BASELINE.write_text(json.dumps(now, indent=1) + "\n")
        print(f"wrote the lower baseline to {BASELINE.relative_to(ROOT)}")
    elif now != baseline:
        print("  lower than the baseline: run `python scripts/mypy_ratchet.py --update` to keep the gain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
