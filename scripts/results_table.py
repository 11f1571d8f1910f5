"""The one-GPU results table (docs/results.md) from ``make results`` (``results/default/results.json``).

    python scripts/results_table.py                     # prints the markdown table
    python scripts/results_table.py --doc docs/results.md  # fills the page's <!-- results-table --> block

Per scenario and load (class-weighted SLO attainment %, mean over the evaluation seeds): FIFO,
the best plain heuristic, tuned ``static``, the knob policy, ``pick``; ``pick`` over the best of
every other policy in the cell; and ``pick`` − ``static`` paired by seed (95 % interval, points).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from replicas_table import fill  # the docs' block writer, shared by both table scripts

from rlsched.evaluation import PLAIN_HEURISTICS

KEY = "weighted_slo_attainment"


def table(d: dict) -> list[str]:
    pick = d["headline"]["target"]
    static = next(c["policy"] for c in d["cells"] if c["policy"].startswith("static"))
    knobs = next(c["policy"] for c in d["cells"] if c["policy"].startswith("rl"))
    means = {(c["scenario"], c["policy"], c["rate_scale"]): c["mean"][KEY] for c in d["cells"]}
    paired = {(r["scenario"], r["rate_scale"]): r for r in d["paired_vs_static"][pick]}
    out = ["| scenario | load | fifo | best plain heuristic | static (tuned) | rl (knobs) | **pick** | "
           "pick ÷ best other | pick − static, points (paired 95 %) |", "|---|---|---|---|---|---|---|---|---|"]
    for scenario, load in sorted({(s, x) for s, _, x in means}):
        cell = {p: v for (s, p, x), v in means.items() if (s, x) == (scenario, load)}
        plain = max((p for p in cell if p in PLAIN_HEURISTICS), key=cell.get)
        other = max(v for p, v in cell.items() if p != pick)
        r = paired[scenario, load]
        out.append(f"| {scenario} | ×{load:g} | {100 * cell['fifo']:.1f} | {plain} {100 * cell[plain]:.1f} | "
                   f"{100 * cell[static]:.1f} | {100 * cell[knobs]:.1f} | {100 * cell[pick]:.1f} | "
                   f"{cell[pick] / other:.3f} | {100 * r['diff']:+.1f} ± {100 * r['diff_ci95']:.1f} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("results/default/results.json"))
    p.add_argument("--doc", "--readme", dest="doc", type=Path,
                   help="fill this file's <!-- results-table --> block instead of printing")
    args = p.parse_args()
    lines = table(json.loads(args.results.read_text()))
    if args.doc:
        fill(args.doc, {"table": lines}, prefix="results")
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
