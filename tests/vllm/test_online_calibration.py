"""Online calibration inside the real scheduler: the plugin, deployed with a profile the GPU does not match,
refits it from the batches it times — the same refit, on the same observations, as the simulator's, so
sim and engine take the same batches (sim-in-the-loop, the simulator playing a GPU at the true cost)."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni.harness.loop import (  # noqa: E402
    SimClock,
    compare,
    make_loop_scheduler,
    run_in_loop,
)
from rlsched.sim import load_scenario  # noqa: E402
from rlsched.sim.metrics import summarize  # noqa: E402
from rlsched.sim.truth import Truth  # noqa: E402

STATIC = "static:agents/tuned/default.json"


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("truth", [Truth(time_scale=1.3), Truth(quadratic_scale=2.0)])
def test_sim_and_engine_calibrate_alike(mode: str, truth: Truth) -> None:
    """The simulator's refit and the plugin's see the same batches take the same time: same versions, same
    batches, same attainment."""
    got = compare("default", STATIC, seed=0, duration_s=900, mode=mode, truth=truth)
    assert got["identical_batches"], got
    assert got["calibration_versions"][0] == got["calibration_versions"][1] >= 1
    assert got["weighted_slo_attainment"][0] == got["weighted_slo_attainment"][1]


def _loop(policy: str, belief, truth, reqs, serving):
    clock = SimClock()
    sched = make_loop_scheduler(serving, belief, policy, clock)
    return run_in_loop(reqs, truth, serving, sched, clock)


def test_the_plugin_converges_to_the_gpu_and_its_decisions_recover() -> None:
    """Deployed with a profile 30 % optimistic: the calibrated plugin's time scale reaches 1.3 within 200
    batches, its metrics say so, and its SLO attainment is within 2 points of the plugin deployed with the
    true profile, where the uncalibrated one loses more."""
    sc = load_scenario("default")
    shipped = sc.cost()
    true = Truth(time_scale=1.3).apply(shipped)
    reqs = sc.requests(1000, 1.0, cost=shipped)
    runs = {name: _loop(policy, belief, true, reqs, sc.serving) for name, policy, belief in (
        ("calibrated", STATIC, shipped), ("deployed", f"{STATIC};calibrate=off", shipped),
        ("reference", f"{STATIC};calibrate=off", true))}
    sched = runs["calibrated"].scheduler
    cal = sched.rl_state.calibrator
    fit = cal.summary()["models"]["qwen-image"]
    assert fit["time"] == pytest.approx(1.3, rel=0.03) and 0 < fit["last_moved_at_batch"] <= 200
    assert sched.metrics.sample("rlsched_calibration_version") == cal.version >= 1
    assert sched.metrics.sample("rlsched_calibration_scale", {"term": "time"}) == pytest.approx(fit["time"])
    assert runs["deployed"].scheduler.rl_state.calibrator is None
    att = {k: summarize(r.sim)["weighted_slo_attainment"] for k, r in runs.items()}
    assert abs(att["calibrated"] - att["reference"]) <= 0.02, att
    assert att["deployed"] < att["reference"] - 0.02, att
    # a default SLO stays what the user wrote it against: a scale times the standalone time on the shipped
    # profile, not on the calibrated one
    st = sched.rl_state
    rec, _ = st.add("no-slo", None, ("qwen-image",))
    req = rec.request
    assert req.slo_s == pytest.approx(st.settings.slo_scale(req.priority) * shipped.record(req).work_s)
    assert rec.work_s == pytest.approx(cal.cost.record(req).work_s) != shipped.record(req).work_s
