"""Benchmarks behind ``rlsched bench``. Numbers are medians of repeated runs."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlsched.bench import bench, median_time
from rlsched.policies import make_policy
from rlsched.sim import Simulator, load_scenario


@bench("sim")
def sim_speed(args: argparse.Namespace) -> dict[str, Any]:
    """Simulated requests per second, FIFO on ``default`` at its nominal load, one core."""
    sc = load_scenario("default")
    cost = sc.cost()
    reqs = sc.requests(seed=0, rate_scale=1.0, duration_s=sc.duration_s * 50, cost=cost)
    secs = median_time(lambda: Simulator(reqs, cost, sc.serving).run(make_policy("fifo")), args.repeats)
    gen = median_time(lambda: sc.requests(seed=0, duration_s=sc.duration_s * 50, cost=cost), 1)
    return {"scenario": "default", "policy": "fifo", "requests": len(reqs),
            "seconds": round(secs, 4), "requests_per_s": round(len(reqs) / secs),
            "workload_generation_requests_per_s": round(len(reqs) / gen)}


BACKLOG_POLICIES = ("fifo", "sjf", "edf", "priority", "drr", "seed-memory", "seed-priority", "seed-composite",
                    "static", "rl")


@bench("backlog")
def backlog_speed(args: argparse.Namespace) -> dict[str, Any]:
    """Wall time of every policy on a deep backlog, relative to fifo in the same run.

    20,000 ``default`` requests arriving within 7,000 s (~57x the nominal rate): the queue
    grows to thousands, so a policy that scans or sorts the whole queue at every decision
    shows up here as a multiple of fifo's time. Target: every policy <= 3x fifo.
    """
    sc = load_scenario("default")
    cost = sc.cost()
    duration, n = 7000.0, 20000
    rate_scale = n / (float(sc.arrival["rate_rps"]) * duration)
    reqs = sc.requests(seed=0, rate_scale=rate_scale, duration_s=duration, cost=cost)
    out: dict[str, Any] = {"scenario": "default", "requests": len(reqs), "arrival_window_s": duration}
    repeats = max(1, args.repeats // 3)
    seconds = {}
    for name in args.policies.split(",") if args.policies else BACKLOG_POLICIES:
        seconds[name] = median_time(lambda name=name: Simulator(reqs, cost, sc.serving).run(make_policy(name)),
                                    repeats)
    out["seconds"] = {k: round(v, 3) for k, v in seconds.items()}
    out["x_fifo"] = {k: round(v / seconds.get("fifo", seconds[next(iter(seconds))]), 2) for k, v in seconds.items()}
    return out


@bench("stage")
def stage_speed(args: argparse.Namespace) -> dict[str, Any]:
    """Simulated requests per second of the shipped 8-replica scenario (``qwen-image-8gpu``: eight
    one-GPU replicas), fifo under three routers, one core; the single simulator (``default``) at
    its nominal rate in the same run. Target: >= 20,000 requests/s. And ``fleet``: 8, 128 and 1,024
    replicas of ``default`` behind rlsched's router as deployed (``fleet_speed``)."""
    from rlsched.routing.routers import run_spec
    from rlsched.sim.stage import Stage

    pool = load_scenario("qwen-image-8gpu")
    pool_cost = pool.cost()
    reqs = pool.requests(seed=0, duration_s=pool.duration_s * 10, cost=pool_cost)
    specs = pool.replica_specs(pool_cost)
    out: dict[str, Any] = {"scenario": pool.name, "replicas": len(specs), "requests": len(reqs)}
    for router in (args.policies or "round-robin,least-work,rlsched").split(","):
        secs = median_time(lambda router=router: run_spec(Stage(reqs, specs), f"fifo@{router}"),
                           max(1, args.repeats // 2))
        out[f"fifo@{router}_requests_per_s"] = round(len(reqs) / secs)
    sc = load_scenario("default")
    cost = sc.cost()
    single = sc.requests(seed=0, rate_scale=1.0, duration_s=sc.duration_s * 80, cost=cost)
    secs = median_time(lambda: Simulator(single, cost, sc.serving).run(make_policy("fifo")), max(1, args.repeats // 2))
    out["single_simulator_requests_per_s"] = round(len(single) / secs)
    out["fleet"] = {str(n): fleet_speed(n) for n in FLEET}
    return out


FLEET = (8, 128, 1024)
FLEET_WINDOW_S = 600.0
"""Arrivals of the fleet figures: ten minutes, each replica at ``default``'s own load (30,894 requests at
1,024 replicas: the issue-50 measurement)."""
FLEET_POLICY = "fifo"


def fleet_speed(replicas: int, policy: str = FLEET_POLICY) -> dict[str, Any]:
    """``default`` on ``replicas`` one-GPU replicas (each at the scenario's load), ``policy`` behind rlsched's
    router as deployed (``view=engine``), one run: simulated requests per second (wall, and on the
    process's CPU time: on a shared machine the wall counts waits for a core) and the p50/p99 of one routing
    decision in milliseconds (the view's update from the states heard since the last one included; wall
    and the thread's CPU time). Targets (issue 50): >= 10,000 requests/s and a p99 <= 1 ms at 1,024
    replicas."""
    from rlsched.evaluation.runs import RunSpec, prepare_stage
    from rlsched.routing.routers import make_router

    stage = prepare_stage(RunSpec("default", policy, 0, 1.0, FLEET_WINDOW_S, replicas=replicas),
                          load_scenario("default"))
    router = _Timed(make_router("rlsched", policy))
    policies = [make_policy(policy) for _ in stage.replicas]
    t, c = time.perf_counter(), time.process_time()
    stage.run(policies, router)
    secs, cpu = time.perf_counter() - t, time.process_time() - c
    n = stage.total_requests
    return {"requests": n, "seconds": round(secs, 3), "requests_per_s": round(n / secs),
            "requests_per_cpu_s": round(n / cpu),
            "decision_ms": _percentiles_ms(router.wall), "decision_cpu_ms": _percentiles_ms(router.cpu)}


def _percentiles_ms(seconds: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1e3
    return {"p50": round(float(np.percentile(ms, 50)), 4), "p99": round(float(np.percentile(ms, 99)), 4)}


class _Timed:
    """A router timed at every decision (wall and the thread's CPU time)."""

    def __init__(self, router: Any) -> None:
        self.router, self.name = router, router.name
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def reset(self, stage: Any) -> None:
        self.router.reset(stage)

    def route(self, request: Any, stage: Any) -> int:
        t, c = time.perf_counter(), time.thread_time()
        out = self.router.route(request, stage)
        self.wall.append(time.perf_counter() - t)
        self.cpu.append(time.thread_time() - c)
        return out
