"""``gpu_memory_util``: weights always resident plus the time-averaged activations, at most 1 without OOM."""

from __future__ import annotations

import pytest

from rlsched.policies import make_policy
from rlsched.sim import Request, ServingConfig, Simulator, load_profile
from rlsched.sim.metrics import summarize


def test_memory_utilisation_counts_the_weights_once() -> None:
    """Caught: the simulator's memory·time included the weights, which summarize() added again
    (default x1.5 reported 1.013 with no OOM)."""
    cost = load_profile("qwen-image-h200")
    reqs = [Request(i, 0.0, "qwen-image", "image", 1024, 1024, 1, 10, True, "batch", 1e9) for i in range(4)]
    sim = Simulator(reqs, cost, ServingConfig("request", 1)).run(make_policy("fifo"))
    out = summarize(sim)
    act = sim.records[0].mem_gb  # one request a batch, the GPU busy from 0 to the end
    assert out["gpu_memory_util"] == pytest.approx((cost.weights_gb + act) / cost.gpu_memory_gb)
    assert out["gpu_memory_util"] <= 1.0
