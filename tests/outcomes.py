"""Per-request outcome checks that can fail on their own.

``summarize()`` raises when completed + failed + rejected + unfinished differs from the
total, so a test asserting that identity on its output cannot fail. ``FinishLog`` counts the
simulator's ``on_finish`` callbacks per request id instead, and ``check_outcomes`` holds the
records, the callbacks and ``summarize()``'s counts against each other.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from rlsched.sim import Simulator
from rlsched.sim.metrics import summarize
from rlsched.sim.request import COMPLETED, FAILED_OOM, REJECTED, RUNNING, WAITING

FINAL = (COMPLETED, FAILED_OOM, REJECTED)


class FinishLog:
    """An ``on_finish`` hook: how often each request id was reported finished, and with which status."""

    def __init__(self, sim: Simulator) -> None:
        self.calls: Counter[int] = Counter()
        self.status: dict[int, str] = {}
        self.at: dict[int, float] = {}
        sim.on_finish.append(self)

    def __call__(self, rec: Any) -> None:
        rid = rec.request.id
        self.calls[rid] += 1
        self.status[rid] = rec.status
        self.at[rid] = rec.finish_s


def check_outcomes(sim: Simulator, log: FinishLog) -> dict[str, Any]:
    """Every request reported finished exactly once, with the status and time its record ends with;
    a record still waiting or running only when the run stopped at a finite horizon; and
    ``summarize()``'s counts equal to the callbacks' per status. Returns the metrics."""
    twice = {rid: n for rid, n in log.calls.items() if n != 1}
    assert not twice, f"on_finish fired more than once for {twice}"
    ended = {rid for rid, rec in sim.records.items() if rec.status in FINAL}
    assert set(log.calls) == ended, "the finish callbacks and the records' final statuses disagree"
    for rid, rec in sim.records.items():
        assert rec.status in FINAL + (WAITING, RUNNING), (rid, rec.status)
        if rec.status in FINAL:
            assert log.status[rid] == rec.status and log.at[rid] == rec.finish_s, rid
            assert not math.isnan(rec.finish_s) and rec.finish_s >= rec.request.arrival_s, rid
        else:  # left over: only when the horizon cut the run before the work drained
            assert sim.horizon_s < math.inf, f"request {rid} still {rec.status} after a run without a horizon"
            assert math.isnan(rec.finish_s), rid
    if sim.horizon_s == math.inf:
        assert sim.arrivals_left == 0 and not sim.waiting and not sim.running
    m = summarize(sim)
    by_status = Counter(log.status.values())
    assert m["requests_completed"] == by_status[COMPLETED]
    assert m["requests_failed"] == by_status[FAILED_OOM]
    assert m["requests_rejected"] == by_status[REJECTED]
    assert m["requests_unfinished"] == sim.total_requests - len(log.calls)
    return m
