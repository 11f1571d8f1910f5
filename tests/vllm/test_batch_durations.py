"""Predicted vs observed batch seconds: ``rlsched_batch_duration_seconds{kind}``, the ratio histogram and
the memory headroom gauge, on the simulator's clock (sim-in-the-loop) and a test clock."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from prometheus_client import CollectorRegistry  # noqa: E402

from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.harness.loop import SimClock, make_loop_scheduler, run_in_loop  # noqa: E402
from rlsched.integrations.vllm_omni.metrics import GIB, PluginMetrics  # noqa: E402
from rlsched.integrations.vllm_omni.scheduler import RLRequestScheduler  # noqa: E402
from rlsched.sim import load_scenario  # noqa: E402
from rlsched.sim.truth import scaled  # noqa: E402
from tests.vllm.fakes import Clock, finish_wave, mk_req, od, plugin  # noqa: E402

DURATION_S = 600.0


def _loop(mode: str, truth_factor: float = 1.0):
    """The plugin (EDF, believing the scenario's profile and not calibrating it) over a simulator executing
    ``truth_factor`` × it (``tests/vllm/test_online_calibration.py``: the same, calibrating)."""
    sc = load_scenario("default").with_serving(mode=mode)
    cost = sc.cost()
    reqs = sc.requests(0, 1.0, DURATION_S, cost=cost)
    clock = SimClock()
    sched = make_loop_scheduler(sc.serving, cost, "edf;calibrate=off", clock)
    return run_in_loop(reqs, scaled(cost, time_scale=truth_factor), sc.serving, sched, clock)


def _sample(sched, name: str, **labels: str) -> float:
    return sched.metrics.sample(name, labels) or 0.0


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("truth", [1.0, 1.3])
def test_one_observation_per_batch_and_the_ratio_is_the_profiles_error(mode: str, truth: float) -> None:
    """Same profile: observed = predicted for every batch (ratio 1). Executed 30 % slower than the profile the
    plugin believes: every batch's ratio 1.3."""
    loop = _loop(mode, truth)
    sched, n = loop.scheduler, len(loop.batches)
    assert n > (1000 if mode == "step" else 10)
    assert _sample(sched, "rlsched_batch_duration_ratio_count") == n
    for kind in ("predicted", "observed"):
        assert _sample(sched, "rlsched_batch_duration_seconds_count", kind=kind) == n
    predicted = _sample(sched, "rlsched_batch_duration_seconds_sum", kind="predicted")
    observed = _sample(sched, "rlsched_batch_duration_seconds_sum", kind="observed")
    assert observed == pytest.approx(truth * predicted, rel=1e-6)
    assert _sample(sched, "rlsched_batch_duration_ratio_sum") == pytest.approx(truth * n, rel=1e-6)
    # every batch, not just the mean: all n ratios fall in the bucket that holds ``truth``
    low, high = {1.0: ("0.841", "1.189"), 1.3: ("1.189", "1.414")}[truth]
    inside = (_sample(sched, "rlsched_batch_duration_ratio_bucket", le=high)
              - _sample(sched, "rlsched_batch_duration_ratio_bucket", le=low))
    assert inside == n


def test_headroom_is_what_telemetry_reads() -> None:
    """The loop's telemetry is the simulator's (weights resident between batches): headroom = GPU - weights."""
    loop = _loop("request")
    cost = loop.sim.cost
    headroom = _sample(loop.scheduler, "rlsched_memory_headroom_bytes")
    assert headroom == pytest.approx((cost.gpu_memory_gb - cost.weights_gb) * GIB, rel=1e-9)


def test_a_wave_is_timed_on_the_plugin_clock() -> None:
    clock = Clock()
    sched = plugin("fifo", clock=clock)
    sched.add_request(mk_req("A"))
    sched.add_request(mk_req("B"))
    out = sched.schedule()
    predicted = sched._predicted_s(tuple(out.scheduled_request_ids), [0, 0])
    clock.t = 2.0 * predicted
    finish_wave(sched, out)
    assert _sample(sched, "rlsched_batch_duration_seconds_sum", kind="observed") == pytest.approx(2.0 * predicted)
    assert _sample(sched, "rlsched_batch_duration_ratio_sum") == pytest.approx(2.0)
    finish_wave(sched, out)  # the same output again (no schedule() started it): not a second batch
    assert _sample(sched, "rlsched_batch_duration_ratio_count") == 1


def test_warm_up_and_unknown_telemetry_are_not_recorded() -> None:
    """The warm-up wave stays out, as from every batch metric; without telemetry (CPU) no headroom
    sample is exported at all, not a 0 that would read as a full GPU."""
    reg = CollectorRegistry()
    cfg = PluginConfig(policy="fifo", decision_budget_ms=60e3, decision_deadline_ms=60e3, telemetry=False)
    sched = RLRequestScheduler("fifo", cfg, clock=Clock(), metrics=PluginMetrics(reg))
    sched.initialize(od(4, model="m"))
    sched.begin_warmup()
    sched.add_request(mk_req("warm"))
    finish_wave(sched, sched.schedule())
    sched.end_warmup()
    assert _sample(sched, "rlsched_batch_duration_ratio_count") == 0
    sched.add_request(mk_req("A"))
    finish_wave(sched, sched.schedule())
    assert _sample(sched, "rlsched_batch_duration_ratio_count") == 1
    assert "rlsched_memory_headroom_bytes" not in {s.name for m in reg.collect() for s in m.samples}


def test_a_failing_metric_never_reaches_the_engine(monkeypatch) -> None:
    sched = plugin("edf")
    sched.add_request(mk_req("A"))

    def broken(*args) -> None:
        raise RuntimeError("metrics bug")

    monkeypatch.setattr(sched.metrics, "record_batch", broken)
    assert finish_wave(sched, sched.schedule()) == {"A"}
