"""How much can choosing among feasible batches gain over the tuned heuristic? Learned policy vs its ceilings.

Runs ``static`` (the per-scenario tuned heuristic), the learned candidate policy (``pick``),
the realizable look-ahead teacher (``lookahead``: each candidate simulated with the requests
already queued, the heuristic finishing the fork) and the hindsight teacher (``hindsight``:
the same, knowing the next ``--future`` seconds of arrivals, as the labels do — a ceiling no
online policy reaches) on
the same seeded workloads, and writes the paired per-seed differences against ``static``
with 95 % intervals (markdown table, JSON and a plot). Slow by design: the teachers simulate
every candidate at every decision (minutes per episode).

    python scripts/lookahead_ceiling.py --seed0 1000 --seeds 4 --loads 0.5,1.0,1.5 --duration 3600 \
        --pick checkpoints/pick --out results/ceiling
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rlsched.parallel import run_tasks
from rlsched.plotstyle import style_of, styles_for
from rlsched.policies import make_policy
from rlsched.policies.lookahead import LookaheadPolicy
from rlsched.policies.static import load_static
from rlsched.run import RunSpec, ci95_half_width, prepare
from rlsched.sim.metrics import summarize


def run(task: tuple[str, str, int, float, float, float]) -> float:
    scenario, policy, seed, load, duration, future_s = task
    sim = prepare(RunSpec(scenario, policy, seed, load, duration))
    spec = policy.format(scenario=scenario)
    if spec.startswith("hindsight:"):  # with this script's horizon rather than the registry's 30 min
        sim.run(LookaheadPolicy(load_static(spec.partition(":")[2]), future_s))
    else:
        sim.run(make_policy(spec))
    return float(summarize(sim)["weighted_slo_attainment"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default="default,omni-mix,trace-azure,bursty")
    p.add_argument("--loads", default="0.5,1.0,1.5")
    p.add_argument("--seed0", type=int, default=1000, help="first seed (>= 1000: evaluation seeds)")
    p.add_argument("--seeds", type=int, default=4, help="how many consecutive seeds")
    p.add_argument("--duration", type=float, default=3600.0, help="arrival window per run (s)")
    p.add_argument("--pick", default="checkpoints/pick", help="the learned candidate policy's checkpoint")
    p.add_argument("--future", type=float, default=600.0,
                   help="hindsight horizon in s (the labels' default; `hindsight:` in the registry sees 1800)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="results/ceiling")
    args = p.parse_args()
    static = "agents/tuned/{scenario}.json"
    policies = {"static": f"static:{static}", "learned (pick)": f"pick:{args.pick};static={static}",
                "lookahead (teacher)": f"lookahead:{static}", "hindsight (ceiling)": f"hindsight:{static}"}
    scenarios, loads = args.scenarios.split(","), [float(x) for x in args.loads.split(",")]
    seeds = list(range(args.seed0, args.seed0 + args.seeds))
    tasks = [(sc, pol, s, rs, args.duration, args.future) for sc in scenarios for rs in loads for s in seeds
             for pol in policies.values()]
    res = dict(zip(tasks, run_tasks(run, tasks, args.workers)))
    rows = []
    for sc in scenarios:
        for rs in loads:
            base = np.array([res[(sc, policies["static"], s, rs, args.duration, args.future)] for s in seeds])
            row = {"scenario": sc, "load": rs, "static": 100 * base.mean()}
            for name, pol in list(policies.items())[1:]:
                d = 100 * (np.array([res[(sc, pol, s, rs, args.duration, args.future)] for s in seeds]) - base)
                row[name] = (float(d.mean()), float(ci95_half_width(d)))
            rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(policies)[1:]
    lines = [f"Paired difference to `static` (points of class-weighted SLO attainment, mean ± 95 % interval over "
             f"seeds {seeds[0]}-{seeds[-1]}, {args.duration:g} s windows, hindsight horizon {args.future:g} s).", "",
             "| scenario | load | static | " + " | ".join(f"{n} − static" for n in names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for r in rows:
        lines.append(f"| {r['scenario']} | ×{r['load']:g} | {r['static']:.1f} | "
                     + " | ".join(f"{r[n][0]:+.1f} ± {r[n][1]:.1f}" for n in names) + " |")
    (out / "ceiling.md").write_text("\n".join(lines) + "\n")
    (out / "ceiling.json").write_text(json.dumps({"seeds": seeds, "duration_s": args.duration,
                                                  "future_s": args.future, "rows": rows},
                                                 indent=1))
    _plot(rows, names, scenarios, loads, out / "ceiling.png")
    print("\n".join(lines))


def _plot(rows: list[dict], names: list[str], scenarios: list[str], loads: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = styles_for(names)
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4 * len(scenarios), 3.4), sharey=True)
    for ax, sc in zip(np.atleast_1d(axes), scenarios):
        for k, name in enumerate(names):
            pts = [r for r in rows if r["scenario"] == sc]
            x = np.arange(len(pts)) + (k - 1) * 0.22
            st = styles[name]
            ax.errorbar(x, [r[name][0] for r in pts], yerr=[r[name][1] for r in pts], color=st.color,
                        marker=st.marker, linestyle="none", capsize=3, label=name)
        ax.axhline(0, color=style_of("static").color, lw=1.2, linestyle="--", label="static (the reference)")
        ax.set_xticks(range(len(loads)), [f"×{x:g}" for x in loads])
        ax.set_title(sc)
        ax.set_xlabel("load")
    np.atleast_1d(axes)[0].set_ylabel("− static (points)")
    np.atleast_1d(axes)[-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
