"""Memory that does not trust the profile, inside the real scheduler: a batch the engine runs out of memory on
is counted, teaches the calibrator, and (request mode) its requests go back to the queue once — the same
batches and outcomes as the simulator's, the simulator playing the GPU (sim-in-the-loop)."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni.harness.loop import (  # noqa: E402
    Recorder,
    SimClock,
    make_loop_scheduler,
    run_in_loop,
)
from rlsched.policies import make_policy  # noqa: E402
from rlsched.sim import ServingConfig, Simulator  # noqa: E402
from rlsched.sim.cost import load_profile  # noqa: E402
from rlsched.sim.truth import scaled  # noqa: E402
from tests.conftest import make_request  # noqa: E402

COST = load_profile("qwen-image-h200")


def _both(sizes, true, mode: str, policy: str):
    """The pure simulator (deciding on the profile, the GPU at ``true``) and the plugin in the loop."""
    reqs = [make_request(i, size=s) for i, s in enumerate(sizes)]  # all at t=0: one first decision
    serving = ServingConfig(mode, 4, 0.0)
    recorder = Recorder(make_policy(policy))
    pure = Simulator(reqs, COST, serving, truth=true)
    pure.run(recorder)
    clock = SimClock()
    sched = make_loop_scheduler(serving, COST, policy, clock)
    loop = run_in_loop(reqs, true, serving, sched, clock)
    assert recorder.batches == loop.batches
    statuses = [r.status for r in pure.records.values()]
    assert statuses == [r.status for r in loop.sim.records.values()]
    assert pure.oom_batches == loop.sim.oom_batches
    assert pure.calibrator.scales() == sched.rl_state.calibrator.scales()
    count = {o: sched.metrics.sample("rlsched_oom_requests_total", {"outcome": o}) or 0 for o in ("retried", "failed")}
    return pure, statuses, count


def test_an_oom_batch_is_retried_once_and_the_memory_scale_learned() -> None:
    """Three requests that fit the profile together but not the GPU (memory 2.5x): the batch fails, each
    request is queued again once, the memory scale rises, and they finish in smaller batches."""
    pure, statuses, count = _both((1536, 1536, 1536), scaled(COST, memory_scale=2.5), "request", "seed-memory")
    assert statuses == ["completed"] * 3 and pure.oom_batches == 1
    assert count == {"retried": 3, "failed": 0}
    assert pure.calibrator.scales()["qwen-image"][2] > 1.0


def test_fifo_sends_the_retried_requests_only_in_a_batch_the_raised_belief_says_fits() -> None:
    """vLLM-Omni's FIFO packs the three again after the first OOM; the memory check cuts that batch to what
    the raised memory scale says fits, so no request fails (issue 47: "4 queued again", then "4 failed")."""
    pure, statuses, count = _both((1536, 1536, 1536), scaled(COST, memory_scale=2.5), "request", "fifo")
    assert statuses == ["completed"] * 3 and pure.oom_batches == 1 and pure.memory_trims >= 1
    assert count == {"retried": 3, "failed": 0}


def test_step_mode_fails_an_oom_batch_once() -> None:
    pure, statuses, count = _both((1536, 1536, 1536), scaled(COST, memory_scale=2.5), "step", "seed-memory")
    assert statuses == ["failed_oom"] * 3 and count == {"retried": 0, "failed": 3}


def test_a_gpu_smaller_than_the_profiles_is_read_from_the_device_before_the_first_decision() -> None:
    """The H200 profile deployed on an A100 (80 GB): the plugin reads the device's memory (the simulator's
    NVML) and packs for it — no OOM, where the profile alone would run all four at once."""
    sizes = (1024, 1024, 1024, 1024)  # 18.7 GB of activations: the H200's 75 GB of room, not the A100's 14
    a100 = load_profile("qwen-image-a100-vllm-omni")
    pure, statuses, count = _both(sizes, a100, "request", "seed-memory")
    assert statuses == ["completed"] * 4 and pure.oom_batches == 0 and count == {"retried": 0, "failed": 0}
    assert pure.calibrator.room > 1.0
