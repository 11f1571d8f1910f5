"""``rlsched bench central`` on a tiny queue: every request sent once, the decisions counted, the fallbacks per
1,000 decisions a number (no timing bars: the load is the machine's)."""

from __future__ import annotations

import argparse
import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.bench import load  # noqa: E402


def test_the_central_bench_counts_decisions_and_fallbacks() -> None:
    bench = load("central")
    assert bench is not None
    out = bench(argparse.Namespace(policies="edf", queues="12", repeats=2, load_threads=1))
    cell = out["edf @ 12"]
    assert out["load_threads"] == 1 and cell["decisions"] >= 24 / 4  # batches of <= 4, every request sent
    assert cell["own"]["calls"] == cell["wall"]["calls"] == cell["decisions"]
    assert cell["fallbacks_per_1000"] == round(1000 * sum(cell["fallbacks"].values()) / cell["decisions"], 1)
    assert 0 <= cell["slow_pct"] <= 100 and 0 <= cell["wall_over_budget_pct"] <= 100
