"""Speed benchmarks behind one registry (``rlsched bench NAME``): medians of repeated runs, one core.

Bench modules register with ``bench``; the registry names them by lazy module (as the
policy registry does), so ``rlsched bench sim`` never imports gymnasium, and the plugin
bench needs the vLLM tier only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import time
from collections.abc import Callable
from typing import Any

Bench = Callable[[argparse.Namespace], dict[str, Any]]

MODULES: dict[str, str] = {
    "sim": "rlsched.bench.sim",
    "backlog": "rlsched.bench.sim",
    "stage": "rlsched.bench.sim",
    "projection": "rlsched.bench.projection",
    "env": "rlsched.bench.env",
    "decision": "rlsched.bench.decision",
    "route": "rlsched.bench.decision",
    "plugin": "rlsched.bench.plugin",
    "central": "rlsched.bench.central",
    "router": "rlsched.bench.router",
    "calibration": "rlsched.bench.calibration",
}
"""Bench name -> the module that registers it."""
VLLM_TIER = ("plugin", "central", "router")
"""The benches that drive vLLM-Omni's own classes: they run only in the vLLM tier (``.venv-vllm``)."""
NEEDS_VLLM = ("rlsched bench {name} needs the vLLM tier (vllm 0.30.0 + vllm-omni 0.30.0), which this Python "
              "lacks. Build it with `make .venv-vllm/.installed`, then run `.venv-vllm/bin/rlsched bench {name}`.")


def check_tier(name: str) -> None:
    """SystemExit with how to get the vLLM tier when bench ``name`` needs it and this Python has no vLLM-Omni."""
    if name in VLLM_TIER and importlib.util.find_spec("vllm_omni") is None:
        raise SystemExit(NEEDS_VLLM.format(name=name))
BENCHES: dict[str, Bench] = {}
TEXT: dict[str, Callable[[dict[str, Any]], str]] = {}
"""A bench's human-readable output (without ``--json``); default: one ``key: value`` a line."""


def bench(name: str, text: Callable[[dict[str, Any]], str] | None = None) -> Callable[[Bench], Bench]:
    def deco(fn: Bench) -> Bench:
        BENCHES[name] = fn
        if text is not None:
            TEXT[name] = text
        return fn
    return deco


def load(name: str) -> Bench | None:
    """The bench ``name``, importing its module; None when an optional dependency is missing."""
    if name not in BENCHES:
        try:
            importlib.import_module(MODULES[name])
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("rlsched"):
                raise
            return None
    return BENCHES.get(name)


def percentiles_us(us: Any) -> dict[str, float]:
    """p50/p99 of per-call times in microseconds, as every latency bench reports them."""
    import numpy as np

    p50, p99 = np.percentile(us, [50, 99])
    return {"p50_us": round(float(p50), 1), "p99_us": round(float(p99), 1), "calls": int(len(us))}


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


__all__ = ["BENCHES", "MODULES", "TEXT", "bench", "load", "median_time", "percentiles_us"]
