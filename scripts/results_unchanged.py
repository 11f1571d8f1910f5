"""Re-run cells of a committed results folder and compare them with it, number for number.

A change that must leave behaviour unchanged (a refactor of the serving core) is checked here rather than by
re-running a whole ``make results``/``make results-replicas`` target (an hour of CPU): pick the policies and
loads a change can reach, re-run those cells on the committed seeds, and every summary number must come out
identical (``json_safe`` of the aggregated cell, as ``results.json`` stores it).

    python scripts/results_unchanged.py results/replicas/qwen-image-hetero --policies '*@central' --workers 2
    python scripts/results_unchanged.py results/default --loads 1.0,1.5 --scenarios default,video-mix

Exits 1 when any re-run cell differs (it names the cell and the first numbers that moved), 0 when all match.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

from rlsched.evaluation import aggregate, run_grid
from rlsched.sim.metrics import json_safe


def chosen(cells: list[dict[str, Any]], scenarios: list[str] | None, policies: list[str] | None,
           loads: list[float] | None) -> list[dict[str, Any]]:
    """The committed cells a run re-checks: every cell whose scenario, policy (shell patterns) and load match."""
    return [c for c in cells
            if (scenarios is None or c["scenario"] in scenarios)
            and (policies is None or any(fnmatch.fnmatchcase(c["policy"], p) for p in policies))
            and (loads is None or c["rate_scale"] in loads)]


def differences(want: dict[str, Any], got: dict[str, Any], limit: int = 3) -> list[str]:
    """Up to ``limit`` numbers of a cell that moved, as ``section.key: committed -> now``."""
    out = []
    for section in ("mean", "ci95", "n"):
        a, b = want.get(section), got.get(section)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{section}.{k}: {a.get(k)} -> {b.get(k)}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{section}: {a} -> {b}")
    return out[:limit]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a results folder holding results.json (e.g. results/default)")
    ap.add_argument("--scenarios", help="comma-separated scenarios (default: every one in the folder)")
    ap.add_argument("--policies", help="comma-separated policy specs or shell patterns ('*@central')")
    ap.add_argument("--loads", help="comma-separated loads (default: every one)")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)

    committed = json.loads((args.folder / "results.json").read_text())
    split = (lambda s: s.split(",") if s else None)
    loads = [float(x) for x in args.loads.split(",")] if args.loads else None
    cells = chosen(committed["cells"], split(args.scenarios), split(args.policies), loads)
    if not cells:
        print(f"{args.folder}: no committed cell matches", file=sys.stderr)
        return 2
    moved = 0
    # one grid per scenario: a scenario's cells share its seeds' workloads
    for scenario in dict.fromkeys(c["scenario"] for c in cells):
        mine = [c for c in cells if c["scenario"] == scenario]
        policies = list(dict.fromkeys(c["policy"] for c in mine))
        grid_loads = sorted({c["rate_scale"] for c in mine})
        grid = run_grid([scenario], policies, committed["seeds"], grid_loads, workers=args.workers)
        now = {(c.scenario, c.policy, c.rate_scale): json_safe(dataclasses.asdict(c)) for c in aggregate(grid.rows)}
        for want in mine:
            key = (want["scenario"], want["policy"], want["rate_scale"])
            got = now[key]
            if got != want:
                moved += 1
                print(f"MOVED {key}: " + "; ".join(differences(want, got)))
    print(f"{args.folder}: {len(cells) - moved} of {len(cells)} cells identical "
          f"(seeds {committed['seeds'][0]}-{committed['seeds'][-1]})")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
