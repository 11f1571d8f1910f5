"""Sim vs engine: the same seeded arrivals through the simulator and through a real, time-scaled server.

For each policy: the simulator runs the workload with the serving settings ``rlsched deploy``
writes (request mode, ``max_num_seqs``, no admission wait); then a real ``vllm serve
MODEL_DIR --omni`` with that deploy (plus ``CostProfileExecutor``, which sleeps the same cost
profile's time ÷ ``--time-scale``) gets the same requests over HTTP from ``rlsched.loadgen``.
Compared: the batch sequence (the executor's log vs the simulator's batch ids), each request's
queueing delay (first execution − arrival, profile seconds), and SLO attainment per class as the
plugin measured it (``rlsched_requests_finished_total``, engine finish) and as the client saw it
(HTTP reply, includes PNG encoding and HTTP).

Run with the e2e venv (make test-e2e installs it):

    .venv-vllm/bin/python scripts/sim_vs_engine.py --policies fifo,rl:checkpoints/default \\
        --duration 1800 --time-scale 100 --json results/sim_vs_engine.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlsched import loadgen  # noqa: E402
from rlsched.policies import make_policy  # noqa: E402
from rlsched.sim import Simulator, load_scenario  # noqa: E402
from rlsched.sim.request import PRIORITY_CLASSES  # noqa: E402
from tests.e2e import tiny_model  # noqa: E402
from tests.e2e.harness import Server, deploy_stage  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rows = [compare(policy, args) for policy in args.policies.split(",")]
    print(table(rows, args))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policies", default="fifo,rl:checkpoints/default")
    p.add_argument("--scenario", default="default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rate-scale", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=1800.0, help="arrival window (profile seconds)")
    p.add_argument("--time-scale", type=float, default=100.0, help="profile seconds per wall second")
    p.add_argument("--max-num-seqs", type=int, default=4)
    p.add_argument("--decision-budget-ms", type=float, default=20.0)
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--keep", help="keep each server's log and executor log under this folder")
    return p.parse_args(argv)


def workload(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    sc = load_scenario(args.scenario).with_serving(mode="request", max_num_seqs=args.max_num_seqs,
                                                   request_batch_max_wait_ms=0.0)
    return sc, sc.requests(args.seed, args.rate_scale, args.duration)


class NoTelemetry:
    """What the plugin reads on a machine without NVML: nothing (the observation's "unknown")."""

    def read(self) -> None:
        return None


def simulate(policy: str, args: argparse.Namespace, overhead: tuple[float, float] = (0.0, 0.0)) -> dict[str, Any]:
    """Run the simulator; ``overhead``: (ms per wave, ms per output megapixel), wall time."""
    sc, reqs = workload(args)
    fixed, per_mpx = (x * args.time_scale for x in overhead)  # wall ms -> profile ms
    serving = dataclasses.replace(sc.serving, engine_overhead_ms=fixed, engine_overhead_ms_per_mpx=per_mpx)
    sim = Simulator(reqs, sc.cost(), serving)
    pol = make_policy(policy)
    if hasattr(pol, "telemetry"):  # the engine here has no GPU: the learned policy sees no NVML either
        pol.telemetry = NoTelemetry()
    sim.run(pol)
    batches: dict[int, list[int]] = defaultdict(list)
    for rec in sim.records.values():
        batches[rec.batch_id].append(rec.request.id)
    recs = sim.records.values()
    return {"batches": [sorted(batches[b]) for b in sorted(batches)],
            "queue_s": {r.request.id: r.first_scheduled_s - r.request.arrival_s for r in recs},
            "attainment": _attainment([(r.request.priority, bool(r.slo_met)) for r in recs])}


def engine(policy: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    _, reqs = workload(args)
    planned = loadgen.plan(reqs, args.time_scale, max_requests=len(reqs))
    stage = deploy_stage(sys.executable, "--policy", policy, "--max-num-seqs", str(args.max_num_seqs),
                         "--time-scale", str(args.time_scale), "--decision-budget-ms",
                         str(args.decision_budget_ms), out=work / "deploy.yaml")
    model = tiny_model.build(REPO / ".cache" / "e2e-model")
    with Server(model, stage, work, python=sys.executable) as server:
        t0 = time.monotonic()
        results = loadgen.run(server.url, planned, timeout_s=300, workers=len(planned))
        metrics = server.metrics()
        calls = [c for c in server.executed() if c["ids"] != ["dummy_req_id"]]
    arrival = {p.index: p.send_s * args.time_scale for p in planned}
    batches, queue = [], {}
    for c in calls:
        idx = sorted(int(c["new"][r].removeprefix(loadgen.PROMPT_PREFIX)) for r in c["ids"])
        batches.append(idx)
        for i in idx:
            queue[i] = (c["start"] - t0) * args.time_scale - arrival[i]
    summary = loadgen.summarize(results, args.time_scale)
    # engine overhead between waves: the next wave's requests had all arrived when the last one ended
    sent = {p.index: t0 + p.send_s for p in planned}
    mpx = {p.index: p.height * p.width / 1e6 for p in planned}
    gaps = [((c["start"] - prev["end"]) * 1e3, sum(mpx[i] for i in pidx))
            for prev, c, pidx, idx in zip(calls, calls[1:], batches, batches[1:])
            if all(sent[i] < prev["end"] for i in idx)]
    plugin = {}
    for cls in (*PRIORITY_CLASSES, "all"):
        labels = {} if cls == "all" else {"priority": cls}
        met = _sample(metrics, "rlsched_requests_finished_total", outcome="slo_met", **labels)
        missed = _sample(metrics, "rlsched_requests_finished_total", outcome="slo_missed", **labels)
        if met + missed:
            plugin[cls] = met / (met + missed)
    fallbacks = {k: v for k, v in metrics.items() if k.startswith("rlsched_fallbacks_total{") and v}
    return {"batches": batches, "queue_s": queue, "attainment": plugin,
            "client_attainment": summary["slo_attainment"], "errors": summary["errors"],
            "fallbacks": fallbacks, "mismatches": metrics.get("rlsched_admission_mismatches_total", 0.0),
            "wave_gap_ms": gaps}


def compare(policy: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rlsched-sve-") as tmp:
        work = Path(args.keep) / policy.replace("/", "_").replace(":", "_") if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        eng = engine(policy, args, work)
    pairs = eng["wave_gap_ms"]
    gaps = sorted(g for g, _ in pairs)
    gap_ms = sum(gaps) / len(gaps) if gaps else 0.0
    fit = _fit(pairs)
    raw = _versus(simulate(policy, args), eng)
    folded = _versus(simulate(policy, args, fit), eng)
    return {"policy": policy, "wave_gap_ms_mean": gap_ms, "wave_gap_ms_median": _median(gaps) or 0.0,
            "wave_gaps": len(gaps), "overhead_ms": fit[0], "overhead_ms_per_mpx": fit[1],
            "engine_batches": len(eng["batches"]), "engine_attainment": eng["attainment"],
            "client_attainment": eng["client_attainment"], "errors": eng["errors"],
            "fallbacks": eng["fallbacks"], "admission_mismatches": eng["mismatches"],
            "sim": raw, "sim_with_overhead": folded, "engine_batch_sequence": eng["batches"]}


def _versus(sim: dict[str, Any], eng: dict[str, Any]) -> dict[str, Any]:
    same = sum(a == b for a, b in zip(sim["batches"], eng["batches"]))
    first_diff = next((i for i, (a, b) in enumerate(zip(sim["batches"], eng["batches"])) if a != b), None)
    qd = [eng["queue_s"][i] - q for i, q in sim["queue_s"].items() if i in eng["queue_s"]]
    order_sim = [i for b in sim["batches"] for i in b]
    order_eng = [i for b in eng["batches"] for i in b]
    common = sum((Counter(map(tuple, sim["batches"])) & Counter(map(tuple, eng["batches"]))).values())
    return {"requests": len(sim["queue_s"]), "batches": len(sim["batches"]), "identical_batches": same,
            "common_batches": common,
            "first_divergence": first_diff, "same_order": order_sim == order_eng,
            "queue_delay_diff_mean_s": sum(qd) / len(qd) if qd else None,
            "queue_delay_diff_max_s": max(qd, default=None),
            "attainment": sim["attainment"], "batch_sequence": sim["batches"]}


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = ("| policy | class | SLO % sim | SLO % sim + overhead | SLO % engine (plugin) | SLO % client (HTTP) |"
            "\n|---|---|---|---|---|---|")
    lines = [f"{args.scenario}, seed {args.seed}, rate x{args.rate_scale:g}, {args.duration:g} s of arrivals, "
             f"time scale {args.time_scale:g}, max_num_seqs {args.max_num_seqs}\n", head]
    for r in rows:
        for cls in (*PRIORITY_CLASSES, "all"):
            vals = (r["sim"]["attainment"], r["sim_with_overhead"]["attainment"], r["engine_attainment"],
                    r["client_attainment"])
            cells = " | ".join(_pct(v.get(cls)) for v in vals)
            lines.append(f"| {r['policy'] if cls == 'realtime' else ''} | {cls} | {cells} |")
    lines += ["", "| policy | wave gap, mean / median wall ms (waves); fit ms + ms/Mpx | batches engine | "
              "sim: batches, queueing delay engine − sim mean / max s | sim + overhead: same |",
              "|---|---|---|---|---|"]
    for r in rows:
        cols = [f"{v['batches']} → {v['identical_batches']} identical in place, {v['common_batches']} in common, "
                f"{v['queue_delay_diff_mean_s']:.2f} / "
                f"{v['queue_delay_diff_max_s']:.2f}" for v in (r["sim"], r["sim_with_overhead"])]
        lines.append(f"| {r['policy']} | {r['wave_gap_ms_mean']:.1f} / {r['wave_gap_ms_median']:.1f} "
                     f"({r['wave_gaps']}); {r['overhead_ms']:.1f} + {r['overhead_ms_per_mpx']:.1f}/Mpx | "
                     f"{r['engine_batches']} | {cols[0]} | {cols[1]} |")
    return "\n".join(lines)


def _attainment(pairs: list[tuple[str, bool]]) -> dict[str, float]:
    out = {}
    for cls in (*PRIORITY_CLASSES, "all"):
        sel = [met for p, met in pairs if cls in ("all", p)]
        if sel:
            out[cls] = sum(sel) / len(sel)
    return out


def _sample(metrics: dict[str, float], name: str, **labels: str) -> float:
    return sum(v for k, v in metrics.items() if k.startswith(name + "{")
               and all(f'{lk}="{lv}"' in k for lk, lv in labels.items()))


def _fit(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``gap_ms = a + b * mpx`` (both >= 0) over waves that followed a busy engine."""
    if len(pairs) < 3:
        return (sum(g for g, _ in pairs) / len(pairs) if pairs else 0.0, 0.0)
    n = len(pairs)
    mx, my = sum(x for _, x in pairs) / n, sum(g for g, _ in pairs) / n
    var = sum((x - mx) ** 2 for _, x in pairs)
    b = max(0.0, sum((x - mx) * (g - my) for g, x in pairs) / var) if var > 0 else 0.0
    return (max(0.0, my - b * mx), b)


def _median(xs: list[float]) -> float | None:
    return xs[len(xs) // 2] if xs else None


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


if __name__ == "__main__":
    raise SystemExit(main())
