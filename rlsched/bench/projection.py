"""``rlsched bench projection``: time of one ``project`` call by queue size, one core.

Instances from ``rlsched.projection.instances.realistic`` (36 keys at most, memory
binding, nobody starving, so the full multi-key path runs). Each size is timed on
200 fresh instances (cycled), after 0.3 s of warm-up calls; times are per call, in microseconds.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from rlsched.bench import bench, percentiles_us
from rlsched.projection.instances import realistic
from rlsched.projection.knapsack import project

QUEUE_SIZES = (16, 256, 4096)
CALLS = {16: 4000, 256: 3000, 4096: 400}
"""Timed calls per queue size (× ``--repeats`` / 5)."""


@bench("projection")
def projection_speed(args: argparse.Namespace) -> dict[str, Any]:
    """p50/p99 of ``project`` at 16, 256 and 4,096 waiting requests."""
    rng = np.random.default_rng(0)
    scale = max(1, args.repeats) / 5
    return {str(n): percentiles_us(_time_calls(rng, n, max(50, int(CALLS[n] * scale)))) for n in QUEUE_SIZES}


def _time_calls(rng: np.random.Generator, n: int, calls: int) -> np.ndarray:
    cases = [realistic(rng, n) for _ in range(min(calls, 200))]
    _warm_up(cases)
    out = np.empty(calls)
    for i in range(calls):
        items, res = cases[i % len(cases)]
        t = time.perf_counter_ns()
        project(items, res)
        out[i] = time.perf_counter_ns() - t
    return out / 1e3


def _warm_up(cases: list, seconds: float = 0.3) -> None:
    """Run untimed calls first: the first few hundred are slower (caches, clock ramp-up)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for items, res in cases[:20]:
            project(items, res)
