"""``rlsched eval``: every policy on the same seeded workloads, tables and plots."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlsched import bounds
from rlsched.argtypes import distinct, flag, int_list, number_list
from rlsched.commands.args import check_out_dir, command, print_json, renamed, write_atomic
from rlsched.errors import ConfigError
from rlsched.evaluation import EVAL_SEED_BASE, REPORT_FILES, Grid, run_grid, write_report
from rlsched.parallel import add_parallel_args
from rlsched.sim.classes import print_note
from rlsched.sim.metrics import json_safe
from rlsched.sim.scenario import load_scenario

PARTIAL = "partial.json"
"""Written into --out when a grid stops early: the rows of the runs that finished."""


@command("eval", "Evaluate policies × scenarios × loads on held-out seeds; write markdown, JSON and plots.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default="default,video-mix,omni-mix,trace-azure,bursty",
                   help="comma-separated scenario names or paths")
    p.add_argument("--policies", default="fifo,sjf,edf,priority,drr",
                   help="comma-separated policy specs (e.g. fifo,edf,static,rl:checkpoints/default); "
                        "{scenario} in a spec is replaced per scenario, e.g. static:agents/tuned/{scenario}.json")
    p.add_argument("--seeds", default=f"{EVAL_SEED_BASE},{EVAL_SEED_BASE + 1},{EVAL_SEED_BASE + 2}",
                   help=f"evaluation seeds (>= {EVAL_SEED_BASE}: never used in training or tuning)")
    renamed(p, p.add_argument("--loads", dest="rate_scales", metavar="L1,L2,...", default="0.5,0.75,1.0,1.25,1.5",
                              help="comma-separated loads (x the scenario's rate) to evaluate"), "--rate-scales")
    p.add_argument("--duration", type=flag(bounds.DURATION_S),
                   help="arrival window per run in s (default: each scenario's)")
    p.add_argument("--out", default="results/latest",
                   help=f"folder for results.md, results.json, plots (checked before the first run; if a run "
                        f"fails or Ctrl-C stops the grid, the runs that finished are written to OUT/{PARTIAL})")
    p.add_argument("--replicas", type=flag(bounds.REPLICAS), default=1,
                   help="run one-GPU scenarios as a stage of this many replicas (arrivals x replicas; "
                        "bare policies route round-robin, POLICY@ROUTER picks the router); not with "
                        "scenarios that declare their own replicas")
    p.add_argument("--sp", type=flag(bounds.SP_DEGREE), default=1,
                   help="GPUs per replica with --replicas (sequence parallel)")
    add_parallel_args(p)
    p.add_argument("--allow-training-seeds", action="store_true", help="permit seeds < 1000 (not for reporting)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    seeds = distinct(int_list(args.seeds, "--seeds"), "--seeds")
    if min(seeds) < EVAL_SEED_BASE and not args.allow_training_seeds:
        raise ConfigError("--seeds", f"{min(seeds)} is a training seed (evaluation seeds are >= {EVAL_SEED_BASE}); "
                                     "pass --allow-training-seeds to use training seeds anyway")
    loads = distinct(number_list(args.rate_scales, "--loads"), "--loads")
    out = check_out_dir(args.out, "--out", (*REPORT_FILES, PARTIAL))
    scenarios = distinct(args.scenarios.split(","), "--scenarios")
    policies = distinct(args.policies.split(","), "--policies")
    grid = Grid([], {}, {}, 1.0)
    for sc in scenarios:
        print_note(load_scenario(sc).class_table)
    total = len(scenarios) * len(policies) * len(seeds) * len(loads)
    try:
        run_grid(scenarios, policies, seeds, loads, args.duration, args.workers, progress=not args.json,
                 ray=args.ray, grid=grid, replicas=args.replicas, sp_degree=args.sp)
        summary = write_report(grid, out)  # inside: Ctrl-C while plotting keeps the rows too
    except BaseException as exc:
        if _interrupted(exc):  # Ctrl-C: the finished runs kept, one line, the shell's status 130
            where = f"; their rows are in {_write_partial(out, grid, total, exc)}" if grid.rows else ""
            print(f"rlsched: interrupted: {len(grid.rows)} of {total} runs finished{where}", file=sys.stderr)
            return 130
        if grid.rows:
            path = _write_partial(out, grid, total, exc)
            print(f"rlsched: note: {len(grid.rows)} of {total} runs finished before the grid stopped; their rows "
                  f"are in {path}", file=sys.stderr)
        raise
    (out / PARTIAL).unlink(missing_ok=True)  # an earlier stopped grid's rows: superseded
    if args.json:
        print_json(summary)
    else:
        print((out / "results.md").read_text())
        from rlsched.evaluation.plots import available

        print(f"wrote {out}/results.md, results.json" + (" and plots" if available() else ""))
    return 0


def _interrupted(exc: BaseException | None) -> bool:
    """Ctrl-C, also when it landed inside a lock's release while a worker's result was awaited (CPython
    then raises ``RuntimeError: cannot release un-acquired lock`` while handling the KeyboardInterrupt)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__context__
    return False


def _write_partial(out: Path, grid: Grid, total: int, exc: BaseException) -> Path:
    """The finished runs' rows (the same rows results.json is aggregated from), so a failure in
    the last scenario does not cost the others; returns where they are."""
    why = "interrupted" if _interrupted(exc) else f"{type(exc).__name__}: {exc}"
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / PARTIAL, json.dumps(json_safe({"finished": len(grid.rows), "total": total, "stopped_by": why,
                                                      "rows": grid.rows}), indent=1), "--out")
    return out / PARTIAL
