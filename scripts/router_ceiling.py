"""How much could a router or a central dispatcher gain over the strongest heuristic? The ceilings.

On each multi-replica pool, on the same seeded workloads, runs:

* the rivals: rlsched's router with the pool's tuned replica policy (``static@rlsched``) and
  every plain router × heuristic combination (``make results-replicas``'s set); the
  *strongest heuristic router* of a cell is the one of them with the highest mean;
* late binding, ``static@central`` (one central queue), shown beside the teachers;
* the realizable look-ahead teacher ``static@lookahead:H`` (each replica the arrival fits on
  tried on a fork holding the requests already known, ``static@rlsched`` finishing it over
  ``H`` seconds; ``rlsched.routing.teachers``);
* the hindsight teacher ``static@hindsight:H;top=K`` (the same, the fork also receiving the
  next ``H`` seconds of real arrivals; at most ``K`` replicas tried: rlsched's choice and the
  ``K-1`` best by realizable gain);
* late binding's teachers ``static@central-lookahead:H`` (when a replica frees, each of the
  central policy's candidate batches for it, and holding it idle, tried on a fork of the whole
  stage holding the known requests, ``static@central`` finishing it over ``H`` seconds),
  ``static@central-replay:H`` (realizable too: the forks also receive the last ``H`` s of
  arrivals again, as the forecast of the next ``H``) and ``static@central-hindsight:H`` (the
  forks receive the real next ``H`` s of arrivals);

and writes the per-seed paired differences against the strongest heuristic router with 95 %
intervals, and every role's against the best *deployed* heuristic of the cell (the strongest
router or ``static@central``, whichever meets more): ``OUT/ceiling.md``, ``ceiling.json``
(every run) and ``ceiling.png``. ``--roles`` runs a subset. The teachers
are slow by design (every arrival × replicas tried forks, each run forward), so the windows
are short; ``video-8gpu`` (step mode) runs on its own (see ``SKIPPED``).

    python scripts/router_ceiling.py --workers 2 --out results/router-ceiling
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.atomic import write_atomic
from rlsched.evaluation import BASELINE_STAGED
from rlsched.parallel import run_tasks
from rlsched.plotstyle import TABLE, style_of
from rlsched.policies import make_policy
from rlsched.routing.routers import LATE_REPLICA_POLICY, central_policies, check_spec, is_late, make_router, split_pair
from rlsched.run import RunSpec, ci95_half_width, prepare_stage
from rlsched.sim import load_scenario
from rlsched.sim.metrics import json_safe, summarize_stage

TUNED = {"qwen-image-8gpu": "default", "qwen-image-hetero": "default", "video-8gpu": "video-mix",
         "azure-8gpu": "trace-azure"}
"""Each pool's one-GPU counterpart, whose tuned action its replicas run (as ``make results-replicas``)."""
PLAIN = ("fifo@round-robin", "fifo@least-queue", "fifo@random", "edf@least-queue", "edf@least-work",
         "edf@affinity", "sjf@least-work")
"""The plain router × heuristic combinations (the Makefile's ``STAGE_PLAIN``)."""
SKIPPED = {"video-8gpu": "not in the default set (step mode; measured on its own with 3600 s windows, "
                         "results/router-ceiling/video-8gpu: `--pools video-8gpu --duration 3600`)"}
"""Pools left out of the default set, and why."""
ROLES = ("lookahead", "hindsight", "central", "central-lookahead", "central-replay", "central-hindsight", "learned")
TEACHER_ROLES = ("lookahead", "hindsight", "central-lookahead", "central-replay", "central-hindsight")
REALIZABLE = ("lookahead", "central-lookahead", "central-replay")
"""The teachers that decide on what an online scheduler knows: the room a learned policy could take."""
ROOM_POINTS = 5.0
"""Issue 37: a learned dispatcher is built only where the realizable teachers add at least this many
points over the best deployed heuristic."""


