"""Ceilings first (issue 46): how much a per-request cost predictor could win under a cache backend.

A cache backend (TeaCache, Cache-DiT: ``truth: {cache: ...}``, ``rlsched.sim.cache_backend``) skips a
share of each request's denoise steps that depends on its content and that no scheduler sees. Online
calibration can learn its *mean* (the step terms shrink); only a per-request predictor could learn more.
Before building one, this measures the room it would have: on the same seeded workloads each policy runs

* **profile** — deciding on the shipped profile, uncalibrated (``POLICY;calibrate=off``);
* **calibrated** — refitting the profile online from each batch's duration (the default: the calibrated mean);
* **oracle** — deciding on each request's true cost, its hidden share included (``RunSpec(belief="truth")``,
  uncalibrated: nothing is left to learn). No deployable predictor beats it.

and reports per scenario, truth, policy and load the class-weighted SLO attainment of each arm and
oracle − calibrated (points, paired mean ± 95 % interval over the seeds). A cell where the oracle leaves
5 points or more is room for a learned per-request predictor; where it leaves less, the calibrated mean is
within reach of what any predictor could do. Writes ``OUT/ceiling.json`` (every run) and ``OUT/ceiling.md``.

    python scripts/cache_ceiling.py --workers 2 --out results/cache-truth
    python scripts/cache_ceiling.py --check    # re-runs one small cell and compares it with OUT/ceiling.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
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
from rlsched.sim.truth import Truth

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harm table's script, beside this one
from belief_harm import arm_spec as harm_arm_spec  # noqa: E402

TRUTHS = {name: Truth(cache={**PRESETS[name], "preset": name}) for name in ("teacache", "cache-dit")}
"""The cache truths measured: TeaCache's and Cache-DiT's presets (their sources in ``rlsched.sim.cache_backend``)."""
POLICIES = {
    "default": ("edf", "sjf", "seed-composite", "static:agents/tuned/default.json"),
    "video-mix": ("edf", "sjf", "static:agents/tuned/video-mix.json"),
    "qwen-image-8gpu": ("edf@least-work", "static:agents/tuned/default.json@rlsched",
                        "static:agents/tuned/default.json@central"),
}
"""Per scenario: deadline and size-aware heuristics and the tuned policy (on eight GPUs behind least-work,
rlsched's router and late binding) — the ones whose decisions read each request's cost. ``seed-composite``
on ``video-mix`` (step mode) takes 5–8 s a run and is left out there."""
ARMS = ("profile", "calibrated", "oracle")
ROOM = 5.0
"""Points of oracle − calibrated from which a learned per-request predictor is worth building (issue 46)."""
CHECK = ("default", "teacache", "sjf", 1.0, (1000, 1001))
"""The small cell ``--check`` re-runs: scenario, truth, policy, load, seeds."""


HARM_ARMS = {"profile": "deployed", "calibrated": "calibrated", "oracle": "reference"}
"""This script's arms as the harm table names them: deciding on the profile, calibrated, on the truth."""


def arm_spec(spec: str, arm: str) -> tuple[str, str]:
    """(policy spec, belief) of ``arm``: the harm table's rule (``belief_harm.arm_spec``) under this script's names."""
    return harm_arm_spec(spec, HARM_ARMS[arm])


def run(task: tuple[str, str, str, str, float, int]) -> dict[str, Any]:
    scenario, truth, spec, arm, load, seed = task
    sc = dataclasses.replace(load_scenario(scenario), truth=TRUTHS[truth])
    policy, belief = arm_spec(spec, arm)
    t0 = time.perf_counter()
    done, m = simulate(RunSpec(scenario, policy, seed, load, belief=belief), sc)
    sims = getattr(done, "replicas", [done])
    scales = [c.summary()["models"] for c in (s.calibrator for s in sims) if c is not None]
    return {"scenario": scenario, "truth": truth, "spec": spec, "arm": arm, "load": load, "seed": seed,
            "weighted": float(m["weighted_slo_attainment"]), "failed": int(m["requests_failed"]),
            "batches": int(m["batches"]), "calibrations": len(scales), "wall_s": round(time.perf_counter() - t0, 3)}


def cells(rows: list[dict[str, Any]], seeds: list[int]) -> list[dict[str, Any]]:
    """One per scenario × truth × policy × load: each arm's mean attainment (%) and oracle − calibrated,
    profile − calibrated (points, paired mean and 95 % half-width over ``seeds``)."""
    by = {(r["scenario"], r["truth"], r["spec"], r["arm"], r["load"], r["seed"]): r["weighted"] for r in rows}
    keys = dict.fromkeys((r["scenario"], r["truth"], r["spec"], r["load"]) for r in rows)
    out = []
    for sc, truth, spec, load in keys:
        arm = {a: 100 * np.array([by[(sc, truth, spec, a, load, s)] for s in seeds]) for a in ARMS}
        room, lost = arm["oracle"] - arm["calibrated"], arm["profile"] - arm["calibrated"]
        out.append({"scenario": sc, "truth": truth, "spec": spec, "load": load,
                    **{a: float(v.mean()) for a, v in arm.items()},
                    "room": float(room.mean()), "room_ci": ci95_half_width(room),
                    "profile_gap": float(lost.mean()), "profile_gap_ci": ci95_half_width(lost)})
    return out


def short(spec: str) -> str:
    return spec.replace("static:agents/tuned/default.json", "static").replace(
        "static:agents/tuned/video-mix.json", "static")


def report(rows: list[dict[str, Any]], seeds: list[int], command: str, wall_s: float, workers: int) -> list[str]:
    table = cells(rows, seeds)
    worst = max(table, key=lambda c: c["room"])
    lines = [f"Class-weighted SLO attainment (%) under a cache backend's hidden per-request step skipping, "
             f"paired over seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} seeds): each arm's mean, then oracle − "
             "calibrated and profile − calibrated (points, mean ± 95 % interval). Profile: deciding on the "
             "shipped profile, uncalibrated; calibrated: the default online calibration (the mean); oracle: "
             "deciding on each request's true cost.", "",
             f"Largest oracle − calibrated: **{worst['room']:+.1f} ± {worst['room_ci']:.1f}** "
             f"({worst['scenario']}, {worst['truth']}, `{short(worst['spec'])}` ×{worst['load']:g}); cells "
             f"at ≥ {ROOM:g} points: {sum(c['room'] >= ROOM for c in table)} of {len(table)}.", "",
             "| scenario | truth | policy | load | profile | calibrated | oracle | oracle − calibrated | "
             "profile − calibrated |", "|---|---|---|---|---|---|---|---|---|"]
    for c in table:
        lines.append(f"| {c['scenario']} | {c['truth']} | `{short(c['spec'])}` | ×{c['load']:g} | "
                     f"{c['profile']:.1f} | {c['calibrated']:.1f} | {c['oracle']:.1f} | "
                     f"{c['room']:+.1f} ± {c['room_ci']:.1f} | {c['profile_gap']:+.1f} ± {c['profile_gap_ci']:.1f} |")
    failed = sum(r["failed"] for r in rows)
    lines += ["", f"Requests failed (OOM) over every run: {failed}.", "",
              f"Command: `{command}` ({wall_s / 60:.1f} min wall, {workers} workers)."]
    return lines


def check(out: Path) -> int:
    """Re-run ``CHECK``'s cell and compare every run with ``out/ceiling.json``; 1 on any difference."""
    rows = json.loads((out / "ceiling.json").read_text())["rows"]
    sc, truth, spec, load, seeds = CHECK
    shipped = {(r["arm"], r["seed"]): r["weighted"] for r in rows
               if (r["scenario"], r["truth"], r["spec"], r["load"]) == (sc, truth, spec, load)}
    bad = []
    for arm in ARMS:
        for seed in seeds:
            now = run((sc, truth, spec, arm, load, seed))["weighted"]
            if shipped.get((arm, seed)) != now:
                bad.append(f"{arm} seed {seed}: {shipped.get((arm, seed))} shipped, {now} now")
    print("\n".join(bad) or f"{out / 'ceiling.json'}: {sc} {truth} {spec} ×{load:g} reproduced "
                            f"({len(ARMS) * len(seeds)} runs)")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default=",".join(POLICIES))
    ap.add_argument("--truths", default=",".join(TRUTHS))
    ap.add_argument("--seeds", default=",".join(str(s) for s in range(1000, 1010)))
    ap.add_argument("--loads", default="1.0,1.25")
    ap.add_argument("--stress-loads", default="1.6,2.0",
                    help="further loads for --stress-scenarios (the GPU the cache speeds up, loaded as ×1, ×1.25 "
                         "load it without)")
    ap.add_argument("--stress-scenarios", default="default")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", default="results/cache-truth")
    ap.add_argument("--check", action="store_true", help="re-run one small cell and compare with OUT/ceiling.json")
    ap.add_argument("--doc", help="also fill this page's <!-- cache-ceiling:start --> .. :end --> block")
    ap.add_argument("--from-json", action="store_true", help="rewrite OUT/ceiling.md (and --doc) from OUT/ceiling.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.check:
        return check(out)
    if args.from_json:
        old = json.loads((out / "ceiling.json").read_text())
        meta = old["meta"]
        return publish(out, report(old["rows"], meta["seeds"], meta["command"], meta["wall_s"], workers(meta)),
                       args.doc)
    seeds, loads = [int(s) for s in args.seeds.split(",")], [float(x) for x in args.loads.split(",")]
    stress = [float(x) for x in args.stress_loads.split(",") if x]
    loads_of = {sc: loads + (stress if sc in args.stress_scenarios.split(",") else [])
                for sc in args.scenarios.split(",")}
    tasks = [(sc, truth, spec, arm, x, s) for sc in args.scenarios.split(",") for truth in args.truths.split(",")
             for spec in POLICIES[sc] for x in loads_of[sc] for arm in ARMS for s in seeds]
    out.mkdir(parents=True, exist_ok=True)
    partial = out / "ceiling.partial.jsonl"  # each run as it ends: a killed sweep resumes where it stopped
    done = {task_of(r): r for r in map(json.loads, partial.read_text().splitlines())} if partial.exists() else {}
    rows = [done[t] for t in tasks if t in done]
    todo = [t for t in tasks if t not in done]
    t0, earlier = time.perf_counter(), sum(r["wall_s"] for r in rows) / max(args.workers, 1)
    with partial.open("a") as log:
        for i, row in enumerate(run_tasks(run, todo, args.workers), 1):
            rows.append(row)
            log.write(json.dumps(row, separators=(",", ":")) + "\n")
            log.flush()
            if i % 100 == 0 or i == len(todo):
                print(f"{i}/{len(todo)} runs, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    wall = earlier + time.perf_counter() - t0
    rows.sort(key=lambda r: tasks.index(task_of(r)))
    command = "python scripts/cache_ceiling.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"seeds": seeds, "loads": loads_of, "command": command.strip(), "wall_s": wall,
            "truths": {k: dataclasses.asdict(v.cache) for k, v in TRUTHS.items() if v.cache is not None},
            "room_points": ROOM, "workers": args.workers}
    for truth in meta["truths"].values():
        truth.pop("_memo", None)
    body = ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows)
    write_atomic(out / "ceiling.json", f'{{"meta": {json.dumps(meta)},\n"rows": [\n{body}\n]}}\n')
    partial.unlink()
    return publish(out, report(rows, seeds, meta["command"], wall, args.workers), args.doc)


def task_of(row: dict[str, Any]) -> tuple[str, str, str, str, float, int]:
    return row["scenario"], row["truth"], row["spec"], row["arm"], row["load"], row["seed"]


def workers(meta: dict[str, Any]) -> int:
    found = re.search(r"--workers (\d+)", meta["command"])
    return int(meta.get("workers") or (found.group(1) if found else 1))


def publish(out: Path, lines: list[str], doc: str | None) -> int:
    text = "\n".join(lines)
    write_atomic(out / "ceiling.md", text + "\n")
    if doc:
        page = Path(doc).read_text()
        head, start, rest = page.partition("<!-- cache-ceiling:start -->")
        _, end, tail = rest.partition("<!-- cache-ceiling:end -->")
        if not start or not end:
            raise SystemExit(f"{doc}: no <!-- cache-ceiling:start --> .. <!-- cache-ceiling:end --> block")
        write_atomic(Path(doc), f"{head}{start}\n{text}\n{end}{tail}")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
