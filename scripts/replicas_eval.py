"""Routers × replica policies on an 8-replica stage, paired on evaluation seeds (README "Beyond one GPU").

    python scripts/replicas_eval.py --workers 2            # writes results/replicas/{results.json,results.md}

Every replica runs ``default``'s profile and serving config; the offered load is ``--replicas`` ×
the scenario's nominal rate × each load. Each cell: mean class-weighted SLO attainment over the
seeds and, for every combination, the paired difference to the best plain combination (a vLLM-Omni
router or a plain heuristic router with a plain heuristic replica policy) with a 95 % interval.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rlsched.evaluation import ci95_half_width
from rlsched.parallel import add_parallel_args, run_tasks
from rlsched.policies.routers import run_spec
from rlsched.sim import load_scenario
from rlsched.sim.metrics import summarize_stage
from rlsched.sim.stage import Stage

STATIC = "static:agents/tuned/default.json"
PLAIN = ("fifo@round-robin", "fifo@least-queue", "fifo@random", "edf@round-robin", "edf@least-work",
         "edf@affinity", "sjf@least-work")
"""vLLM-Omni's own routers with its FIFO, and plain heuristic routers with plain heuristic policies."""
OURS = (f"{STATIC}@least-work", f"{STATIC}@rlsched", f"{STATIC}@central", "edf@central")


def run_one(task: tuple[str, str, int, float, int]) -> float:
    scenario, combo, seed, load, replicas = task
    sc = load_scenario(scenario)
    cost = sc.cost()
    stage = Stage.uniform(sc.requests(seed, rate_scale=load * replicas, cost=cost), replicas, cost, sc.serving,
                          seed=seed)
    run_spec(stage, combo)
    return float(summarize_stage(stage)["weighted_slo_attainment"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="default")
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--seeds", default="1000,1001,1002,1003,1004")
    p.add_argument("--loads", default="0.5,0.75,1.0,1.25,1.5")
    p.add_argument("--out", type=Path, default=Path("results/replicas"))
    add_parallel_args(p)
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    combos = (*PLAIN, *OURS)
    tasks = [(args.scenario, c, s, x, args.replicas) for c in combos for x in loads for s in seeds]
    values = np.asarray(list(run_tasks(run_one, tasks, workers=args.workers, ray=args.ray)))
    grid = values.reshape(len(combos), len(loads), len(seeds))
    rows, lines = [], [f"# {args.replicas} replicas of `{args.scenario}`, seeds {args.seeds}", "",
                       "Class-weighted SLO attainment %; in brackets the paired difference to the best plain "
                       "combination in that column (95 % interval, points).", "",
                       "| combination | " + " | ".join(f"×{x:g}" for x in loads) + " |",
                       "|---|" + "---|" * len(loads)]
    best_plain = [int(np.argmax(grid[:len(PLAIN), j].mean(axis=1))) for j in range(len(loads))]
    for i, combo in enumerate(combos):
        cells = []
        row = {"combination": combo, "by_load": {}}
        for j, x in enumerate(loads):
            mean = float(grid[i, j].mean())
            diff = grid[i, j] - grid[best_plain[j], j]
            row["by_load"][f"{x:g}"] = {"mean": mean, "vs_best_plain": float(diff.mean()),
                                        "ci95": ci95_half_width(diff), "best_plain": combos[best_plain[j]]}
            text = f"{100 * mean:.1f}"
            if i >= len(PLAIN):
                text += f" ({100 * diff.mean():+.1f} ± {100 * ci95_half_width(diff):.1f})"
            cells.append(text)
        rows.append(row)
        lines.append(f"| `{combo.replace(STATIC, 'static')}` | " + " | ".join(cells) + " |")
    lines += ["", "Best plain combination per load: " + ", ".join(
        f"×{x:g} `{combos[best_plain[j]]}`" for j, x in enumerate(loads)), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"scenario": args.scenario, "replicas": args.replicas,
                                                       "seeds": seeds, "loads": loads, "rows": rows}, indent=1))
    (args.out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
