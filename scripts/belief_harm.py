"""What a wrong cost profile costs, and what online calibration wins back (issue 38's harm table).

Every decision rlsched makes reads a profile fitted offline. Here the GPU runs at a different *true* cost
(a scenario's ``truth:``, ``rlsched.sim.truth``) and, on the same seeded workloads, each policy runs three
ways:

* **deployed** — deciding on the shipped profile, as deployed today (``POLICY;calibrate=off``);
* **calibrated** — the same, refitting the profile online from each batch's duration and memory
  (``rlsched.sim.online``; the default);
* **reference** — deployed with the true profile (the user who measured their own GPU:
  ``RunSpec(belief="truth")``).

SLOs stay what the user wrote against the shipped profile, so all three serve the same requests with the
same deadlines. Truths: the GPU 30 % faster (``time_scale: 0.7``) and 30 % slower (``1.3``) than the
profile, the attention term twice the profile's (``quadratic_scale: 2``: shape-dependent), memory 15 %
above it (``memory_scale: 1.15``), and the H200 profile deployed on an A100 (``profile:
qwen-image-a100-vllm-omni``: 80 GB, 14 of them free of weights where the profile believes 75; slower), and two
cache backends (``cache: teacache`` and ``cache: cache-dit``: a hidden per-request share of each request's
denoise steps skipped, ``rlsched.sim.cache_backend``; the reference then decides on each request's true cost,
an oracle — ``scripts/cache_ceiling.py`` measures its room over the calibrated mean), and two GPUs of another
form in the terms the calibration fits apart (``rlsched.sim.online``), derived from ``rlsched profile derive
--list-gpus``: the VAE decode of an L40S's form (``decode_scale: 2.03``: decode is memory-bandwidth bound, the
steps FLOP bound, so against the H200 the profile holds it is 4,800/864 GB/s = ×5.56 slower where the steps
are 989/362 TFLOPS = ×2.73: ×2.03 in form) and sequence-parallel communication over PCIe (``comm_scale:
5.4``: an H100-PCIe's 64 GB/s link against the H200's 450, ×7.0, over its compute 989/756 = ×1.31), the latter
on ``qwen-image-8gpu-sp2`` (``qwen-image-8gpu``'s 8 GPUs as 4 replicas of Ulysses degree 2: one GPU has no
communication).
Writes ``OUT/belief.json`` (every run) and ``OUT/belief.md``: per
scenario, truth, policy and load the reference's class-weighted SLO attainment and the paired differences
(points, mean ± 95 % interval over the seeds) of deployed and calibrated to it, OOM failures per arm.

    python scripts/belief_harm.py --workers 2 --out results/belief
    python scripts/belief_harm.py --workers 2 --truths TeaCache,Cache-DiT --merge --out results/belief  # add rows
    python scripts/belief_harm.py --workers 2 --scenarios qwen-image-8gpu-sp2 --truths "PCIe SP comm ×5.4" \
        --merge --out results/belief
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.atomic import write_atomic
from rlsched.parallel import run_tasks
from rlsched.run import RunSpec, ci95_half_width, simulate
from rlsched.sim import load_scenario
from rlsched.sim.cache_backend import PRESETS
from rlsched.sim.scenario import ReplicaGroup, Scenario
from rlsched.sim.truth import Truth

TRUTHS = {"faster 30 %": Truth(time_scale=0.7), "slower 30 %": Truth(time_scale=1.3),
          "attention ×2": Truth(quadratic_scale=2.0), "memory +15 %": Truth(memory_scale=1.15),
          "an A100": Truth(profile="qwen-image-a100-vllm-omni"),
          "TeaCache": Truth(cache={**PRESETS["teacache"], "preset": "teacache"}),
          "Cache-DiT": Truth(cache={**PRESETS["cache-dit"], "preset": "cache-dit"}),
          "L40S-form decode ×2.03": Truth(decode_scale=2.03), "PCIe SP comm ×5.4": Truth(comm_scale=5.4)}
T = "static:agents/tuned/default.json"
POLICIES = {
    "default": ("fifo", "sjf", "edf", "priority", "drr", "seed-memory", "seed-priority", "seed-composite", T,
                "rl:checkpoints/default", "pick:checkpoints/pick;static=agents/tuned/default.json"),
    "qwen-image-8gpu": ("fifo@round-robin", "edf@least-queue", "edf@least-work", f"{T}@round-robin",
                        f"{T}@rlsched", f"{T}@router", f"{T}@central"),
}
POLICIES["qwen-image-8gpu-sp2"] = POLICIES["qwen-image-8gpu"]
VARIANTS = {"qwen-image-8gpu-sp2": ("qwen-image-8gpu", (ReplicaGroup(4, 2, name="h200-sp2"),))}
"""Scenarios that are a shipped one on other replicas: (the shipped one, its replica groups)."""
"""``make results``' one-GPU policies on ``default``; on ``qwen-image-8gpu`` the plain routers, rlsched's
router, the learned router and late binding (``make results-replicas``'s set, trimmed)."""
ARMS = ("deployed", "calibrated", "reference")


def arm_spec(spec: str, arm: str) -> tuple[str, str]:
    """(policy spec, belief) of ``arm``: ``calibrate=off`` on the replica policy where it must not refit."""
    if arm == "calibrated":
        return spec, "profile"
    policy, at, router = spec.rpartition("@")
    off = f"{policy or spec};calibrate=off" + (f"@{router}" if at else "")
    return off, "profile" if arm == "deployed" else "truth"


def run(task: tuple[str, str, str, str, float, int, float | None]) -> dict[str, Any]:
    scenario, truth, spec, arm, load, seed, duration = task
    sc = dataclasses.replace(scenario_of(scenario), truth=TRUTHS[truth])
    policy, belief = arm_spec(spec, arm)
    t0 = time.perf_counter()
    done, m = simulate(RunSpec(scenario, policy, seed, load, duration, belief=belief), sc)
    cals = [sim.calibrator for sim in getattr(done, "replicas", [done]) if sim.calibrator is not None]
    fits = [f for c in cals for f in c.summary()["models"].values()]
    converged = [converged_at(f["moves"], TRUTHS[truth]) for f in fits] if scaled_only(TRUTHS[truth]) else []
    return {"scenario": scenario, "truth": truth, "spec": spec, "arm": arm, "load": load, "seed": seed,
            "weighted": float(m["weighted_slo_attainment"]), "failed": int(m["requests_failed"]),
            "batches": int(m["batches"]), "versions": sum(c.version for c in cals),
            "last_move": max((f["last_moved_at_batch"] for f in fits), default=0),
            "converged_at": None if None in converged else max(converged, default=0),
            "oom_batches": sum(sim.oom_batches for sim in getattr(done, "replicas", [done])),
            "wall_s": round(time.perf_counter() - t0, 3)}


def scenario_of(name: str) -> Scenario:
    """A shipped scenario, or a ``VARIANTS`` one."""
    if name not in VARIANTS:
        return load_scenario(name)
    shipped, groups = VARIANTS[name]
    return dataclasses.replace(load_scenario(shipped), name=name, replicas=groups)


def scaled_only(truth: Truth) -> bool:
    """The truth is the profile scaled in its time and attention terms alone (a calibration has time and
    attention scales to converge to; a form term's truth moves them too where the batches cannot tell the
    terms apart: SP communication is linear in the tokens, as the linear terms are)."""
    return (not truth.profile and truth.cache is None
            and truth.encode_scale == truth.decode_scale == truth.comm_scale == 1.0)


CONVERGED = 0.05
"""A fit has converged once its time and attention scales are within 5 % of the truth's and stay there."""


def converged_at(moves: list[tuple[int, float, float]], truth: Truth) -> int | None:
    """Batches seen when the calibration came within ``CONVERGED`` of ``truth`` for good (0: never had to move;
    None: it never did). Only time and attention count: a memory scale moves at an OOM, if one comes. Another
    profile's truth has no scales to converge to (its fit is 0 here)."""
    want = (truth.time_scale, truth.time_scale * truth.quadratic_scale)
    at = 0 if want == (1.0, 1.0) else None
    for seen, t1, t2 in moves:
        close = abs(t1 / want[0] - 1) <= CONVERGED and abs(t2 / want[1] - 1) <= CONVERGED
        at = (seen if at is None else at) if close else None
    return at


def table(rows: list[dict[str, Any]], scenario: str, truth: str, loads: list[float], seeds: list[int]) -> list[str]:
    value = {(r["spec"], r["arm"], r["load"], r["seed"]): r for r in rows
             if r["scenario"] == scenario and r["truth"] == truth}
    specs = list(dict.fromkeys(r["spec"] for r in rows if r["scenario"] == scenario))
    out = [f"**{scenario}: the GPU {truth} against the profile** (`truth: {TRUTHS[truth].label()}`)", "",
           "| policy | " + " | ".join(f"×{x:g}" for x in loads) + " |", "|---|" + "---|" * len(loads)]
    for spec in specs:
        cells = []
        for x in loads:
            def per(arm: str, key: str = "weighted") -> np.ndarray:
                return np.array([value[(spec, arm, x, s)][key] for s in seeds], dtype=float)  # noqa: B023

            ref = per("reference")
            d, c = 100 * (per("deployed") - ref), 100 * (per("calibrated") - ref)
            cell = f"{100 * ref.mean():.1f}: {d.mean():+.1f} ± {ci95_half_width(d):.1f} / {c.mean():+.1f} ± " \
                   f"{ci95_half_width(c):.1f}"
            oom = [int(per(a, "failed").sum()) for a in ARMS]
            if any(oom):
                cell += f" (OOM {oom[0]}/{oom[1]}/{oom[2]})"
            cells.append(cell)
        out.append(f"| `{short(spec)}` | " + " | ".join(cells) + " |")
    return out + [""]


def short(spec: str) -> str:
    return spec.replace("static:agents/tuned/default.json", "static").replace(
        "pick:checkpoints/pick;static=agents/tuned/default.json", "pick")


def summary(rows: list[dict[str, Any]], seeds: list[int]) -> list[str]:
    """Per scenario × truth: the worst deployed loss, the largest |calibrated − reference| at ×1 and ×1.25,
    OOM failures per arm, the latest batch at which a calibration still moved."""
    out = ["| scenario | truth | deployed − reference, worst cell | calibrated − reference at ×1, ×1.25: "
           "worst | cells within 2 points (×1, ×1.25) | OOM failures deployed / calibrated / reference | "
           "batches until the fit is within 5 % for good (max; runs that never were) | last calibration move "
           "(batch, max) |", "|---|---|---|---|---|---|---|---|"]
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        for truth in dict.fromkeys(r["truth"] for r in rows if r["scenario"] == scenario):
            mine = [r for r in rows if r["scenario"] == scenario and r["truth"] == truth]
            by = {(r["spec"], r["arm"], r["load"], r["seed"]): r["weighted"] for r in mine}
            cells = list(dict.fromkeys((s, x) for s, _, x, _ in by))  # file order: a tie picks one cell every run

            def diff(spec: str, x: float, arm: str, by: dict = by) -> float:
                return 100 * float(np.mean([by[(spec, arm, x, s)] - by[(spec, "reference", x, s)] for s in seeds]))

            worst = min(cells, key=lambda c: diff(*c, "deployed"))
            band = [c for c in cells if c[1] in (1.0, 1.25)]
            far = max(band, key=lambda c: abs(diff(*c, "calibrated")))
            within = sum(abs(diff(*c, "calibrated")) <= 2 for c in band)
            oom = "/".join(str(sum(r["failed"] for r in mine if r["arm"] == a)) for a in ARMS)
            cal = [r for r in mine if r["arm"] == "calibrated"]
            last = max(r["last_move"] for r in cal)
            settled = [r["converged_at"] for r in cal if r["converged_at"] is not None]
            never = sum(r["converged_at"] is None for r in cal)
            settling = (f"{max(settled, default=0)}; {never} of {len(cal)}" if scaled_only(TRUTHS[truth])
                        else "n/a (another profile's form)" if TRUTHS[truth].profile
                        else "n/a (a form term)" if TRUTHS[truth].cache is None
                        else "n/a (a per-request share: no scale is exact)")
            out.append(f"| {scenario} | {truth} | {diff(*worst, 'deployed'):+.1f} "
                       f"(`{short(worst[0])}` ×{worst[1]:g}) | "
                       f"{diff(*far, 'calibrated'):+.1f} (`{short(far[0])}` ×{far[1]:g}) | {within} of {len(band)} | "
                       f"{oom} | {settling} | {last} |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default=",".join(POLICIES))
    ap.add_argument("--seeds", default="1000,1001,1002,1003,1004")
    ap.add_argument("--loads", default="0.5,0.75,1.0,1.25,1.5")
    ap.add_argument("--duration", type=float, default=None, help="arrival window per run (default: each scenario's)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default="results/belief")
    ap.add_argument("--doc", help="also fill this page's <!-- belief:start --> .. <!-- belief:end --> block")
    ap.add_argument("--truths", default=",".join(TRUTHS), help="the truths to run (names of TRUTHS)")
    ap.add_argument("--merge", action="store_true",
                    help="keep OUT/belief.json's rows of the other truths (same seeds and loads) and add these")
    args = ap.parse_args(argv)
    scenarios, truths = args.scenarios.split(","), args.truths.split(",")
    seeds, loads = [int(s) for s in args.seeds.split(",")], [float(x) for x in args.loads.split(",")]
    tasks = [(sc, truth, spec, arm, x, s, args.duration) for sc in scenarios for truth in truths
             for spec in POLICIES[sc] for x in loads for arm in ARMS for s in seeds]
    out = Path(args.out)
    kept, before = merged(out / "belief.json", truths, seeds, loads) if args.merge else ([], {})
    t0, rows = time.perf_counter(), []
    for i, row in enumerate(run_tasks(run, tasks, args.workers), 1):
        rows.append(row)
        if i % 100 == 0 or i == len(tasks):
            print(f"{i}/{len(tasks)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    command = ("python scripts/belief_harm.py " + shlex.join(argv if argv is not None else sys.argv[1:])).strip()
    meta = {"seeds": seeds, "loads": loads, "command": " && ".join(filter(None, (before.get("command"), command))),
            "wall_s": before.get("wall_s", 0.0) + time.perf_counter() - t0,
            "truths": {k: truth_dict(v) for k, v in TRUTHS.items()}}
    rows = order(kept + rows)
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    write_atomic(out / "belief.json", dumps(meta, rows))
    lines = ["Class-weighted SLO attainment (%) with the GPU's true cost off the profile: each cell is the "
             "reference's (deployed with the true profile) attainment, then deployed − reference / calibrated − "
             f"reference (points, paired mean ± 95 % interval over seeds {seeds[0]}-{seeds[-1]}); OOM failures "
             "per arm (deployed/calibrated/reference) where any.", "", *summary(rows, seeds)]
    for sc in scenarios:
        for truth in dict.fromkeys(r["truth"] for r in rows if r["scenario"] == sc):
            lines += table(rows, sc, truth, loads, seeds)
    lines.append(f"Command: `{meta['command']}` ({meta['wall_s'] / 60:.1f} min wall, {args.workers} workers).")
    write_atomic(out / "belief.md", "\n".join(lines) + "\n")
    if args.doc:
        fill(Path(args.doc), "\n".join(lines))
    print("\n".join(lines))
    return 0


def merged(path: Path, truths: list[str], seeds: list[int], loads: list[float]) -> tuple[list[dict], dict]:
    """(the rows of ``path`` of truths other than ``truths``, its meta): ``--merge`` adds truths to a table
    without re-running the others (the same seeds and loads, or it refuses)."""
    old = json.loads(path.read_text())
    meta = old["meta"]
    if (meta["seeds"], meta["loads"]) != (seeds, loads):
        raise SystemExit(f"{path}: seeds {meta['seeds']} and loads {meta['loads']}, not {seeds} and {loads}")
    return [r for r in old["rows"] if r["truth"] not in truths], meta


def order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in the table's order: scenario (as first met), then truth as ``TRUTHS`` lists them (runs of one
    cell keep theirs)."""
    first = {sc: i for i, sc in enumerate(dict.fromkeys(r["scenario"] for r in rows))}
    rank = {t: i for i, t in enumerate(TRUTHS)}
    return sorted(rows, key=lambda r: (first[r["scenario"]], rank[r["truth"]]))


def truth_dict(truth: Truth) -> dict[str, Any]:
    out = dataclasses.asdict(truth)
    if out["cache"] is not None:
        out["cache"].pop("_memo", None)
    return out


def dumps(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """``{"meta": ..., "rows": [...]}`` with one row per line (3,240 rows: half the size of an indented file,
    and a diff shows which runs changed)."""
    body = ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows)
    return f'{{"meta": {json.dumps(meta)},\n"rows": [\n{body}\n]}}\n'


def fill(page: Path, text: str) -> None:
    """Replace what is between the page's belief markers with ``text``."""
    doc = page.read_text()
    head, start, rest = doc.partition("<!-- belief:start -->")
    _, end, tail = rest.partition("<!-- belief:end -->")
    if not start or not end:
        raise SystemExit(f"{page}: no <!-- belief:start --> .. <!-- belief:end --> block")
    write_atomic(page, f"{head}{start}\n{text}\n{end}{tail}")


if __name__ == "__main__":
    raise SystemExit(main())
