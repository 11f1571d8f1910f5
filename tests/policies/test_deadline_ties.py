"""Deadline ties in the routers' queue model (``QueueWork``): work queued with exactly a request's deadline
runs ahead of it (a deadline-ordered replica policy runs the earlier arrival first), so it counts as due
before it, not as pushed back or made late by it.

Caught: work due exactly at a request's deadline no longer counted ahead of it (no router test had two
requests with one deadline)."""

from __future__ import annotations

import pytest

from rlsched.routing.routers import QueueWork, RlschedRouter
from rlsched.sim import Request, ServingConfig, load_profile
from rlsched.sim.stage import ReplicaSpec, Stage

COST = load_profile("qwen-image-h200")
SLO = 600.0


def req(i: int, size: int, slo_s: float = SLO, priority: str = "batch") -> Request:
    return Request(i, 0.0, "qwen-image", "image", size, size, 1, 20, True, priority, slo_s)


def stage(*queues: list[Request]) -> Stage:
    """A stage of ``len(queues)`` idle replicas, each holding its queue (bound, not started)."""
    out = Stage([], [ReplicaSpec(f"r{i}", COST, ServingConfig("request", 1)) for i in range(len(queues))])
    for r, queue in enumerate(queues):
        for q in queue:
            out.bind(q, r)
    return out


def work_of(*reqs: Request) -> float:
    return sum(COST.record(q).work_s for q in reqs)


def test_work_due_exactly_at_a_deadline_is_ahead_of_a_request_of_that_deadline() -> None:
    tied, other, earlier, later = req(1, 1328), req(2, 768), req(3, 512, SLO - 1), req(4, 1024, SLO + 1)
    sim = stage([tied, other, earlier, later]).replicas[0]
    work = QueueWork()
    work.sync(sim)
    assert work.due_before(SLO) == pytest.approx(work_of(tied, other, earlier))  # both ties count ahead
    assert work.due_before(SLO - 1) == pytest.approx(work_of(earlier))
    assert work.due_after(SLO) == 1 and work.due_after(SLO - 1) == 3
    # from t = 0 the queue runs earlier, tied, other, later: "later" finishes in time by a margin m, so any
    # insertion of more than m at the tied deadline makes it (and only it) late; the ties are not counted
    m = later.slo_s - work_of(earlier, tied, other, later)
    assert m > 0
    assert work.made_late(SLO, 0.0, m + 1.0) == 2.0  # a batch request: weight 2
    assert work.made_late(SLO, 0.0, m - 1.0) == 0.0
    # a tied request that would be late behind the insertion is not counted: it runs ahead of it
    assert work.made_late(SLO, SLO - work_of(earlier, tied) - 0.5, 1.0) == 0.0


def test_the_router_counts_a_tied_request_as_ahead_of_the_arrival() -> None:
    """Replica 0 holds a large request due exactly when the arrival is; replica 1 a small one due earlier.
    The arrival waits behind either, so replica 1 finishes it first. Were the tie not counted ahead, replica
    0 would look empty and win."""
    tied, earlier, arrival = req(1, 1328), req(2, 512, SLO - 1), req(3, 512)
    st = stage([tied], [earlier])
    router = RlschedRouter()
    router.reset(st)
    assert router.route(arrival, st) == 1
    preds = router.predict(arrival, st)
    assert [p.due_s for p in preds] == pytest.approx([work_of(tied), work_of(earlier)])
    assert preds[0].finish_s > preds[1].finish_s
