"""Per-class quotas in the plugin (issue 48's "optional quota"): against vLLM-Omni's real schedulers, a class
over its quota is held out of the decision while another class waits (the policy's and the fallbacks'), and
runs when it is alone; the plugin and the simulator apply the one rule, ``rlsched.sim.quota`` (issue 49)."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm

if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

import rlsched.integrations.vllm_omni.scheduler as plugin_scheduler  # noqa: E402
import rlsched.sim.simulator as simulator  # noqa: E402
from rlsched.sim import quota  # noqa: E402
from rlsched.sim.simulator import Decision  # noqa: E402
from tests.vllm.fakes import Clock, StepRunner, check_invariants, finish_wave, mk_req, new_ids, plugin  # noqa: E402

CLASSES = {"paid": {"slo_scale": 3.0, "weight": 4}, "bulk": {"slo_scale": 3.0, "weight": 1, "quota": 0.2}}
"""Equal SLO scales: EDF, like FIFO, serves the older (bulk) requests first unless the quota holds them."""


class Boom:
    """A policy that always raises: every decision is the plugin's FIFO fallback."""

    name = "boom"

    def reset(self, state: Any) -> None:
        pass

    def decide(self, state: Any) -> Decision:
        raise RuntimeError("boom")


def _serve(policy: Any, classes: dict[str, Any], bulk: int = 10, paid: int = 10, step: bool = False) -> list[str]:
    """Bulk requests queued first, then paid ones; one request a wave, 1 s a wave on the plugin clock. The
    classes of the waves, in order."""
    clock = Clock()
    sched = plugin(policy, step=step, max_num_seqs=1, clock=clock, classes=classes, default_priority="paid")
    for i in range(bulk):
        sched.add_request(mk_req(f"B{i}", priority="bulk"))
    for i in range(paid):
        sched.add_request(mk_req(f"P{i}", priority="paid"))
    waves = []
    while sched.has_requests():
        out = sched.schedule()
        waves += [rid[0] for rid in new_ids(out)]
        check_invariants(sched)
        clock.t += 1.0
        finish_wave(sched, out)
    return waves


@pytest.mark.parametrize("policy", ["fifo", "edf", Boom()])
def test_the_plugin_holds_a_class_over_its_quota_while_another_waits(policy: Any) -> None:
    waves = _serve(policy, CLASSES)
    assert sorted(waves) == ["B"] * 10 + ["P"] * 10  # everything served: the bulk class after the paid one
    contested = waves[:max(i for i, c in enumerate(waves) if c == "P") + 1]  # while a paid request waited
    # the first wave (no history yet) may be bulk's; then it gets one wave in five while paid waits
    assert contested.count("B") <= 1 + len(contested) * 0.2, waves
    uncapped = _serve(policy, {**CLASSES, "bulk": {"slo_scale": 3.0, "weight": 1}})
    assert uncapped[:10] == ["B"] * 10  # without the quota FIFO's head and EDF's deadlines serve bulk first


def test_alone_the_capped_class_runs() -> None:
    assert _serve("fifo", CLASSES, paid=0) == ["B"] * 10


def test_in_step_mode_the_held_class_is_preempted() -> None:
    """Step mode: the bulk class, running alone, is preempted once paid requests arrive and it is over its quota."""
    clock = Clock()
    sched = plugin("fifo", step=True, max_num_seqs=2, clock=clock, classes=CLASSES, default_priority="paid")
    sched.add_request(mk_req("B0", priority="bulk", steps=50))
    runner = StepRunner()
    for _ in range(3):  # bulk alone: it runs, whatever its share
        out, _ = runner.step(sched)
        assert list(out.scheduled_request_ids) == ["B0"]
        clock.t += 1.0
    sched.add_request(mk_req("P0", priority="paid", steps=50))
    out, _ = runner.step(sched)  # uncapped, FIFO would run both (one key, two seats)
    check_invariants(sched)
    assert list(out.scheduled_request_ids) == ["P0"] and sched.preemptions == 1


def test_the_plugin_and_the_simulator_apply_the_same_quota_objects() -> None:
    """Issue 49: each serving rule defined once. The quota is ``rlsched.sim.quota``'s ``Quotas`` and
    ``QuotaView``, which the plugin's scheduler and the simulator both build and call."""
    assert plugin_scheduler.Quotas is quota.Quotas is simulator.Quotas
    assert plugin_scheduler.QuotaView is quota.QuotaView is simulator.QuotaView
    sched = plugin("fifo", classes=CLASSES, default_priority="paid", quota_window_s=120)
    assert type(sched.quotas) is quota.Quotas and type(sched._quota_view) is quota.QuotaView
    assert sched.quotas.quotas == {"bulk": 0.2} and sched.quotas.window_s == 120
    assert sched._quota_view.state is sched.rl_state
    assert plugin("fifo").quotas is None  # no quota: the policy decides on the state itself
