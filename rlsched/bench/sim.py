"""Benchmarks behind ``rlsched bench``. Numbers are medians of repeated runs."""

from __future__ import annotations

import argparse
from typing import Any

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
    its nominal rate in the same run. Target: >= 20,000 requests/s."""
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
    return out