def specs(pool: str, horizon: float, top: int, learned: str = "", roles: tuple[str, ...] = ROLES,
          hold: float | None = None) -> dict[str, str]:
    """role -> spec on ``pool``: the rivals (``rival:…``), late binding, the teachers of ``roles`` and
    (with ``learned``, a router checkpoint) the learned router behind the same replica policy."""
    s = f"static:agents/tuned/{TUNED[pool]}.json"
    out = {f"rival:{p}": p for p in (f"{s}@rlsched", *PLAIN)}
    out["central"] = f"{s}@central"
    held = f";hold={hold:g}" if hold is not None else ""
    every = {"lookahead": f"{s}@lookahead:{horizon:g}",
             "hindsight": f"{s}@hindsight:{horizon:g}" + (f";top={top}" if top else ""),
             "central-lookahead": f"{s}@central-lookahead:{horizon:g}{held}",
             "central-replay": f"{s}@central-replay:{horizon:g}{held}",
             "central-hindsight": f"{s}@central-hindsight:{horizon:g}{held}"}
    out.update({role: spec for role, spec in every.items() if role in roles})
    if learned:
        out["learned"] = f"{s}@router:{learned}"
    return out


def run(task: tuple[str, str, int, float, float]) -> dict[str, Any]:
    """One run: the stage's metrics, its wall time and, for a teacher, how often it looked and
    bound elsewhere than rlsched's router."""
    pool, spec, seed, load, duration = task
    t0 = time.perf_counter()
    stage = prepare_stage(RunSpec(pool, spec, seed, load, duration), load_scenario(pool))
    policy, router_spec = split_pair(spec)
    extra: dict[str, Any] = {}
    if is_late(router_spec):
        central, made = central_policies(router_spec, policy), []

        def make() -> Any:
            made.append(central())
            return made[-1]

        stage.run([make_policy(LATE_REPLICA_POLICY) for _ in stage.replicas], central=make)  # run_spec's, counted
        if hasattr(made[0], "looked"):
            extra = {k: sum(getattr(p, k) for p in made) for k in ("looked", "changed", "held", "forks")}
    else:
        router = make_router(router_spec, policy)
        stage.run([make_policy(policy) for _ in stage.replicas], router)
        if hasattr(router, "looked"):
            extra = {"looked": router.looked, "changed": router.changed, "forks": router.forks}
    if router_spec.split(":", 1)[0] == "router":  # which learned router: --reuse must not mix two
        extra["checkpoint"] = _checkpoint_hash(router_spec)
    m = summarize_stage(stage)
    return {"pool": pool, "spec": spec, "seed": seed, "load": load, "requests": stage.total_requests,
            "weighted": float(m["weighted_slo_attainment"]), "slo": float(m["slo_attainment"]),
            "wall_s": time.perf_counter() - t0, **extra}


@functools.cache
def _checkpoint_hash(router_spec: str) -> str:
    from rlsched.learned.checkpoint import META, checkpoint_path
    from rlsched.learned.router import DEFAULT_CHECKPOINT

    folder = checkpoint_path(router_spec.partition(":")[2], DEFAULT_CHECKPOINT)
    return str(json.loads((folder / META).read_text())["content_sha256"])


