"""The decision of each ``schedule()`` call in the plugin (step 2 of ``scheduler``'s module docstring).

``Decider`` is a collaborator of the plugin's scheduler (``scheduler._PolicyScheduling``): on the queue view
the policy decides on, it asks the policy through its guard (``guard.GuardedDecision``), checks the batch,
and cuts it to what fits the GPU; whatever the policy cannot decide falls back to vLLM-Omni's FIFO with the
memory check (``admission.fifo_that_fits``), counted by reason. No vLLM import.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlsched.sim.admission import admitted, fifo_that_fits

if TYPE_CHECKING:
    from rlsched.integrations.vllm_omni.guard import GuardedDecision
    from rlsched.integrations.vllm_omni.metrics import PluginMetrics
    from rlsched.integrations.vllm_omni.state import PluginState

Checked = Callable[["PluginState"], tuple[str | None, tuple[int, ...]]]
"""The policy's decision on a view, checked (``safety.check_decision``): a fallback reason, or None and the ids."""


class Decider:
    """The policy's batch, or a fallback's; the counts of both (``fallbacks`` by reason, ``decisions``,
    ``waits_overridden``). ``alone(st)``: the ids that must start alone (``oom.OutOfMemory.alone_ids``)."""

    def __init__(self, step_mode: bool, metrics: PluginMetrics, alone: Callable[[PluginState], set[int]]) -> None:
        self.step_mode, self.metrics, self._alone = step_mode, metrics, alone
        self.fallbacks = 0
        """schedule() calls that fell back to FIFO (see ``fallback_reasons``)."""
        self.fallback_reasons: Counter[str] = Counter()
        self.waits_overridden = 0
        self.decisions = 0
        self._decisions_metric: Any = None

    def open(self, metrics: PluginMetrics, policy_name: str) -> None:
        """The engine's metrics (labelled with its model) and the policy the decisions are counted for."""
        self.metrics = metrics
        self._decisions_metric = metrics.decisions.labels(policy=policy_name)

    def fallback(self, reason: str) -> None:
        """Count a call that FIFO schedules instead of the policy."""
        self.fallbacks += 1
        self.fallback_reasons[reason] += 1
        self.metrics.fallbacks.labels(reason=reason).inc()

    def plan(self, st: PluginState, guard: GuardedDecision, decide: Checked, cap: int,
             running: bool) -> tuple[int, ...]:
        """The batch to run on the view ``st`` (ids; empty: admit nothing new while something ``running``),
        at most ``cap``. Whatever decided it, the memory check cut it (``memory_checked``)."""
        refused = guard.refusal()  # busy, backoff: no decision is counted
        if refused is not None:
            self.fallback(refused)
            return self.fifo_that_fits(st, cap)
        self.decisions += 1
        self._decisions_metric.inc()
        reason, checked = guard.call(decide, st)
        if reason is None:
            reason, ids = checked
        if reason is not None:
            self.fallback(reason)
            return self.fifo_that_fits(st, cap)
        if starts_a_misfit(st, ids):
            self.fallback("cannot_fit")
            return self.first_that_fits(st, cap)
        if not ids and not running:
            self.waits_overridden += 1
            self.metrics.wait_overrides.inc()
            return self.first_that_fits(st, cap)
        return self.memory_checked(st, ids)

    def fifo_that_fits(self, st: PluginState, cap: int) -> tuple[int, ...]:
        """What every fallback runs: vLLM-Omni's FIFO with the memory check, on the calibrated cost
        (``admission.fifo_that_fits``; O(batch))."""
        running = st.running if self.step_mode else ()
        return fifo_that_fits(st.waiting.values(), running, st.cost, cap, self._alone(st))

    def memory_checked(self, st: PluginState, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The policy's batch cut to its longest prefix that fits the GPU by the calibrated cost, its first
        request alone if need be (``admission.admitted``); a cut counts as a fallback (``memory``)."""
        if not ids:
            return ids
        waiting = st.waiting
        running = {r.request.id: r for r in st.running} if self.step_mode else {}
        recs = [waiting.get(i) or running[i] for i in ids]
        n = admitted(recs, st.cost, self._alone(st))
        if n == len(ids):
            return ids
        self.fallback("memory")
        return ids[:n]

    def first_that_fits(self, st: PluginState, cap: int) -> tuple[int, ...]:
        """The engine cannot idle on a "wait" while nothing runs: admit as FIFO would (with the memory check),
        but from the first waiting request the GPU can hold at all (a request no GPU of the profile can hold
        must not start ahead of ones that fit); from the head when it fits or none does."""
        for n, rec in enumerate(st.waiting.values()):
            if st.cost.fits([rec]):
                return self.fifo_that_fits(st, cap) if n == 0 else (rec.request.id,)
        return self.fifo_that_fits(st, cap)


def starts_a_misfit(st: PluginState, ids: tuple[int, ...]) -> bool:
    """The batch starts a waiting request no GPU of the profile can hold while another waiting request
    fits (the engine cannot reject it: it runs only when nothing else can)."""
    waiting = st.waiting
    if not any(i in waiting and not st.cost.fits([waiting[i]]) for i in ids):
        return False
    return any(st.cost.fits([rec]) for rec in waiting.values())


__all__ = ["Decider", "starts_a_misfit"]
