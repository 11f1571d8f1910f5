"""``rlsched bench``: speed benchmarks (medians of repeated runs, one core)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from rlsched.cli import command, print_json

BENCHES: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {}
TEXT: dict[str, Callable[[dict[str, Any]], str]] = {}
"""A bench's human-readable output (without ``--json``); default: one ``key: value`` a line."""


def bench(name: str, text: Callable[[dict[str, Any]], str] | None = None
          ) -> Callable[[Callable[[argparse.Namespace], dict[str, Any]]], Any]:
    def deco(fn: Callable[[argparse.Namespace], dict[str, Any]]) -> Callable[[argparse.Namespace], dict[str, Any]]:
        BENCHES[name] = fn
        if text is not None:
            TEXT[name] = text
        return fn
    return deco


@command("bench", "Speed benchmarks: sim, projection, env, decision, backlog, plugin (the vLLM tier).")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=("sim", "projection", "env", "decision", "backlog", "plugin"),
                   help="what to measure (plugin: schedule() in vLLM-Omni's schedulers; needs .venv-vllm)")
    p.add_argument("--policies", default="", help="backlog, plugin: comma-separated policies (default: every "
                                                  "built-in / every shipped one); decision: the policy to time "
                                                  "(default: rl:checkpoints/default)")
    p.add_argument("--repeats", type=int, default=5, help="timed repetitions (the median is reported)")
    p.add_argument("--calls", type=int, default=None, help="plugin: timed schedule() calls per cell (default 80)")
    p.add_argument("--queues", default="", help="plugin: comma-separated waiting-queue depths "
                                                "(default 16,256,1024,4096)")
    p.add_argument("--modes", default="request,step", help="plugin: request, step or both")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    _load_benches()
    if args.what not in BENCHES:
        raise SystemExit(f"rlsched bench {args.what}: not available in this install")
    result = BENCHES[args.what](args)
    if args.json:
        print_json(result)
    elif args.what in TEXT:
        print(TEXT[args.what](result))
    else:
        for key, value in result.items():
            print(f"{key:>24}: {value}")
    return 0


BENCH_MODULES = ("rlsched.benchmarks", "rlsched.projection.bench", "rlsched.envs.bench", "rlsched.agents.bench",
                 "rlsched.integrations.vllm_omni.bench")


def _load_benches() -> None:
    """Import the modules that register benches; those needing a missing extra are skipped."""
    import importlib
    for mod in BENCH_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if not exc.name or not exc.name.startswith("rlsched"):
                continue  # an optional dependency is missing
            if exc.name != mod:
                raise


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
