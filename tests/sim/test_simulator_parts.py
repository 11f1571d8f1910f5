"""The simulator's collaborators (``sim.arrivals``, ``sim.waiting``, ``sim.device``) and what the
``Simulator`` driving them must keep of each: the order of an arrival's events, the queue's order and
journal, the batch in flight across a fork."""

from __future__ import annotations

import pytest

from rlsched.errors import InvalidDecision, InvalidRequest
from rlsched.policies import make_policy
from rlsched.sim import ServingConfig, Simulator
from rlsched.sim.arrivals import Arrivals
from rlsched.sim.cost import load_profile
from rlsched.sim.device import Device
from rlsched.sim.request import RUNNING, WAITING
from rlsched.sim.truth import scaled
from rlsched.sim.view import DEQUEUED, ENQUEUED, Decision
from rlsched.sim.waiting import Waiting
from tests.conftest import make_request

COST = load_profile("qwen-image-h200")


def test_arrivals_are_in_time_order_ties_kept_and_a_request_counts_as_left_until_it_has_arrived() -> None:
    """Caught: an unstable sort, or a cursor moved before the arrival is handled (``on_arrival`` hooks would
    read one fewer ``arrivals_left``, as the simulator read it before ``Arrivals``)."""
    reqs = [make_request(2, 5.0), make_request(0, 1.0), make_request(1, 1.0)]
    arrivals = Arrivals(reqs)
    assert [r.id for r in arrivals] == [0, 1, 2] and len(arrivals) == 3
    assert arrivals.next_s == 1.0 and arrivals.ahead(1.0) == [reqs[1], reqs[2]]
    arrivals.advance()
    assert (arrivals.head.id, arrivals.left, arrivals.next_s) == (1, 2, 1.0)
    arrivals.advance()
    arrivals.advance()
    assert (arrivals.left, arrivals.next_s, arrivals.ahead(1e9)) == (0, float("inf"), [])
    sim = Simulator(reqs, COST, ServingConfig("request", 4, 0.0))
    seen: list[int] = []
    sim.on_arrival.append(lambda rec: seen.append(sim.arrivals_left))
    sim.run(make_policy("fifo"))
    assert seen == [3, 2, 1]
    with pytest.raises(InvalidRequest, match="'id'"):
        Arrivals([make_request(4, 0.0), make_request(4, 2.0)])


def test_the_waiting_queue_puts_preempted_requests_first_and_journals_every_change() -> None:
    """Caught: ``push_front`` appending at the tail, a change left out of the journal, or a batch that
    leaves a running request out without handing it back for preemption."""
    queue = Waiting()
    recs = [COST.record(make_request(i, float(i))) for i in range(4)]
    for rec in recs:
        queue.add(rec)
    batch, left_out = queue.take_batch((1, 2), running=[])
    assert batch == recs[1:3] and left_out == [] and list(queue.waiting) == [0, 3]
    for rec in batch:
        rec.status = RUNNING
    batch2, left_out = queue.take_batch((0, 1), running=batch)
    assert batch2 == [recs[0], recs[1]] and left_out == [recs[2]]
    queue.preempt(left_out)
    assert list(queue.waiting) == [2, 3] and (recs[2].status, recs[2].preemptions) == (WAITING, 1)
    entries = queue.journal.since(0)
    assert entries is not None
    assert [(op, rec.request.id) for op, rec in entries] == [
        (ENQUEUED, 0), (ENQUEUED, 1), (ENQUEUED, 2), (ENQUEUED, 3), (DEQUEUED, 1), (DEQUEUED, 2), (DEQUEUED, 0),
        (ENQUEUED, 2)]
    assert queue.pop(9) is None and len(queue.journal.since(0) or ()) == 8  # nothing to pop: nothing journaled
    with pytest.raises(InvalidDecision, match="request 9 is not waiting"):
        queue.release([3, 9])


def test_compacting_the_waiting_queue_keeps_its_order() -> None:
    """Caught: a compaction that reorders (a set, a sort) or never runs (a dequeue left uncounted)."""
    queue = Waiting()
    for i in range(3000):
        queue.add(COST.record(make_request(i, float(i))))
    before = queue.waiting
    for i in range(0, 1500, 2):
        queue.take(i)
    for i in range(1500, 3000, 4):
        queue.take_batch((i, i + 2), running=[])
    queue.compact()
    assert queue.waiting is before  # 1,500 taken, 1,500 left: not yet more gone than left
    queue.take(1)
    queue.compact()
    assert queue.waiting is not before and list(queue.waiting) == list(range(3, 3000, 2))


def test_a_central_view_that_only_hands_requests_out_compacts_its_queue() -> None:
    """Caught: ``release`` left uncounted, so a late-binding hub (a ``Simulator`` whose requests all leave by
    ``release``) kept every handed-out request's slot for the whole run."""
    hub = Simulator([make_request(i, 0.0) for i in range(3000)], COST, ServingConfig())
    hub.advance_to_next_decision()
    before = hub.waiting
    hub.release(range(0, 3000, 2))
    assert hub.waiting is before  # 1,500 handed out, 1,500 left: not yet more gone than left
    hub.release([1])
    assert hub.waiting is not before and list(hub.waiting) == list(range(3, 3000, 2))


def test_the_device_reports_a_new_calibration_once_and_checks_memory_only_when_told() -> None:
    """Caught: ``newer`` handing the same version twice (every callback would re-rank twice), or a memory
    check cutting a batch the simulator was told not to check."""
    truth = scaled(COST, memory_scale=2.5)
    device = Device(COST, ServingConfig("request", 4, 0.0), truth)
    assert device.newer() is None
    recs = [COST.record(make_request(i, size=1536)) for i in range(3)]
    assert device.start(recs, COST, 0.0) is None  # 3 x 26 GB at the truth: out of memory
    moved, split = device.out_of_memory(recs)
    assert moved and [r.request.id for r in split.retry] == [0, 1, 2] and not split.failed
    cost, cal = device.newer(), device.calibrator
    assert cost is not None and cal is not None and cost is cal.cost and device.newer() is None
    recosted = [cost.record(r.request) for r in recs]
    assert device.admitted(recosted, cost) < 3  # the raised memory scale cuts
    blind = Device(COST, ServingConfig("request", 4, 0.0), truth, memory_check=False)
    assert blind.admitted(recosted, cost) == 3


def test_a_fork_carries_the_batch_in_flight_on_its_device() -> None:
    """Caught: a fork whose device lost the batch in flight — its start (the fork's busy time would count
    from 0 s) or its memory (``memory_used_gb`` would read the weights alone)."""
    truth = scaled(COST, memory_scale=1.1, time_scale=1.2)
    reqs = [make_request(0, 2.0, size=1024), make_request(1, 5.0, size=1024)]
    sim = Simulator(reqs, COST, ServingConfig("request", 4, 0.0), truth=truth, calibrate=False)
    sim.advance_to_next_decision()
    sim.apply(Decision(batch=(0,)))
    sim.fire_next()  # request 1 arrives during the batch
    assert sim.now == 5.0 and sim.gpu_end_s > 5.0
    fork = sim.fork()
    assert fork.memory_used_gb == sim.memory_used_gb > COST.weights_gb
    end = sim.gpu_end_s
    for s in (sim, fork):
        s.fire_next()  # the batch ends
        assert s.now == end and not s.running
    assert fork.busy_s == sim.busy_s == end - 2.0  # started at 2 s
    assert fork.mem_gb_s == sim.mem_gb_s > 0
