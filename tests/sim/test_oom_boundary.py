"""The out-of-memory boundary sits at 100 % of GPU memory: a batch just over fails, just under runs."""

from __future__ import annotations

import dataclasses

import pytest

from rlsched.policies import make_policy
from rlsched.sim import ServingConfig, Simulator
from rlsched.sim.request import COMPLETED, FAILED_OOM
from tests.conftest import make_request


def _batch_of_four(size: int) -> list:
    return [make_request(i, 0.0, size=size, steps=4) for i in range(4)]


@pytest.mark.parametrize("mode", ["request", "step"])
def test_a_batch_just_over_gpu_memory_fails_and_one_just_under_runs(qwen_cost, mode: str) -> None:
    """Caught: the OOM check moved off 100 % of GPU memory (``rlsched.sim.device.Device.start``: e.g.
    ``mem > 1.1 * gpu_memory_gb``). On the 141 GB H200 profile four 2048² Qwen-Image requests
    need 140.7 GB (0.2 % under) and four 2064² ones 141.9 GB (0.6 % over)."""
    gpu = qwen_cost.gpu_memory_gb
    outcome = {}
    for size in (2048, 2064):
        reqs = _batch_of_four(size)
        need = qwen_cost.batch_memory_gb([qwen_cost.record(r) for r in reqs])
        sim = Simulator(reqs, qwen_cost, ServingConfig(mode, 4)).run(make_policy("fifo"))
        assert sim.batch_sizes[0] == 4  # all four in the first batch
        outcome[size] = (need / gpu, {r.status for r in sim.records.values()}, sim.oom_batches)
    under, over = outcome[2048], outcome[2064]
    assert 0.99 < under[0] < 1.0 < over[0] < 1.01  # the straddle is within 1 % either side
    assert under[1:] == ({COMPLETED}, 0)
    assert over[1:] == ({FAILED_OOM}, 1)


@pytest.mark.parametrize(("scale", "fails"), [(1 - 1e-9, True), (1.0, False), (1 + 1e-9, False)])
def test_the_boundary_is_the_gpu_memory_itself(qwen_cost, scale: float, fails: bool) -> None:
    """Caught: the same moved boundary (or ``>=``): a GPU sized exactly to the batch runs it,
    one a hair smaller fails it."""
    reqs = _batch_of_four(1024)
    need = qwen_cost.batch_memory_gb([qwen_cost.record(r) for r in reqs])
    cost = dataclasses.replace(qwen_cost, gpu_memory_gb=need * scale)
    sim = Simulator(reqs, cost, ServingConfig("request", 4)).run(make_policy("fifo"))
    assert sim.oom_batches == int(fails)
    assert {r.status for r in sim.records.values()} == ({FAILED_OOM} if fails else {COMPLETED})
