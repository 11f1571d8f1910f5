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

With ``--replicas R`` (> 1) each policy is a ``POLICY@ROUTER`` spec: the simulator runs a ``Stage``
of R replicas behind that router, and the server runs ``num_replicas`` R on devices ``0..R-1`` with
that policy in every replica and the router in the API process (``round-robin``: vLLM-Omni's own
pool, no rlsched router; ``central``: late binding, the policy deciding from the API process's
central queue and FIFO replicas, on both sides). The simulated router runs on three views
(``rlsched.routing.views``): the default, what the ``RouterStagePool`` in the orchestrator sees
(its ledger plus each replica's published state, heard 10 ms of wall time late), the replicas' true state
(a ceiling) and the ledger alone (the router before replicas published their state); each with the
engine's wave overhead fitted from the run. Each row of ``rows.json`` carries ``engine_attainment`` (the
executor's batch ends against the planned arrivals, what the simulator measures) and ``sim_attainment``
(the default view), per class and ``all``; ``views_compared`` counts the routing decisions whose view
differed from the replica's own state (the router's log against the executor's). ``--out DIR`` writes
``table.md`` and ``rows.json``:

    .venv-vllm/bin/python scripts/sim_vs_engine.py --replicas 2 --rate-scale 2 \\
        --policies "fifo@round-robin,edf@rlsched" --duration 1800 --time-scale 25 \\
        --out results/sim-vs-engine-replicas
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlsched import loadgen  # noqa: E402
from rlsched.integrations.vllm_omni.cpu_server import build_tiny_model  # noqa: E402
from rlsched.policies import make_policy  # noqa: E402
from rlsched.routing.routers import make_router, split_pair  # noqa: E402
from rlsched.routing.views import PUBLISH_DELAY_S  # noqa: E402
from rlsched.sim import Simulator, load_scenario  # noqa: E402
from rlsched.sim.request import PRIORITY_CLASSES, Request  # noqa: E402
from rlsched.sim.stage import CENTRAL_LEAD_S, Stage  # noqa: E402
from tests.e2e.harness import Server, deploy_stage  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    many = args.replicas > 1
    rows = [(compare_stage if many else compare)(policy, args) for policy in args.policies.split(",")]
    text = (table_stage if many else table)(rows, args)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        command = "python scripts/sim_vs_engine.py " + " ".join(_quote(a) for a in (argv or sys.argv[1:]))
        (out / "table.md").write_text(f"Command: `{command}`\n\n{text}\n")
        (out / "rows.json").write_text(json.dumps({"command": command, "args": vars(args), "rows": rows},
                                                  indent=1) + "\n")
    return 0


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


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
    p.add_argument("--router-budget-ms", type=float, default=20.0,
                   help="the router's (central: the central policy's) budget in the API process")
    p.add_argument("--min-gap-ms", type=float, default=0.0,
                   help="spread arrivals at least this much wall time apart, on both sides (see spread)")
    p.add_argument("--replicas", type=int, default=1,
                   help="> 1: a stage of this many replicas; --policies are then POLICY@ROUTER specs")
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--out", help="folder for table.md and rows.json (the command, the arguments, the rows)")
    p.add_argument("--keep", help="keep each server's log and executor log under this folder")
    return p.parse_args(argv)


def workload(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    sc = load_scenario(args.scenario).with_serving(mode="request", max_num_seqs=args.max_num_seqs,
                                                   request_batch_max_wait_ms=0.0)
    return sc, spread(sc.requests(args.seed, args.rate_scale, args.duration), args.min_gap_ms, args.time_scale)


def spread(reqs: list[Request], min_gap_ms: float, time_scale: float) -> list[Request]:
    """``reqs`` with each arrival at least ``min_gap_ms`` of wall time (× ``time_scale`` profile time) after
    the one before, later ones shifted as little as that takes. Both sides get the spread workload: two
    requests sent a fraction of a millisecond apart reach vLLM-Omni's orchestrator in either order (one
    HTTP thread each), and a router that deals by arrival order (round-robin) then swaps them."""
    if min_gap_ms <= 0:
        return reqs
    gap, last, out = min_gap_ms / 1e3 * time_scale, -math.inf, []
    for req in sorted(reqs, key=lambda r: (r.arrival_s, r.id)):
        last = max(req.arrival_s, last + gap)
        out.append(req if last == req.arrival_s else dataclasses.replace(req, arrival_s=last))
    return out


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
    model = build_tiny_model(REPO / ".cache" / "e2e-model")
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


def run_engine(spec: str, args: argparse.Namespace, serve: Any) -> tuple[dict[str, Any], tuple[float, float],
                                                                        dict[str, Any]]:
    """``serve(spec, args, work)`` in a work folder (``--keep`` or a temporary one): the engine's
    results, the fitted wave overhead (ms, ms/Mpx) and the row fields both comparisons report."""
    with tempfile.TemporaryDirectory(prefix="rlsched-sve-") as tmp:
        work = Path(args.keep) / spec.replace("/", "_").replace(":", "_") if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        eng = serve(spec, args, work)
    pairs = eng["wave_gap_ms"]
    gaps = sorted(g for g, _ in pairs)
    fit = _fit(pairs)
    row = {"policy": spec, "wave_gap_ms_mean": sum(gaps) / len(gaps) if gaps else 0.0,
           "wave_gap_ms_median": _median(gaps) or 0.0, "wave_gaps": len(gaps), "overhead_ms": fit[0],
           "overhead_ms_per_mpx": fit[1], "engine_attainment": eng["attainment"],
           "client_attainment": eng["client_attainment"], "errors": eng["errors"], "fallbacks": eng["fallbacks"],
           "admission_mismatches": eng["mismatches"]}
    return eng, fit, row


def compare(policy: str, args: argparse.Namespace) -> dict[str, Any]:
    eng, fit, row = run_engine(policy, args, engine)
    raw = _versus(simulate(policy, args), eng)
    folded = _versus(simulate(policy, args, fit), eng)
    return {**row, "engine_batches": len(eng["batches"]), "sim": raw, "sim_with_overhead": folded,
            "engine_batch_sequence": eng["batches"]}


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


# ------------------------------------------------------------------ several replicas
VIEWS = {"sim": "engine", "sim_replica": "replica", "sim_ledger": "ledger"}
"""Simulated columns: the router on the deployed router's information (the default view, with the fitted engine
overhead: the row's ``sim_attainment``), on the replicas' true state (a ceiling) and on the ledger alone."""


def simulate_stage(spec: str, args: argparse.Namespace, overhead: tuple[float, float] = (0.0, 0.0),
                   view: str = "engine") -> dict[str, Any]:
    """Run ``spec`` (``POLICY@ROUTER``) on a stage of ``args.replicas`` with the router on ``view``, every
    delay in profile seconds at ``args.time_scale`` (the published state's 10 ms and late binding's lead are
    wall time in the engine)."""
    sc, reqs = workload(args)
    fixed, per_mpx = (x * args.time_scale for x in overhead)
    serving = dataclasses.replace(sc.serving, engine_overhead_ms=fixed, engine_overhead_ms_per_mpx=per_mpx)
    stage = Stage.uniform(reqs, args.replicas, sc.cost(), serving, seed=args.seed)
    stage.lead_s = CENTRAL_LEAD_S * args.time_scale
    policy, router_spec = split_pair(spec)
    if router_spec == "central":  # late binding, as rlsched's run_spec: the policy central, FIFO replicas
        pols = [make_policy("fifo") for _ in stage.replicas]
        stage.run(pols, central=lambda: _quiet(make_policy(policy)))
    else:
        delay = f";delay_ms={PUBLISH_DELAY_S * 1e3 * args.time_scale:g}" if view == "engine" else ""
        router = make_router(f"{router_spec};view={view}{delay}")
        pols = [_quiet(make_policy(policy)) for _ in stage.replicas]
        stage.run(pols, router)
    out: dict[str, Any] = {"routed": {str(i): r for i, r in stage.routed.items()}, "batches": {}, "queue_s": {}}
    pairs = []
    for k, sim in enumerate(stage.replicas):
        batches: dict[int, list[int]] = defaultdict(list)
        for rec in sim.records.values():
            batches[rec.batch_id].append(rec.request.id)
            out["queue_s"][rec.request.id] = rec.first_scheduled_s - rec.request.arrival_s
            pairs.append((rec.request.priority, bool(rec.slo_met)))
        out["batches"][str(k)] = [sorted(batches[b]) for b in sorted(batches)]
    out["attainment"] = _attainment(pairs)
    return out


def _quiet(policy: Any) -> Any:
    if hasattr(policy, "telemetry"):
        policy.telemetry = NoTelemetry()
    return policy


def engine_stage(spec: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The same workload through a real server of ``args.replicas`` replicas (``round-robin``: vLLM-Omni's pool)."""
    _, reqs = workload(args)
    planned = loadgen.plan(reqs, args.time_scale, max_requests=len(reqs))
    policy, router = split_pair(spec)
    routing = [] if router == "round-robin" else ["--router", router, "--router-budget-ms",
                                                  str(args.router_budget_ms)]
    stage = deploy_stage(sys.executable, "--policy", policy, *routing, "--replicas", str(args.replicas),
                         "--devices", ",".join(map(str, range(args.replicas))), "--max-num-seqs",
                         str(args.max_num_seqs), "--time-scale", str(args.time_scale), "--decision-budget-ms",
                         str(args.decision_budget_ms), "--metrics-port", "9400", out=work / "deploy.yaml")
    model = build_tiny_model(REPO / ".cache" / "e2e-model")
    with Server(model, stage, work, python=sys.executable) as server:
        t0 = time.monotonic()
        results = loadgen.run(server.url, planned, timeout_s=600, workers=len(planned))
        per_replica = server.replica_metrics()
        api = server.api_metrics()
        calls = [c for c in server.executed() if c["ids"] != ["dummy_req_id"]]
        log = server.routed()
        states = server.states()
    arrival = {p.index: p.send_s * args.time_scale for p in planned}
    sent = {p.index: t0 + p.send_s for p in planned}
    mpx = {p.index: p.height * p.width / 1e6 for p in planned}
    slo_of = {p.index: (p.priority, p.slo_s) for p in planned}
    batches: dict[str, list[list[int]]] = defaultdict(list)
    routed, queue, gaps, done = {}, {}, [], []
    by_replica: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in calls:
        idx = sorted(int(c["new"][r].removeprefix(loadgen.PROMPT_PREFIX)) for r in c["ids"])
        c["idx"] = idx
        by_replica[c["devices"]].append(c)
        batches[c["devices"]].append(idx)
        for i in idx:
            queue[i] = (c["start"] - t0) * args.time_scale - arrival[i]
            routed[str(i)] = int(c["devices"])
            done.append((slo_of[i][0], (c["end"] - t0) * args.time_scale - arrival[i] <= slo_of[i][1]))
    for cs in by_replica.values():  # the engine's cost between waves, per replica (each its own busy loop)
        gaps += [((c["start"] - prev["end"]) * 1e3, sum(mpx[i] for i in prev["idx"]))
                 for prev, c in zip(cs, cs[1:]) if all(sent[i] < prev["end"] for i in c["idx"])]
    plugin = {}
    for cls in (*PRIORITY_CLASSES, "all"):
        labels = {} if cls == "all" else {"priority": cls}
        met = sum(_sample(m, "rlsched_requests_finished_total", outcome="slo_met", **labels)
                  for m in per_replica.values())
        missed = sum(_sample(m, "rlsched_requests_finished_total", outcome="slo_missed", **labels)
                     for m in per_replica.values())
        if met + missed:
            plugin[cls] = met / (met + missed)
    summary = loadgen.summarize(results, args.time_scale)
    fallbacks = {f"{dev}:{k}": v for dev, m in per_replica.items() for k, v in m.items()
                 if k.startswith("rlsched_fallbacks_total{") and v}
    fallbacks.update({k: v for k, v in api.items() if k.startswith("rlsched_router_fallbacks_total{") and v})
    view_fallbacks = {k: v for k, v in api.items() if k.startswith("rlsched_router_view_fallbacks_total{") and v}
    # the executor's batch ends against the planned arrivals: what the simulator measures. The plugin's own
    # numbers start each request when its replica received it, which under late binding misses the central wait
    return {"batches": dict(batches), "routed": routed, "queue_s": queue, "attainment": plugin,
            "executor_attainment": _attainment(done),
            "client_attainment": summary["slo_attainment"], "errors": summary["errors"], "fallbacks": fallbacks,
            "mismatches": sum(m.get("rlsched_admission_mismatches_total", 0.0) for m in per_replica.values()),
            "router_decisions": sum(v for k, v in api.items() if k.startswith("rlsched_router_decisions_total")),
            "wave_gap_ms": gaps, "view_fallbacks": view_fallbacks, "views_compared": compare_views(log, calls),
            "state_delay_ms": state_delays_ms(states, calls)}


def state_delays_ms(states: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, float | None]:
    """How long each wave's state took to reach the router: from the wave's start in the replica's executor log
    to the first state the router pool heard (``$RLSCHED_ROUTER_LOG.states``) that lists exactly that wave
    running, on the host clock; median, p90 and max in ms (None without states)."""
    delays = []
    for c in calls:
        ids, slot = set(c["ids"]), int(c["devices"])
        heard = [s["mono"] for s in states if s["replica"] == slot and s["mono"] >= c["start"]
                 and {rid for rid, _ in s["state"]["running"]} == ids]
        if heard:
            delays.append((min(heard) - c["start"]) * 1e3)
    delays.sort()
    if not delays:
        return {"median": None, "p90": None, "max": None, "waves": 0}
    return {"median": _median(delays), "p90": delays[int(0.9 * (len(delays) - 1))], "max": delays[-1],
            "waves": len(delays)}


def compare_views(log: list[dict[str, Any]], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The router's view at each routing decision (its log, ``views``) against what each replica really held
    then (the executor's log of its waves, on the same host clock): decisions whose running or waiting set
    differed on some replica. A request is truly waiting on a replica from its routing until its first wave
    starts there; truly running while a wave holding it runs."""
    waves: dict[str, list[tuple[float, float, set[str]]]] = defaultdict(list)
    first: dict[str, float] = {}
    for c in calls:
        waves[str(c["devices"])].append((c["start"], c["end"], set(c["ids"])))
        for rid in c["ids"]:
            first[rid] = min(first.get(rid, math.inf), c["start"])
    routed: dict[str, list[tuple[float, str]]] = defaultdict(list)
    out = {"decisions": 0, "running_differs": 0, "waiting_differs": 0, "from_state": 0, "from_ledger": 0}
    for line in log:
        views, m = line.get("views"), line.get("mono")
        if views and m is not None:
            out["decisions"] += 1
            run_diff = wait_diff = False
            for slot, view in views.items():
                out["from_state" if view["from"] == "state" else "from_ledger"] += 1
                running = set().union(*[ids for s, e, ids in waves[slot] if s <= m < e])
                waiting = {rid for t, rid in routed[slot] if t < m and first.get(rid, math.inf) > m}
                run_diff |= set(view["running"]) != running
                wait_diff |= set(view["waiting"]) != waiting
            out["running_differs"] += run_diff
            out["waiting_differs"] += wait_diff
        if m is not None:
            routed[str(line["replica"])].append((m, line["request_id"]))
    return out


def compare_stage(spec: str, args: argparse.Namespace) -> dict[str, Any]:
    eng, fit, row = run_engine(spec, args, engine_stage)
    sims = {name: simulate_stage(spec, args, fit, view) for name, view in VIEWS.items()}
    # what the engine measured (the executor's batch ends against the planned arrivals, as the simulator
    # measures) beside the simulator on its default view with the fitted engine overhead, per class
    row["engine_attainment"], row["plugin_attainment"] = eng["executor_attainment"], row["engine_attainment"]
    return {**row, "sim_attainment": sims["sim"]["attainment"], "replicas": args.replicas,
            "engine_batches": sum(len(b) for b in eng["batches"].values()),
            "router_decisions": eng["router_decisions"], "view_fallbacks": eng["view_fallbacks"],
            "views_compared": eng["views_compared"], "state_delay_ms": eng["state_delay_ms"],
            **{name: _versus_stage(sim, eng) for name, sim in sims.items()},
            "engine_batch_sequence": eng["batches"], "engine_routed": eng["routed"]}


def _versus_stage(sim: dict[str, Any], eng: dict[str, Any]) -> dict[str, Any]:
    """Per replica (slot k = devices "k"): the batches both ran; where each request went; queueing delays."""
    identical = common = total = 0
    for k, batches in sim["batches"].items():
        theirs = eng["batches"].get(k, [])
        identical += sum(a == b for a, b in zip(batches, theirs))
        common += sum((Counter(map(tuple, batches)) & Counter(map(tuple, theirs))).values())
        total += len(batches)
    same_replica = sum(eng["routed"].get(i) == r for i, r in sim["routed"].items())
    qd = [eng["queue_s"][i] - q for i, q in sim["queue_s"].items() if i in eng["queue_s"]]
    return {"requests": len(sim["queue_s"]), "batches": total, "identical_batches": identical,
            "common_batches": common, "same_replica": same_replica,
            "queue_delay_diff_mean_s": sum(qd) / len(qd) if qd else None,
            "queue_delay_diff_max_s": max(qd, default=None), "attainment": sim["attainment"],
            "batch_sequence": sim["batches"], "routed": sim["routed"]}


SIM_COLUMNS = (("sim", "sim (deployed view) + overhead"), ("sim_replica", "sim (replica state, ceiling)"),
               ("sim_ledger", "sim (ledger alone)"))


def table_stage(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = ("| policy | class | SLO % engine (executor) | " + " | ".join(f"SLO % {t}" for _, t in SIM_COLUMNS)
            + " | engine − sim (deployed view) | SLO % engine (plugin) | SLO % client (HTTP) |\n"
            + "|---" * (len(SIM_COLUMNS) + 6) + "|")
    lines = [f"{args.scenario}, seed {args.seed}, rate x{args.rate_scale:g}, {args.duration:g} s of arrivals, "
             f"{args.replicas} replicas, time scale {args.time_scale:g}, max_num_seqs {args.max_num_seqs}; every "
             "simulated column with the fitted engine overhead\n", head]
    for r in rows:
        for cls in (*PRIORITY_CLASSES, "all"):
            vals = [r[name]["attainment"].get(cls) for name, _ in SIM_COLUMNS]
            eng, cli = r["engine_attainment"].get(cls), r["client_attainment"].get(cls)
            plug = r.get("plugin_attainment", {}).get(cls)
            diff = "—" if eng is None or vals[0] is None else f"{100 * (eng - vals[0]):+.1f}"
            cells = " | ".join(_pct(v) for v in [eng, *vals])
            lines.append(f"| {r['policy'] if cls == 'realtime' else ''} | {cls} | {cells} | {diff} | {_pct(plug)} "
                         f"| {_pct(cli)} |")
    lines += ["", "| policy | requests | wave gap, mean / median wall ms (waves); fit ms + ms/Mpx | batches engine | "
              + " | ".join(f"{t}: batches → in place / in common, same replica, queueing delay engine − sim "
                           "mean / max s" for _, t in SIM_COLUMNS) + " | errors, mismatches, fallbacks |",
              "|---" * (len(SIM_COLUMNS) + 5) + "|"]
    for r in rows:
        cols = [f"{v['batches']} → {v['identical_batches']} / {v['common_batches']}, {v['same_replica']} of "
                f"{v['requests']}, {v['queue_delay_diff_mean_s']:.2f} / {v['queue_delay_diff_max_s']:.2f}"
                for v in (r[name] for name, _ in SIM_COLUMNS)]
        lines.append(f"| {r['policy']} | {r['sim']['requests']} | {r['wave_gap_ms_mean']:.1f} / "
                     f"{r['wave_gap_ms_median']:.1f} ({r['wave_gaps']}); {r['overhead_ms']:.1f} + "
                     f"{r['overhead_ms_per_mpx']:.1f}/Mpx | {r['engine_batches']} | " + " | ".join(cols)
                     + f" | {r['errors']}, {r['admission_mismatches']:g}, {r['fallbacks'] or 0} |")
    lines += ["", "The router's view at each routing decision against the replicas' own logs (running and waiting "
              "sets per replica; a decision counts once if any replica differed):", ""]
    for r in rows:
        v = r.get("views_compared") or {}
        if v.get("decisions"):
            lines.append(f"- `{r['policy']}`: {v['decisions']} decisions; the running set differed in "
                         f"{v['running_differs']}, the waiting set in {v['waiting_differs']}; replica views from a "
                         f"published state {v['from_state']}, from the ledger alone {v['from_ledger']} "
                         f"({r.get('view_fallbacks') or 'no fallback counted'})")
        d = r.get("state_delay_ms") or {}
        if d.get("waves"):
            lines.append(f"  - a wave's state reached the router {d['median']:.1f} ms after the wave started "
                         f"(median; p90 {d['p90']:.1f}, max {d['max']:.1f} ms, {d['waves']} waves)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
