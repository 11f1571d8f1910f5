"""How much can choosing among feasible batches gain over the tuned heuristic? (issue 9's headroom)

Runs ``static`` (the per-scenario tuned action), ``lookahead`` (one-step look-ahead over
candidate batches, realizable: only queued requests) and ``hindsight`` (the same, knowing
the next 30 minutes of arrivals: a ceiling) on the same seeded workloads and prints the paired
per-seed differences against ``static`` with 95 % intervals. Training-range seeds
(100+; the tuned actions used 0-5), request-mode scenarios (step mode is not looked
ahead). Slow by design: ~1-3 min per scenario and load on one core.

    python scripts/lookahead_ceiling.py --scenarios default,bursty --loads 1.0,1.5 --seeds 6
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from rlsched.evaluation import RunSpec, ci95_half_width, prepare
from rlsched.policies import make_policy
from rlsched.sim.metrics import summarize

POLICIES = ("static", "lookahead", "hindsight")


def run(task: tuple[str, str, int, float]) -> tuple[tuple[str, str, int, float], float]:
    scenario, policy, seed, load = task
    sim = prepare(RunSpec(scenario, policy, seed, load))
    sim.run(make_policy(f"{policy}:agents/tuned/{scenario}.json"))
    return task, summarize(sim)["weighted_slo_attainment"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default="default,omni-mix,trace-azure,bursty")
    p.add_argument("--loads", default="1.0,1.5")
    p.add_argument("--seeds", type=int, default=6, help="how many seeds, from 100")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    seeds = list(range(100, 100 + args.seeds))
    tasks = [(sc, pol, s, float(rs)) for sc in args.scenarios.split(",") for rs in args.loads.split(",")
             for s in seeds for pol in POLICIES]
    with ProcessPoolExecutor(args.workers) as pool:
        res = dict(pool.map(run, tasks, chunksize=1))
    print("| scenario | load | static | lookahead − static | hindsight − static |")
    print("|---|---|---|---|---|")
    for sc in args.scenarios.split(","):
        for rs in (float(x) for x in args.loads.split(",")):
            base = np.array([res[(sc, "static", s, rs)] for s in seeds])
            cols = []
            for pol in POLICIES[1:]:
                d = np.array([res[(sc, pol, s, rs)] for s in seeds]) - base
                cols.append(f"{100 * d.mean():+.1f} ± {100 * ci95_half_width(d):.1f}")
            print(f"| {sc} | ×{rs:g} | {100 * base.mean():.1f} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
