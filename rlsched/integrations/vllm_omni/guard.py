"""One guarded decision for the three places the plugin asks a policy: the engine's scheduler, the
router pool and the central pool.

The rule, once: a decision runs through a runner with a deadline (``deadline.py``: on the calling
thread with a watchdog for rlsched's own policies, on a worker thread for any other), so the thread
that asks — the engine's busy loop, or the orchestrator's event loop that serves every add and abort
of the server — waits at most the deadline, whatever the policy does. A decision slower than the
budget or interrupted at the deadline (``timeout``) is an overrun. A lone overrun past the budget is used
all the same (its answer came within the deadline: the time is spent whatever the guard does with it);
the second in a row is discarded (``slow``), and each overrun not used skips the decider for 2 ** (n - 1)
calls, n the overruns in a row, at most ``MAX_BACKOFF`` (``backoff``: 2, 4 ... after ``slow``; 1, 2 ... from
a ``timeout`` after a call within the budget); a decision that was
interrupted or raised resets the policy before its next call (its structures may be half-updated).
Each site falls back to vLLM-Omni's own rule with the reason, from one vocabulary (``REASONS``);
what a site checks of a decision afterwards (an id that is not waiting, a replica index out of
range ...) adds its own reasons beside these.

No vLLM import.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import Any

from rlsched.integrations.vllm_omni.deadline import DeadlineRunner, DecisionTimeout, InlineRunner, runner_for

REASONS = (
    "exception",  # the decision raised (SystemExit and KeyboardInterrupt of the decision's own thread included)
    "slow",       # it took longer than the budget, the second overrun in a row (its result is discarded)
    "timeout",    # it overran the deadline: the caller stopped waiting (the call is interrupted)
    "busy",       # an overrun call is still running on the worker thread: the decider is not asked
    "backoff",    # skipped after an overrun not used: 2 ** (n - 1) calls at the n-th overrun in a row, at most
                  # MAX_BACKOFF (2, 4 ... after `slow`, whose lone overrun before it was used; 1, 2 ... from a
                  # `timeout` after a call within the budget)
)
"""Why a guarded decision was not taken: the fallback reasons the three sites share."""
MAX_BACKOFF = 64
"""Most calls skipped after overruns in a row before the decider is asked again."""

__all__ = ["MAX_BACKOFF", "REASONS", "GuardedDecision", "runner_for"]


class GuardedDecision:
    """Asks a decider through ``runner`` and says why not when it cannot use the answer.

    ``reset``: called before the next decision after one raised or was interrupted. ``observe``: each
    completed decision's own seconds, those checked against the budget (a latency histogram).

    The budget is checked against the time the decision itself ran (the runner's ``last_own_s``: CPU time
    on the caller's thread for rlsched's policies; a worker's time less its waits for a CPU for any other),
    not the time the caller waited: on a loaded host a 0.2 ms central decision waited up to 8 ms for a CPU
    (the kernel's run-queue delay) or for the GIL, and 2 ms of wall clock discarded it (issue 47). The
    deadline still bounds the wait in wall-clock time. ``exception_reasons``: a reason for an exception
    type that names something more precise than ``exception`` (``PolicyOutputError``: ``nan``).
    The first decision after a reset is checked against the deadline only, not the budget: a reset policy
    rebuilds its structures from the queue in that call (its queue index: O(queue log queue), 5-11 ms of CPU at
    4,096 waiting, every time), the price of the reset, paid whatever the guard does with the answer. Discarding
    it saved the engine nothing and cost more: FIFO served, and the back-off skipped the policy for two calls
    more (``rlsched bench plugin`` at 4,096 waiting, issue 47: a timeout, then ``slow``, then their back-offs).
    Past the budget it leaves the streak of overruns as it was (a slow call next backs off longer), counted in
    ``rebuilds_over_budget``.
    A lone overrun — one past the budget after a decision within it — is used too, and starts the streak
    without a back-off (``lone_overruns`` counts them): a single spike of the thread's CPU time that no rlsched
    code explains (a 0.37 ms piece of numpy work measured 20 ms of its thread's CPU time once in 118,494 runs
    on a loaded host, issue 47) otherwise handed two calls to the fallback, and discarding an answer that is
    already computed saves the engine nothing. Overruns in a row still back off: a policy that is slow, not
    unlucky, is skipped for 2, 4 ... calls and its second answer is discarded (``slow``).
    ``pause_gc`` (default on; the engine's scheduler passes ``pause_gc_in_decisions``): the garbage collector
    is paused during the call, on the calling thread (a decision interrupted at the deadline cannot leave it
    off); what fell due runs after the call is timed. A full collection of a vLLM process (torch, the
    engine) landing in a 0.1 ms routing decision overran a 100 ms budget in ``make test-e2e`` (2 of 3 runs,
    2026-12-04, when only the scheduler paused it).
    One thread calls a guard.
    """

    def __init__(self, runner: DeadlineRunner | InlineRunner, budget_s: float, *, reset: Callable[[], None],
                 observe: Callable[[float], None] | None = None,
                 exception_reasons: Mapping[type, str] | None = None, pause_gc: bool = True) -> None:
        self.runner = runner
        self.budget_s = budget_s
        self._reset = reset
        self._observe = observe
        self._exception_reasons = dict(exception_reasons or {})
        self.pause_gc = pause_gc
        self.backoff_left = 0
        self.overruns_in_a_row = 0
        self.needs_reset = False
        self.rebuilds_over_budget = 0
        """First decisions after a reset that ran past the budget and were used all the same."""
        self.lone_overruns = 0
        """Decisions past the budget after one within it, used all the same (the streak's first)."""

    def refusal(self) -> str | None:
        """``busy`` or ``backoff`` (one skipped call counted down) when the decider is not to be asked now."""
        if self.runner.busy:
            return "busy"
        if self.backoff_left:
            self.backoff_left -= 1
            return "backoff"
        return None

    def call(self, fn: Callable[[Any], Any], arg: Any) -> tuple[str | None, Any]:
        """``(None, fn(arg))``, or ``(reason, None)``: refused (``refusal``), raised, slow or timed out."""
        reason = self.refusal()
        if reason is not None:
            return reason, None
        rebuilding = self.needs_reset  # the first call since a reset: checked against the deadline only
        if rebuilding:
            self.needs_reset = False
            self._reset()
        t0 = time.perf_counter()
        try:
            value = self._run(fn, arg)
        except DecisionTimeout:
            self._overrun()
            self.needs_reset = True
            return "timeout", None
        except Exception as exc:  # PolicyAbort (SystemExit, KeyboardInterrupt ... of the decision) included
            self.needs_reset = True
            return self._exception_reasons.get(type(exc), "exception"), None
        elapsed = getattr(self.runner, "last_own_s", time.perf_counter() - t0)
        if self._observe is not None:
            self._observe(elapsed)
        if elapsed > self.budget_s:
            if rebuilding:
                self.rebuilds_over_budget += 1
                return None, value
            if not self.overruns_in_a_row:  # a lone overrun: used, the streak started, no back-off yet
                self.overruns_in_a_row = 1
                self.lone_overruns += 1
                return None, value
            self._overrun()
            return "slow", None
        self.overruns_in_a_row = 0
        return None, value

    def close(self) -> None:
        """The runner's thread ends (a guard replaced by a new one)."""
        self.runner.close()

    def _run(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        if not (self.pause_gc and gc.isenabled()):
            return self.runner.call(fn, arg)
        gc.disable()
        try:
            return self.runner.call(fn, arg)
        finally:
            gc.enable()  # on the calling thread, which waits for the decision: never left off

    def _overrun(self) -> None:
        self.overruns_in_a_row += 1
        self.backoff_left = min(2 ** (self.overruns_in_a_row - 1), MAX_BACKOFF)
