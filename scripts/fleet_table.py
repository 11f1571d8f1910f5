"""The fleet results (docs/replicas.md, "Past one node"): one-GPU ``default`` as one pool of 64, 256 and
1,024 replicas, every deployable router beside vLLM-Omni's own, on evaluation seeds.

    python scripts/fleet_table.py run --replicas 1024 --loads 0.5,1,1.5 --out results/fleet/default-1024
    python scripts/fleet_table.py                          # prints the markdown table
    python scripts/fleet_table.py --doc docs/replicas.md   # fills the page's <!-- replicas-fleet --> block

``run`` is ``rlsched eval --scenarios default --replicas N`` (the same grid runner and report: results.md,
results.json, plots) that also keeps each run's row in ``rows.json`` (``per_replica`` left out), since the
table pairs the deployed router by seed against specs ``eval``'s summary does not pair it with: the true
state (``view=replica``) and ``fifo@least-queue``, vLLM-Omni's best own router.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replicas_table import fill, short  # noqa: E402

from rlsched.evaluation import Grid, paired, run_grid, write_report  # noqa: E402
from rlsched.sim.metrics import json_safe  # noqa: E402

TUNED = "static:agents/tuned/default.json"
DEPLOYED = f"{TUNED}@rlsched"
TRUE_STATE = f"{DEPLOYED};view=replica"
VLLM_OMNI = "fifo@least-queue"
POLICIES = (DEPLOYED, f"{TUNED}@router", f"{TUNED}@central", "edf@central", f"{TUNED}@least-work",
            f"{TUNED}@round-robin", "fifo@round-robin", VLLM_OMNI, "edf@least-queue", TRUE_STATE)
"""Every deployable router (rlsched's, the learned one, late binding, the plain ones) beside vLLM-Omni's own
(``fifo@round-robin``, ``fifo@least-queue``) and the true-state ceiling."""
ROWS = "rows.json"


def run(args: argparse.Namespace) -> None:
    """One pool size's grid: ``eval``'s report in ``--out`` plus every run's row."""
    policies = args.policies.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    grid = Grid([], {}, {}, 1.0)
    try:  # the loads run one after another: Ctrl-C keeps every load whose runs all finished
        run_grid(["default"], policies, seeds, loads, args.duration, workers=args.workers, grid=grid,
                 replicas=args.replicas)
    finally:
        whole = len(policies) * len(seeds)
        done = [r for r in grid.rows if sum(q["rate_scale"] == r["rate_scale"] for q in grid.rows) == whole]
        if done:
            grid.rows[:] = done
            write_report(grid, args.out)
            rows = [{k: v for k, v in r.items() if k != "per_replica"} for r in done]
            (args.out / ROWS).write_text(json.dumps(json_safe({"replicas": args.replicas, "duration_s": args.duration,
                                                               "rows": rows}), indent=0) + "\n")


def _pm(row: dict | None) -> str:
    return f"{100 * row['diff']:+.1f} ± {100 * row['diff_ci95']:.1f}" if row else "-"


def fleet_table(runs: list[dict]) -> list[str]:
    """One line per pool size and load: every spec's mean (class-weighted SLO attainment %), the deployed
    router paired by seed against the true state and against ``fifo@least-queue``, and the cells where it is
    more than a point below the first or below the second."""
    specs = [p for p in POLICIES if any(r["policy"] == p for run in runs for r in run["rows"])]
    shown = [p for p in specs if p not in (DEPLOYED, TRUE_STATE, VLLM_OMNI)]
    out = ["| replicas | load | requests | `static@rlsched` (deployed) | true state | deployed − true state, paired | "
           "`fifo@least-queue` | deployed − `fifo@least-queue`, paired | "
           + " | ".join(f"`{short(p)}`" for p in shown) + " |", "|---" * (8 + len(shown)) + "|"]
    short_of: list[str] = []
    for run in sorted(runs, key=lambda r: r["replicas"]):
        rows = run["rows"]
        means: dict[tuple[str, float], list[float]] = {}
        requests: dict[float, list[int]] = {}
        for r in rows:
            means.setdefault((r["policy"], r["rate_scale"]), []).append(r["weighted_slo_attainment"])
            if r["policy"] == DEPLOYED:
                requests.setdefault(r["rate_scale"], []).append(r["requests_total"])
        ceiling = {r["rate_scale"]: r for r in paired(rows, DEPLOYED, (TRUE_STATE,))}
        omni = {r["rate_scale"]: r for r in paired(rows, DEPLOYED, (VLLM_OMNI,))}
        n = run["replicas"]
        for x in sorted(requests):
            mean = {p: f"{100 * sum(v) / len(v):.1f}" for (p, load), v in means.items() if load == x}
            c, o = ceiling.get(x), omni.get(x)
            out.append(f"| {n:,} | ×{x:g} | {round(sum(requests[x]) / len(requests[x])):,} | {mean[DEPLOYED]} | "
                       f"{mean.get(TRUE_STATE, '-')} | {_pm(c)} | {mean.get(VLLM_OMNI, '-')} | {_pm(o)} | "
                       + " | ".join(mean.get(p, "-") for p in shown) + " |")
            if (c and c["diff"] < -0.01) or (o and o["diff"] < 0):
                short_of.append(f"{n:,} ×{x:g}")
    seeds = sorted({r["seed"] for run in runs for r in run["rows"]})
    out += ["", f"Seeds {', '.join(map(str, seeds))}; cells where the deployed router is more than 1 point below "
            "the true state or below `fifo@least-queue` (mean): " + (", ".join(short_of) or "none") + "."]
    return out + [""]


def load_runs(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob(f"*/{ROWS}"))]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command")
    r = sub.add_parser("run", help="run one pool size's grid")
    r.add_argument("--replicas", type=int, required=True)
    r.add_argument("--loads", default="0.5,0.75,1.0,1.25,1.5")
    r.add_argument("--seeds", default="1000,1001,1002")
    r.add_argument("--duration", type=float, default=600.0)
    r.add_argument("--policies", default=",".join(POLICIES))
    r.add_argument("--workers", type=int, default=1)
    r.add_argument("--out", type=Path, required=True)
    p.add_argument("--root", type=Path, default=Path("results/fleet"))
    p.add_argument("--doc", type=Path, help="fill this file's <!-- replicas-fleet --> block instead of printing")
    args = p.parse_args(argv)
    if args.command == "run":
        run(args)
        return
    lines = fleet_table(load_runs(args.root))
    if args.doc:
        fill(args.doc, {"fleet": lines})
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
