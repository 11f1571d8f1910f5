"""How good a derived profile is: ``rlsched profile derive`` scored leave-one-pair-out on every shipped
measurement set (issue 46).

For each GPU × model pair the shipped sets measure, the derivation's efficiencies are re-fitted with that
pair's rows left out, the pair's profile is derived from its architecture and GPU datasheet alone, and
every measured number of the pair (degree-1 latencies, peak memory) is predicted. Writes the table into
docs/derive.md between its markers (``--check``: fail when the page differs, as the test does);
``--write-efficiencies`` also re-fits ``envs/architectures/efficiencies.yaml`` on every set.

    python scripts/derive_score.py                       # rewrite the table in docs/derive.md
    python scripts/derive_score.py --write-efficiencies  # and the shipped efficiencies
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlsched.profiling.derive import (
    EFFICIENCY_FILE,
    LATENCY_METRICS,
    Scored,
    fit_efficiencies,
    render_efficiencies,
    score_leave_one_out,
    shipped_points,
    summary,
)

PAGE = Path(__file__).resolve().parents[1] / "docs" / "derive.md"
BEGIN, END = "<!-- derive-score:begin -->", "<!-- derive-score:end -->"


def table(scored: list[Scored]) -> str:
    s = summary(scored)
    outside = sum(max(x.ratio, 1 / x.ratio) > 1.6 for x in scored if x.point.row.metric in LATENCY_METRICS)
    lines = [f"Leave-one-pair-out, {s['latency_points']} latency points and {s['memory_points']} memory points of "
             f"{len({x.point.pair for x in scored})} GPU × model pairs (`python scripts/derive_score.py`):",
             "",
             f"- latency: median |error| **{s['median_abs_error']:.1%}**, worst point ×{s['worst_ratio']:.2f}; "
             f"points outside ×1.6: {outside}",
             f"- memory: worst under-estimate **{s['worst_memory_under']:.1%}** (a prior must fail safe: ≤ 10 %)",
             "",
             "| pair | set | use | metric | shape | batch | steps | cfg | stack | measured | derived | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in sorted(scored, key=lambda x: (x.point.pair, x.point.row.metric, x.point.row.line)):
        r = x.point.row
        lines.append(f"| {r.model} × {r.gpu} | {x.point.set_name} | {r.use} | {r.metric} | {r.shape} | {r.batch} | "
                     f"{r.steps} | {'yes' if r.cfg else 'no'} | {r.stack} | {r.value:.4g} | {x.predicted:.4g} | "
                     f"×{x.ratio:.2f} |")
    return "\n".join(lines) + "\n"


def render_page(text: str, body: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with what stands between its ``begin`` and ``end`` markers replaced by ``body``."""
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}{end}{tail}"


def write_or_check(new: str, check: bool, table_name: str, script: str) -> int:
    """Write ``new`` to docs/derive.md, or with ``check`` only compare: 1 and a line naming the table and the
    script that regenerates it when the page differs."""
    if check:
        if new != PAGE.read_text():
            print(f"docs/derive.md: the {table_name} differs from this run (python scripts/{script})", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    print(f"wrote {PAGE}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when docs/derive.md's table is not what this run gives")
    ap.add_argument("--write-efficiencies", action="store_true", help="re-fit envs/architectures/efficiencies.yaml")
    args = ap.parse_args(argv)
    points = shipped_points()
    if args.write_efficiencies:
        EFFICIENCY_FILE.write_text(render_efficiencies(fit_efficiencies(points), len(points)))
    page = render_page(PAGE.read_text(), table(score_leave_one_out(points)))
    return write_or_check(page, args.check, "table", "derive_score.py")


if __name__ == "__main__":
    sys.exit(main())
