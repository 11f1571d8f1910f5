"""What the end-to-end run exposed: warm-up in the metrics, a stale queue-depth gauge, and
no check that vLLM-Omni admitted the batch the policy chose."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from prometheus_client import CollectorRegistry  # noqa: E402
from vllm_omni.diffusion.sched import RequestScheduler  # noqa: E402

from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.metrics import PluginMetrics  # noqa: E402
from rlsched.integrations.vllm_omni.scheduler import _PolicyScheduling  # noqa: E402
from tests.vllm.fakes import Clock, finish_wave, mk_req, new_ids, od, plugin  # noqa: E402


def _value(sched: Any, name: str, **labels: str) -> float:
    return sched.metrics.sample(name, labels) or 0.0


def test_warmup_is_not_counted_and_serving_starts_afresh() -> None:
    clock = Clock()
    sched = plugin("edf", clock=clock)
    first = sched.rl_state
    sched.begin_warmup()
    sched.add_request(mk_req("dummy_req_id", priority="realtime", slo_ms=1))
    clock.t = 5.0
    assert finish_wave(sched, sched.schedule()) == {"dummy_req_id"}
    sched.end_warmup()
    assert _value(sched, "rlsched_requests_finished_total", priority="realtime", outcome="slo_missed") == 0
    assert _value(sched, "rlsched_batch_size_count") == 0
    assert sched.rl_state is not first and sched.rl_state.time() == 0.0  # clock origin: serving start
    sched.add_request(mk_req("A", priority="realtime", slo_ms=1))
    clock.t = 6.0
    finish_wave(sched, sched.schedule())
    assert _value(sched, "rlsched_requests_finished_total", priority="realtime", outcome="slo_missed") == 1


def test_queue_depth_follows_arrivals_between_schedule_calls() -> None:
    sched = plugin("fifo")
    for i, cls in enumerate(["realtime", "batch", "batch"]):
        sched.add_request(mk_req(f"R{i}", priority=cls))
    assert _value(sched, "rlsched_queue_depth", priority="batch") == 2  # no schedule() yet
    assert _value(sched, "rlsched_queue_depth", priority="realtime") == 1
    out = sched.schedule()
    assert len(new_ids(out)) == 3
    assert _value(sched, "rlsched_queue_depth", priority="batch") == 0
    sched.add_request(mk_req("late", priority="background"))  # mid-wave: request mode calls no schedule()
    assert _value(sched, "rlsched_queue_depth", priority="background") == 1


class _AdmitsOne(RequestScheduler):
    """An upstream scheduler that admits fewer than asked (e.g. a new admission rule)."""

    def schedule(self) -> Any:
        saved, self.max_num_running_reqs = self.max_num_running_reqs, 1
        try:
            return super().schedule()
        finally:
            self.max_num_running_reqs = saved


class _Stingy(_PolicyScheduling, _AdmitsOne):
    step_mode = False


def test_admission_mismatch_is_counted() -> None:
    cfg = PluginConfig(policy="fifo", telemetry=False, decision_budget_ms=60e3, decision_deadline_ms=60e3)
    sched = _Stingy("fifo", cfg, clock=Clock(), metrics=PluginMetrics(CollectorRegistry()))
    sched.initialize(od(4))
    for rid in "ABC":
        sched.add_request(mk_req(rid))
    assert new_ids(sched.schedule()) == ["A"]  # the policy chose A, B, C
    assert sched.admission_mismatches == 1
    assert _value(sched, "rlsched_admission_mismatches_total") == 1
    ok = plugin("fifo")
    for rid in "ABC":
        ok.add_request(mk_req(rid))
    assert new_ids(ok.schedule()) == ["A", "B", "C"] and ok.admission_mismatches == 0


def test_time_scale_runs_the_plugin_clock_faster() -> None:
    import time

    cfg = PluginConfig(policy="fifo", telemetry=False, time_scale=100.0)
    from rlsched.integrations.vllm_omni.scheduler import RLRequestScheduler

    plain = RLRequestScheduler("fifo", cfg, metrics=PluginMetrics(CollectorRegistry()))
    plain.initialize(od(4))
    t0 = plain.rl_state.time()
    time.sleep(0.05)
    assert plain.rl_state.time() - t0 >= 4.0  # 0.05 wall s x 100
