"""``rlsched eval``: every policy on the same seeded workloads, tables and plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlsched.argtypes import int_list
from rlsched.commands.args import command, print_json
from rlsched.evaluation import EVAL_SEED_BASE, run_grid, write_report
from rlsched.parallel import add_parallel_args
from rlsched.sim.workload import positive


@command("eval", "Evaluate policies × scenarios × loads on held-out seeds; write markdown, JSON and plots.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default="default,video-mix,omni-mix,trace-azure,bursty",
                   help="comma-separated scenario names or paths")
    p.add_argument("--policies", default="fifo,sjf,edf,priority,drr",
                   help="comma-separated policy specs (e.g. fifo,edf,static,rl:checkpoints/default); "
                        "{scenario} in a spec is replaced per scenario, e.g. static:tuned/{scenario}.json")
    p.add_argument("--seeds", default=f"{EVAL_SEED_BASE},{EVAL_SEED_BASE + 1},{EVAL_SEED_BASE + 2}",
                   help=f"evaluation seeds (>= {EVAL_SEED_BASE}: never used in training or tuning)")
    p.add_argument("--rate-scales", default="0.5,0.75,1.0,1.25,1.5", help="loads to evaluate")
    p.add_argument("--duration", type=float, help="arrival window per run (default: each scenario's)")
    p.add_argument("--out", default="results/latest", help="folder for results.md, results.json, plots")
    add_parallel_args(p)
    p.add_argument("--allow-training-seeds", action="store_true", help="permit seeds < 1000 (not for reporting)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    seeds = int_list(args.seeds, "--seeds")
    if min(seeds) < EVAL_SEED_BASE and not args.allow_training_seeds:
        raise SystemExit(f"rlsched eval: seeds below {EVAL_SEED_BASE} are training seeds; "
                         "pass --allow-training-seeds to use them anyway")
    grid = run_grid(args.scenarios.split(","), args.policies.split(","), seeds,
                    [positive(x, "--rate-scales") for x in args.rate_scales.split(",")], args.duration, args.workers,
                    progress=not args.json, ray=args.ray)
    out = Path(args.out)
    summary = write_report(grid, out)
    if args.json:
        print_json(summary)
    else:
        print((out / "results.md").read_text())
        print(f"wrote {out}/results.md, results.json and plots")
    return 0
