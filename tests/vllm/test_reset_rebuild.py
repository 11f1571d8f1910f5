"""Issue 47's last fallbacks: the first decision after a reset rebuilds the policy's queue index from the whole
queue (5-11 ms of CPU at 4,096 waiting), and the guard discarded it as ``slow`` — one timeout became a timeout,
a ``slow`` and three calls of back-off. That decision is now checked against the deadline only
(``GuardedDecision``). Deterministic: a scripted runner says what each decision's own time was."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni.deadline import DecisionTimeout  # noqa: E402
from rlsched.integrations.vllm_omni.guard import GuardedDecision  # noqa: E402

BUDGET_S = 0.005
REBUILD_S = 0.009
"""A reset policy's first decision at 4,096 waiting: its queue index rebuilt (``rlsched bench plugin``)."""


class Scripted:
    """A runner whose decisions took the own time the script says (``DecisionTimeout`` for ``None``)."""

    busy = False

    def __init__(self, own_s: list[float | None]) -> None:
        self.own_s, self.last_own_s = list(own_s), 0.0

    def call(self, fn: Any, arg: Any) -> Any:
        own = self.own_s.pop(0)
        if own is None:
            raise DecisionTimeout("scripted")
        value = fn(arg)
        self.last_own_s = own
        return value

    def close(self) -> None:
        pass


def test_the_first_decision_after_a_reset_is_used_however_long_its_rebuild_took() -> None:
    resets: list[int] = []
    g = GuardedDecision(Scripted([None, REBUILD_S, 0.001]), BUDGET_S, reset=lambda: resets.append(1))
    assert g.call(lambda x: x, 1) == ("timeout", None)
    assert g.call(lambda x: x, 2) == ("backoff", None)
    assert g.call(lambda x: x, 3) == (None, 3)  # reset, then rebuilt: past the budget, used
    assert resets == [1] and g.rebuilds_over_budget == 1
    assert g.call(lambda x: x, 4) == (None, 4) and g.overruns_in_a_row == 0


def test_only_the_first_one_and_a_slow_call_after_it_backs_off_as_the_streak_says() -> None:
    g = GuardedDecision(Scripted([None, REBUILD_S, REBUILD_S]), BUDGET_S, reset=lambda: None)
    reasons = [g.call(lambda x: x, i)[0] for i in range(6)]
    # the timeout and its back-off; the rebuild used; then an ordinary call past the budget is slow, and the
    # back-off after it is the second overrun's (2 calls): the rebuild did not end the streak
    assert reasons == ["timeout", "backoff", None, "slow", "backoff", "backoff"]
    assert g.rebuilds_over_budget == 1


def test_after_a_raising_decision_too_and_the_deadline_still_bounds_the_rebuild() -> None:
    g = GuardedDecision(Scripted([0.0, None, REBUILD_S]), BUDGET_S, reset=lambda: None)
    assert g.call(lambda _: 1 / 0, None)[0] == "exception"
    assert g.call(lambda x: x, 1) == ("timeout", None)  # a rebuild past the deadline is interrupted as ever
    g.backoff_left = 0
    assert g.call(lambda x: x, 2) == (None, 2) and g.rebuilds_over_budget == 1


# ------------------------------------------------------------ in the real scheduler
def test_in_the_scheduler_a_timeout_costs_its_own_call_and_back_off_not_the_rebuild_after_it() -> None:
    """``seed-composite`` over a real ``RequestScheduler`` queue: the decision after the reset rebuilds the
    queue index (counted), and its batch is the one scheduled."""
    from rlsched.sim import queue_index
    from tests.vllm.fakes import finish_wave, mk_req, plugin

    sched = plugin("seed-composite", budget_ms=BUDGET_S * 1e3)
    for i in range(40):
        sched.add_request(mk_req(f"R{i}", (512, 1024)[i % 2]))
    sched._guard.runner = Scripted([0.0, None, REBUILD_S, 0.0])
    finish_wave(sched, sched.schedule())  # the fresh policy's first decision (it builds its index)
    rebuilds = []
    real = queue_index.QueueIndex._rebuild

    def counted(self: Any, state: Any) -> None:
        rebuilds.append(1)
        real(self, state)

    queue_index.QueueIndex._rebuild = counted  # type: ignore[method-assign]
    try:
        for _ in range(4):  # a timeout, its back-off, the reset policy's first decision, one more
            finish_wave(sched, sched.schedule())
    finally:
        queue_index.QueueIndex._rebuild = real  # type: ignore[method-assign]
    assert dict(sched.fallback_reasons) == {"timeout": 1, "backoff": 1}
    assert len(rebuilds) == 1  # the reset policy's first decision rebuilt its index from the queue
    assert sched._guard.rebuilds_over_budget == 1 and sched.decisions == 4