def cells(rows: list[dict[str, Any]], pools: list[str], loads: list[float], seeds: list[int],
          roles: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Per (pool, load): the strongest heuristic router and each role's paired difference to it."""
    value = {(r["pool"], r["spec"], r["load"], r["seed"]): r["weighted"] for r in rows}
    slo = {(r["pool"], r["spec"], r["load"], r["seed"]): r["slo"] for r in rows}
    out = []
    for pool in pools:
        for load in loads:
            def per_seed(spec: str) -> np.ndarray:
                return np.array([value[(pool, spec, load, s)] for s in seeds])  # noqa: B023

            rivals = [spec for role, spec in roles[pool].items() if role.startswith("rival:")]
            best = max(rivals, key=lambda spec: per_seed(spec).mean())
            deployed = max([best, roles[pool]["central"]], key=lambda spec: per_seed(spec).mean())
            base, top = per_seed(best), per_seed(deployed)
            cell: dict[str, Any] = {
                "pool": pool, "load": load, "strongest": best, "strongest_value": 100 * float(base.mean()),
                "deployed": deployed, "deployed_value": 100 * float(top.mean()),
                "fifo_rr_slo": 100 * float(np.mean([slo[(pool, BASELINE_STAGED, load, s)] for s in seeds])),
                "rivals": {spec: 100 * float(per_seed(spec).mean()) for spec in rivals}}
            for role in (r for r in ROLES if r in roles[pool]):
                mine = per_seed(roles[pool][role])
                cell[role] = {"value": 100 * float(mine.mean()), **paired(mine, base),
                              "vs_deployed": paired(mine, top)}
            spec_role = {spec: role for role, spec in roles[pool].items()}
            for r in (r for r in rows if r["pool"] == pool and r["load"] == load and "looked" in r):
                stats = cell[spec_role[r["spec"]]].setdefault("bound_elsewhere", [])
                stats.append(r["changed"] / max(r["requests"], 1))
            realizable = [cell[r]["vs_deployed"]["diff"] for r in REALIZABLE if r in cell]
            cell["room"] = max(realizable) if realizable else math.nan
            out.append(cell)
    return out


def paired(mine: np.ndarray, base: np.ndarray) -> dict[str, float]:
    """``mine`` − ``base`` per seed in points: mean, 95 % half-width, and the ratio of the means."""
    diff = 100 * (mine - base)
    return {"diff": float(diff.mean()), "ci95": float(ci95_half_width(diff)),
            "ratio": float(mine.mean() / base.mean()) if base.mean() else math.nan}


def short(spec: str) -> str:
    """``static:agents/tuned/x.json@rlsched`` -> ``static@rlsched``."""
    policy, router = split_pair(spec)
    return f"{policy.split(':', 1)[0]}@{router}"


def markdown(cs: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    seeds = meta["seeds"]
    learned = all("learned" in c for c in cs)
    windows = ", ".join(f"{p} {d:g} s" for p, d in meta["windows"].items())
    lines = [f"Router ceilings: class-weighted SLO attainment (%) of the strongest heuristic router (the best of "
             f"`static@rlsched` and the plain router × heuristic combinations, by mean, per cell) and each "
             f"teacher's paired difference to it (points, mean ± 95 % interval over evaluation seeds "
             f"{seeds[0]}-{seeds[-1]}). Arrival windows: {windows}; horizon H = {meta['horizon_s']:g} s "
             f"(each fork runs H s; hindsight also sees the next H s of arrivals, trying at most "
             f"{meta['top'] or 'every'} replicas: rlsched's choice and the best others by realizable gain). "
             f"Replica policy everywhere: the pool's tuned `static`.", "",
             "| pool | load | `fifo@round-robin` meets | strongest heuristic router | its value | "
             + ("learned router − it | " if learned else "")
             + "look-ahead − it | hindsight − it | `static@central` − it | "
             + ("learned ÷ it | " if learned else "") + "look-ahead ÷ it | hindsight ÷ it |",
             "|---|---|---|---|---|" + "---|" * (7 if learned else 5)]
    for c in cs:
        mine = (f"{_pm(c, 'learned')} | ", f"{_ratio(c, 'learned')} | ") if learned else ("", "")
        lines.append(f"| {c['pool']} | ×{c['load']:g} | {c['fifo_rr_slo']:.1f} % | `{short(c['strongest'])}` | "
                     f"{c['strongest_value']:.1f} | {mine[0]}{_pm(c, 'lookahead')} | {_pm(c, 'hindsight')} | "
                     f"{_pm(c, 'central')} | {mine[1]}{_ratio(c, 'lookahead')} | {_ratio(c, 'hindsight')} |")
    band = [c for c in cs if 40 <= c["fifo_rr_slo"] <= 80 and "lookahead" in c and "hindsight" in c]
    lines.append("")
    if band:
        la = np.mean([c["lookahead"]["ratio"] for c in band])
        hs = np.mean([c["hindsight"]["ratio"] for c in band])
        names = ", ".join(f"{c['pool']} ×{c['load']:g}" for c in band)
        mine = f"learned router ×{np.mean([c['learned']['ratio'] for c in band]):.3f}, " if learned else ""
        lines.append(f"Over the cells where `fifo@round-robin` meets 40–80 % of SLOs ({names}): {mine}look-ahead "
                     f"×{la:.3f}, hindsight ×{hs:.3f} the strongest heuristic router (mean ratio; issue 20's "
                     f"target for a learned router: ×1.05).")
    if learned:
        worst = min(cs, key=lambda c: c["learned"]["ratio"])
        above = [c for c in band if c["learned"]["diff"] - c["learned"]["ci95"] > 0]
        lines += ["", f"Learned router (`{meta['learned']}`): worst cell {worst['pool']} ×{worst['load']:g} "
                  f"×{worst['learned']['ratio']:.3f} (issue 20: never below ×0.98); paired 95 % interval above "
                  f"the strongest in {len(above)} of the {len(band)} band cells"
                  + (f" ({', '.join(c['pool'] + ' ×' + format(c['load'], 'g') for c in above)})" if above else "")
                  + "."]
    early = [r for r in ("lookahead", "hindsight") if all(r in c for c in cs)]
    if early:
        bound = [(c["pool"], c["load"], *(np.mean(c[r].get("bound_elsewhere", [0])) for r in early)) for c in cs]
        lines += ["", f"Share of arrivals the teachers ({' / '.join(early)}) bound elsewhere than rlsched's router "
                  "would: " + "; ".join(f"{p} ×{x:g} " + " / ".join(f"{100 * v:.1f} %" for v in vs)
                                        for p, x, *vs in bound) + "."]
    lines += ["", *late_table(cs, learned)]
    for pool, why in meta["skipped"].items():
        lines += ["", f"Not measured: {pool} — {why}."]
    reused = (f" in all: {meta['reused']} runs reused from the previous ceiling.json, the rest run now"
              if meta.get("reused") else "")
    lines += ["", f"Command: `{meta['command']}` ({meta['wall_s'] / 60:.1f} min wall{reused}, {meta['workers']} "
              f"workers)."]
    return "\n".join(lines) + "\n"


def _pm(c: dict[str, Any], role: str, key: str | None = None) -> str:
    """``role``'s paired difference in cell ``c`` (to the strongest router; ``key="vs_deployed"``: to the best
    deployed heuristic), or a dash when the role did not run."""
    if role not in c:
        return "—"
    d = c[role][key] if key else c[role]
    return f"{d['diff']:+.1f} ± {d['ci95']:.1f}"


def _ratio(c: dict[str, Any], role: str) -> str:
    return f"{c[role]['ratio']:.3f}" if role in c else "—"


def late_table(cs: list[dict[str, Any]], learned: bool) -> list[str]:
    """Every role against the best *deployed* heuristic of each cell (the strongest router or late
    binding), and the room the realizable teachers show (issue 37: a learned dispatcher only where it
    is at least ``ROOM_POINTS``)."""
    names = {"central-lookahead": "late look-ahead", "central-replay": "late replay",
             "central-hindsight": "late hindsight", "lookahead": "early look-ahead",
             "hindsight": "early hindsight", "learned": "learned router"}
    roles = [r for r in names if any(r in c for c in cs) and (r != "learned" or learned)]
    out = ["Against the best deployed heuristic of each cell (`static@rlsched`, a plain router or `static@central`, "
           "whichever meets more): class-weighted SLO attainment (%) of the deployable specs, each teacher's paired "
           "difference to the best (points ± 95 %); room: the best realizable teacher's mean gain over it.", "",
           "| pool | load | `fifo@round-robin` | `static@rlsched` | `static@central` | best deployed heuristic | "
           + " | ".join(f"{names[r]} − it" for r in roles) + " | room |",
           "|---|---|---|---|---|---|" + "---|" * (len(roles) + 1)]
    for c in cs:
        rlsched = next(v for spec, v in c["rivals"].items() if short(spec) == "static@rlsched")
        out.append(f"| {c['pool']} | ×{c['load']:g} | {c['rivals'][BASELINE_STAGED]:.1f} | {rlsched:.1f} | "
                   f"{c['central']['value']:.1f} | `{short(c['deployed'])}` | "
                   + " | ".join(_pm(c, r, "vs_deployed") for r in roles) + f" | {c['room']:+.1f} |")
    rooms = [c for c in cs if c["room"] >= ROOM_POINTS]
    held = [c for c in cs if "central-lookahead" in c and c["central-lookahead"].get("bound_elsewhere")]
    out.append("")
    out.append(f"Cells where a realizable teacher adds ≥ {ROOM_POINTS:g} points over the best deployed heuristic: "
               + (", ".join(f"{c['pool']} ×{c['load']:g} ({c['room']:+.1f})" for c in rooms) if rooms else
                  "none") + ".")
    if held:
        out.append("Share of late binding's dispatches the look-ahead teacher decided otherwise than "
                   "`static@central`: " + "; ".join(
                       f"{c['pool']} ×{c['load']:g} {100 * np.mean(c['central-lookahead']['bound_elsewhere']):.1f} %"
                       for c in held) + " (of requests).")
    return out


def plot(cs: list[dict[str, Any]], pools: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(pools), figsize=(4.6 * len(pools), 3.8), squeeze=False)
    series = [("strongest heuristic router", None, style_of("static@rlsched")),
              ("static@central (late binding)", "central", style_of("static@central")),
              ("early look-ahead teacher (realizable)", "lookahead", replace(TABLE["lookahead"], linestyle="--")),
              ("early hindsight teacher (ceiling)", "hindsight", replace(TABLE["hindsight"], linestyle="-."))]
    if all("central-lookahead" in c for c in cs):
        series.append(("late look-ahead teacher (realizable)", "central-lookahead",
                       replace(TABLE["lookahead"], color="#1b9e77", linestyle="-")))
    if all("central-hindsight" in c for c in cs):
        series.append(("late hindsight teacher (ceiling)", "central-hindsight",
                       replace(TABLE["hindsight"], color="#1b9e77", linestyle="-.")))
    if all("learned" in c for c in cs):
        series.append(("learned router", "learned", replace(TABLE["pick"], linestyle="-")))
    for ax, pool in zip(axes[0], pools):
        pts = sorted((c for c in cs if c["pool"] == pool), key=lambda c: c["load"])
        x0 = np.array([c["load"] for c in pts])
        low = 100.0
        for k, (name, role, st) in enumerate(series):
            x = x0 + (k - (len(series) - 1) / 2) * 0.012  # side by side, so the intervals do not hide each other
            if role is None:
                y, e = np.array([c["strongest_value"] for c in pts]), np.zeros(len(pts))
            elif role not in pts[0]:
                continue
            else:  # the strongest's mean plus the paired difference, its interval as error bar
                y = np.array([c["strongest_value"] + c[role]["diff"] for c in pts])
                e = np.nan_to_num(np.array([c[role]["ci95"] for c in pts]))
            ax.errorbar(x, y, yerr=e, capsize=3, label=name, markersize=5, **st.line())
            low = min(low, float(np.min(y - e)))
        for c in pts:
            ax.annotate(short(c["strongest"]), (c["load"], c["strongest_value"]), fontsize=6,
                        textcoords="offset points", xytext=(3, -10))
        ax.set(title=pool, xlabel="load (× nominal rate)", ylabel="class-weighted SLO attainment %",
               ylim=(max(0.0, low - 3), 101), xticks=x0)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.text(0.01, 0.005, "error bars: paired 95 % interval of the difference to the strongest heuristic router",
             fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pools", default="qwen-image-8gpu,qwen-image-hetero,azure-8gpu")
    p.add_argument("--loads", default="0.5,1.0,1.5")
    p.add_argument("--seed0", type=int, default=1000, help="first seed (>= 1000: evaluation seeds)")
    p.add_argument("--seeds", type=int, default=3, help="how many consecutive seeds")
    p.add_argument("--duration", type=float, default=1800.0, help="arrival window per run (s)")
    p.add_argument("--window", action="append", default=["azure-8gpu=7200"], metavar="POOL=SECONDS",
                   help="a pool's own window (the trace's first hour is nearly empty at x0.5-x1)")
    p.add_argument("--horizon", type=float, default=180.0, help="seconds each fork runs (hindsight: and sees)")
    p.add_argument("--top", type=int, default=3, help="hindsight tries at most this many replicas (0: all)")
    p.add_argument("--hold", type=float, default=None,
                   help="seconds late binding's teachers may hold a freed replica (default: theirs, 5; 0: never)")
    p.add_argument("--roles", default=",".join(TEACHER_ROLES),
                   help=f"the teachers to run (comma-separated, of {', '.join(TEACHER_ROLES)}); the rivals and "
                        "static@central always run")
    p.add_argument("--learned", default="checkpoints/router",
                   help="learned router checkpoint shown beside the teachers ('' for none)")
    p.add_argument("--reuse", action="store_true",
                   help="keep the runs of OUT/ceiling.json that match this command's tasks; run only the rest "
                        "(e.g. the learned router's, after retraining it: pass the same pools, loads, seeds, windows)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="results/router-ceiling")
    p.add_argument("--replot", action="store_true", help="re-write ceiling.md and ceiling.png from OUT/ceiling.json")
    args = p.parse_args()
    if args.replot:
        out = Path(args.out)
        data = json.loads((out / "ceiling.json").read_text())
        write_atomic(out / "ceiling.md", markdown(data["cells"], data))
        plot(data["cells"], data["pools"], out / "ceiling.png")
        return
    pools, loads = args.pools.split(","), [float(x) for x in args.loads.split(",")]
    unknown = [x for x in pools if x not in TUNED]
    if unknown:
        p.error(f"no tuned counterpart known for {', '.join(unknown)} (known: {', '.join(TUNED)})")
    if args.seed0 < 1000:
        p.error("--seed0 must be >= 1000: the ceilings are measured on evaluation seeds")
    windows = {pool: args.duration for pool in pools}
    for item in args.window:
        pool, _, secs = item.partition("=")
        if pool in windows:
            windows[pool] = float(secs)
    seeds = list(range(args.seed0, args.seed0 + args.seeds))
    picked = tuple(args.roles.split(",")) if args.roles else ()
    if set(picked) - set(TEACHER_ROLES):
        p.error(f"--roles: unknown {', '.join(sorted(set(picked) - set(TEACHER_ROLES)))} "
                f"(known: {', '.join(TEACHER_ROLES)})")
    roles = {pool: specs(pool, args.horizon, args.top, args.learned, picked, args.hold) for pool in pools}
    for pool in pools:  # every spec builds (files read) before the first run
        for spec in roles[pool].values():
            check_spec(spec)
    # the slowest first (hindsight, the heaviest load), so two workers finish together
    tasks = sorted(((pool, spec, s, load, windows[pool]) for pool in pools for load in loads for s in seeds
                    for spec in roles[pool].values()),
                   key=lambda t: (-("hindsight" in t[1]), -("lookahead" in t[1]), -t[3], t[0], t[1], t[2]))
    from rich.progress import Progress

    out = Path(args.out)
    rows, reused, earlier_s = [], 0, 0.0
    if args.reuse and (out / "ceiling.json").is_file():
        old = json.loads((out / "ceiling.json").read_text())
        earlier_s = float(old.get("wall_s", 0.0))
        want = {(t[0], t[1], t[2], t[3]): t for t in tasks}
        for r in old["runs"]:
            key = (r["pool"], r["spec"], r["seed"], r["load"])
            stale = "checkpoint" in r and r["checkpoint"] != _checkpoint_hash(split_pair(r["spec"])[1])
            if key in want and old["windows"].get(r["pool"]) == windows[r["pool"]] and not stale:
                rows.append(r)
                del want[key]
        reused = len(rows)
        tasks = [t for t in tasks if (t[0], t[1], t[2], t[3]) in want]
    t0 = time.perf_counter()
    with Progress() as bar:
        job = bar.add_task("router ceilings", total=len(tasks))
        for row in run_tasks(run, tasks, args.workers):
            rows.append(row)
            bar.advance(job)
    wall = time.perf_counter() - t0
    cs = cells(rows, pools, loads, seeds, roles)
    meta = {"pools": pools, "loads": loads, "seeds": seeds, "windows": windows, "horizon_s": args.horizon,
            "hold_s": args.hold,
            "top": args.top, "specs": roles, "skipped": {k: v for k, v in SKIPPED.items() if k not in pools},
            "workers": args.workers, "wall_s": wall + (earlier_s if reused else 0.0), "reused": reused,
            "learned": args.learned,
            "command": "python scripts/router_ceiling.py " + " ".join(sys.argv[1:])}
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(cs, meta)
    write_atomic(out / "ceiling.md", text)
    write_atomic(out / "ceiling.json", json.dumps(json_safe({**meta, "cells": cs, "runs": rows}), indent=1))
    plot(cs, pools, out / "ceiling.png")
    print(text)


if __name__ == "__main__":
    main()
