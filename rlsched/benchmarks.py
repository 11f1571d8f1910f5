"""Benchmarks behind ``rlsched bench``. Numbers are medians of repeated runs."""

from __future__ import annotations

import argparse
from typing import Any

from rlsched.commands.bench import bench, median_time
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
