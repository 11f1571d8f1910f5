"""Serving on a derived prior: what a user without a measured profile gets (issue 46's done-when).

For each scenario, its shipped measured profile is the GPU's truth, and decisions read the profile
``rlsched profile derive`` makes for the same model and GPU with that GPU × model pair's measurements left
out of the efficiency fit (what a user on a pair rlsched never measured would start from). Three arms on
the same seeded workloads and the same deadlines (the scenario's SLO scales × the prior's standalone time,
as the user's SLOs would be written):

* **prior** — deciding on the derived prior, calibration off;
* **calibrated** — the same with the online calibration on (the default; ``rlsched.sim.online``);
* **reference** — deciding on the true profile (``RunSpec(belief="truth")``).

Writes ``OUT/derived.json`` (every run), ``OUT/derived.md`` (paired differences to the reference, mean ±
95 % interval over the seeds, OOM failures per arm) and the derived profiles under ``OUT/profiles/``.

    python scripts/derived_prior.py --workers 2 --out results/derived-prior
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.atomic import write_atomic
from rlsched.parallel import run_tasks
from rlsched.profiling.architecture import read_architecture
from rlsched.profiling.derive import Stack, derive_profile, fit_efficiencies, render_derived, shipped_points
from rlsched.profiling.gpus import find_gpu
from rlsched.run import RunSpec, ci95_half_width, simulate
from rlsched.sim import load_scenario
from rlsched.sim.truth import Truth

T = "static:agents/tuned/default.json"
POLICIES = {"default": ("edf", T), "video-mix": ("edf", "static:agents/tuned/video-mix.json"),
            "qwen-image-8gpu": (f"{T}@rlsched", f"{T}@central")}
"""The tuned heuristic each scenario ships (and EDF on one GPU); on the pool rlsched's router and late binding."""
ARMS = ("prior", "calibrated", "reference")


def derive_prior(scenario: str, out: Path) -> Path:
    """The derived profile of ``scenario``'s model and GPU, its pair left out of the fit, written under ``out``."""
    cost = load_scenario(scenario).cost()
    (model,) = cost.models
    gpu = find_gpu(cost.gpu)
    eff = fit_efficiencies([p for p in shipped_points() if p.pair != (model, gpu.name)])
    stack = cost.stack
    data = derive_profile(read_architecture(model), gpu, eff,
                          Stack(compile=bool(stack and stack.compile), cfg=stack.cfg if stack else "sequential"),
                          name=f"{cost.name}-derived-prior")
    path = out / "profiles" / f"{data['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_derived(data, f"scripts/derived_prior.py ({model} x {gpu.name} left out of the fit)"))
    return path


def run(task: tuple[str, str, str, str, float, int, float | None]) -> dict[str, Any]:
    scenario, prior, spec, arm, load, seed, duration = task
    shipped = load_scenario(scenario)
    sc = dataclasses.replace(shipped, profile=prior, truth=Truth(profile=shipped.profile))
    policy, belief = spec, "profile"
    if arm != "calibrated":
        head, at, router = spec.rpartition("@")
        policy = f"{head or spec};calibrate=off" + (f"@{router}" if at else "")
        belief = "truth" if arm == "reference" else "profile"
    t0 = time.perf_counter()
    done, m = simulate(RunSpec(scenario, policy, seed, load, duration, belief=belief), sc)
    sims = getattr(done, "replicas", [done])
    cals = [s.calibrator for s in sims if s.calibrator is not None]
    return {"scenario": scenario, "spec": spec, "arm": arm, "load": load, "seed": seed,
            "weighted": float(m["weighted_slo_attainment"]), "failed": int(m["requests_failed"]),
            "oom_batches": sum(s.oom_batches for s in sims), "batches": int(m["batches"]),
            "versions": sum(c.version for c in cals),
            "last_move": max((f["last_moved_at_batch"] for c in cals for f in c.summary()["models"].values()),
                             default=0), "wall_s": round(time.perf_counter() - t0, 3)}


def table(rows: list[dict[str, Any]], seeds: list[int]) -> list[str]:
    by = {(r["scenario"], r["spec"], r["arm"], r["load"], r["seed"]): r for r in rows}
    out = ["| scenario | policy | load | reference | prior − reference | calibrated − reference | OOM failures "
           "prior / calibrated / reference | last calibration move (batch) |", "|---|---|---|---|---|---|---|---|"]
    cells = dict.fromkeys((r["scenario"], r["spec"], r["load"]) for r in rows)
    for sc, spec, x in cells:
        def per(arm: str, key: str = "weighted") -> np.ndarray:
            return np.array([by[(sc, spec, arm, x, s)][key] for s in seeds], dtype=float)  # noqa: B023

        ref = per("reference")
        d, c = 100 * (per("prior") - ref), 100 * (per("calibrated") - ref)
        oom = " / ".join(str(int(per(a, "failed").sum())) for a in ARMS)
        out.append(f"| {sc} | `{spec.replace(T, 'static')}` | ×{x:g} | {100 * ref.mean():.1f} | {d.mean():+.1f} ± "
                   f"{ci95_half_width(d):.1f} | {c.mean():+.1f} ± {ci95_half_width(c):.1f} | {oom} | "
                   f"{int(per('calibrated', 'last_move').max())} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default=",".join(POLICIES))
    ap.add_argument("--seeds", default="1000,1001,1002,1003,1004")
    ap.add_argument("--loads", default="1.0,1.25")
    ap.add_argument("--duration", type=float, default=None, help="arrival window per run (default: each scenario's)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default="results/derived-prior")
    args = ap.parse_args(argv)
    out = Path(args.out)
    seeds, loads = [int(s) for s in args.seeds.split(",")], [float(x) for x in args.loads.split(",")]
    priors = {sc: str(derive_prior(sc, out).resolve()) for sc in args.scenarios.split(",")}
    tasks = [(sc, priors[sc], spec, arm, x, s, args.duration) for sc in priors for spec in POLICIES[sc]
             for x in loads for arm in ARMS for s in seeds]
    t0, rows = time.perf_counter(), []
    for i, row in enumerate(run_tasks(run, tasks, args.workers), 1):
        rows.append(row)
        if i % 20 == 0 or i == len(tasks):
            print(f"{i}/{len(tasks)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    command = "python scripts/derived_prior.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"seeds": seeds, "loads": loads, "command": command.strip(), "wall_s": time.perf_counter() - t0}
    write_atomic(out / "derived.json", json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["Class-weighted SLO attainment (%) deciding on a derived prior (the scenario's GPU × model pair left out "
             "of the efficiency fit) while the GPU runs at the shipped measured profile: the reference's attainment "
             "(deciding on the true profile), then prior − reference and calibrated − reference (points, paired "
             f"mean ± 95 % interval over seeds {seeds[0]}-{seeds[-1]}).", "", *table(rows, seeds), "",
             f"Command: `{meta['command']}` ({meta['wall_s'] / 60:.1f} min wall, {args.workers} workers)."]
    write_atomic(out / "derived.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
