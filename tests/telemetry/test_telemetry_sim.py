"""``SimTelemetry``: memory from the simulator, utilisations as exponential averages."""

from __future__ import annotations

import math

import pytest

from rlsched.sim import Decision, Request, ServingConfig, Simulator, load_profile
from rlsched.sim.telemetry import UTIL_WINDOW_S, memory_bound_share
from rlsched.telemetry import SimTelemetry, Telemetry

COST = load_profile("qwen-image-h200")


def sim_with(*sizes: int) -> Simulator:
    reqs = [Request(i, 0.0, "qwen-image", "image", s, s, 1, 50, True, "batch", 1e4) for i, s in enumerate(sizes)]
    sim = Simulator(reqs, COST, ServingConfig(max_num_seqs=4))
    assert sim.advance_to_next_decision()
    return sim


def test_idle_gpu_reads_weights_and_no_load() -> None:
    tel = SimTelemetry(sim_with(512))
    assert isinstance(tel, Telemetry)
    s = tel.read()
    assert s.known and s.memory_used_gb == COST.weights_gb and s.memory_total_gb == COST.gpu_memory_gb
    assert s.compute_util == 0.0 and s.membw_util == 0.0


def test_busy_fraction_is_an_exponential_average() -> None:
    sim = sim_with(512)
    tel = SimTelemetry(sim)
    sim.apply(Decision((0,)))
    tel.update()
    assert tel.read().memory_used_gb > COST.weights_gb  # the batch's activations
    duration = sim.gpu_end_s
    sim.advance_to_next_decision()  # drains: the GPU finished at `duration`
    s = tel.read()
    assert sim.now == duration
    assert s.compute_util == pytest.approx(1 - math.exp(-duration / UTIL_WINDOW_S))
    assert s.membw_util == pytest.approx(s.compute_util)  # a 512² step sits at the floor: memory-bound


def test_large_batches_are_less_memory_bound() -> None:
    small, large = sim_with(512), sim_with(2048, 2048)
    assert memory_bound_share(small, list(small.waiting.values())[:1]) == 1.0
    share = memory_bound_share(large, list(large.waiting.values()))
    assert 0 < share < 0.5
