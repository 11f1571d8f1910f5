"""``rlsched simulate``: run one or several policies on a seeded scenario workload."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from rlsched import bounds
from rlsched.argtypes import flag, seed_arg
from rlsched.commands.args import check_out_file, command, print_json, renamed
from rlsched.commands.tables import markdown_table, metrics_table, show
from rlsched.errors import TraceRowsSkipped
from rlsched.policies import policy_names
from rlsched.run import RunSpec, simulate, write_records
from rlsched.sim import Scenario, load_scenario
from rlsched.sim.classes import print_note
from rlsched.sim.truth import Truth


@command("simulate", "Simulate a scenario under one policy (or --compare several) and print metrics.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="default", help="scenario name (envs/NAME.yaml) or path")
    p.add_argument("--policy", default="fifo",
                   help=f"policy spec NAME[:ARG][;KEY=VALUE], NAME one of {', '.join(policy_names())} "
                        "(e.g. rl:checkpoints/default, static:agents/tuned/default.json, pick:checkpoints/pick)")
    p.add_argument("--compare", metavar="P1,P2,...", help="run these policies on the same workload")
    p.add_argument("--mode", choices=("request", "step"), help="override the scenario's execution mode")
    p.add_argument("--seed", type=seed_arg, default=0, help="workload seed (integer >= 0)")
    p.add_argument("--duration", type=flag(bounds.DURATION_S),
                   help="arrival window in seconds (default: the scenario's)")
    renamed(p, p.add_argument("--load", dest="rate_scale", metavar="X", type=flag(bounds.SCALE), default=1.0,
                              help="multiply the scenario's arrival rate by X (> 0)"), "--rate-scale")
    p.add_argument("--trace", help="replay a trace (Azure CSV, Hetu-DiT text, or rlsched CSV)")
    p.add_argument("--replicas", type=flag(bounds.REPLICAS), default=1,
                   help="replicas of the scenario's GPU (a multi-replica stage; arrivals scaled x replicas, "
                        "so each replica gets the scenario's load); policies may be POLICY@ROUTER "
                        "(round-robin, random, least-queue, least-work, affinity, rlsched; @central: late binding; "
                        "@lookahead[:H], @hindsight[:H]: the offline look-ahead teachers, slow)")
    p.add_argument("--sp", type=flag(bounds.SP_DEGREE), default=1,
                   help="GPUs per replica, sequence-parallel (needs a profile with an sp block)")
    p.add_argument("--truth", metavar="KEY=VALUE,...",
                   help="the GPU runs at another cost than the profile every decision reads (the scenario's "
                        "truth: key): time_scale=1.3 (30%% slower), quadratic_scale=2 (attention x2), "
                        "memory_scale=1.15, profile=NAME; policies calibrate online unless they say "
                        "calibrate=off (docs/calibration.md)")
    p.add_argument("--records", metavar="PATH",
                   help="write one CSV row per request; with --compare one file per policy, the policy "
                        "inserted before the suffix (r.csv: r.fifo.csv, r.sjf.csv, ...)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table instead of a rich one")
    p.add_argument("--json", action="store_true", help="print JSON (a list with --compare)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    if args.truth is not None:
        scenario = dataclasses.replace(scenario, truth=Truth.parse(args.truth, "--truth"))
        scenario.true_cost()  # a profile without the scenario's models: refused before any run
    print_note(scenario.class_table)
    policies = [p.strip() for p in args.compare.split(",")] if args.compare else [args.policy]
    records = records_paths(args.records, policies, bool(args.compare)) if args.records else {}
    rows: list[dict[str, Any]] = []
    shown: set[str] = set()
    for i, policy in enumerate(policies):
        spec = RunSpec(args.scenario, policy, args.seed, args.rate_scale, args.duration,
                       args.mode, args.trace, args.replicas, args.sp)
        sim, metrics = _simulate(spec, scenario, shown)
        if records:
            write_records(sim, records[i])
        rows.append(metrics)
    if args.compare and records:
        print("rlsched: wrote records " + ", ".join(str(p) for p in records.values()), file=sys.stderr)
    if args.json:
        print_json(rows if args.compare else rows[0])
    elif args.markdown:
        print(markdown_table(rows))
    else:
        r = rows[0]
        title = (f"{scenario.name} ({r['mode']} mode, seed {args.seed}, rate x{args.rate_scale}): "
                 f"{r['requests_total']} requests")
        if not scenario.truth.exact:
            title += f"; the GPU at {scenario.truth.label()}"
        if scenario.replicas:  # the scenario's own pool (--replicas/--sp apply to one-GPU scenarios)
            title += f" on {r['replicas']} replicas, {r['gpus']} GPUs"
        elif "per_replica" in r:
            title += f" on {args.replicas} replicas x {args.sp} GPU(s)"
        show(metrics_table(rows, title))
    return 0


def records_paths(path: str, policies: list[str], compare: bool) -> dict[int, Path]:
    """Where each policy's records go, checked before the first simulation: ``path`` itself for
    one policy; with ``--compare``, ``STEM.POLICY.SUFFIX`` per policy (the spec made file-safe,
    e.g. ``r.static-agents-tuned-default.json.csv``; a spec given twice gets ``-2``)."""
    base = check_out_file(path, "--records")
    if not compare:
        return {0: base}
    out: dict[int, Path] = {}
    taken: set[str] = set()
    for i, policy in enumerate(policies):
        slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", policy).strip("-.") or "policy"
        name, n = slug, 1
        while name in taken:
            n += 1
            name = f"{slug}-{n}"
        taken.add(name)
        out[i] = base.with_name(f"{base.stem}.{name}{base.suffix}")
        check_out_file(out[i], "--records")
    return out


def _simulate(spec: RunSpec, scenario: Scenario, shown: set[str]) -> tuple[Any, dict[str, Any]]:
    """``simulate`` with skipped trace rows counted in the metrics and printed once (``shown``:
    messages already printed, as ``--compare`` replays the same trace once per policy)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceRowsSkipped)
        sim, metrics = simulate(spec, scenario)
    skipped = [w.message for w in caught if isinstance(w.message, TraceRowsSkipped)]
    for w in caught:
        if not isinstance(w.message, TraceRowsSkipped):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if spec.trace:
        metrics["trace_rows_skipped"] = sum(m.skipped for m in skipped)
    for m in skipped:
        if m.args[0] not in shown:
            shown.add(m.args[0])
            print(f"rlsched: warning: {m}", file=sys.stderr)
    return sim, metrics

