"""``rlsched.sim.central.CentralQueue``: late binding's rule, written once for the simulator's ``Stage`` and the
engine's ``CentralStagePool`` (tests/vllm/test_central_queue_shared.py asserts the pool calls the same class)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rlsched.policies import make_policy
from rlsched.sim import ServingConfig, load_profile
from rlsched.sim.central import CentralQueue, kind_key, next_batch
from rlsched.sim.stage import Stage
from tests.sim.test_stage import COST, replicas, workload

INF = math.inf


class Hub:
    """A minimal view: what ``CentralQueue`` asks of one (``central.Hub``)."""

    def __init__(self, r: int) -> None:
        self.first, self.now, self.waiting, self.woken, self.costs = r, 0.0, [], 0, []

    @property
    def needs_decision(self) -> bool:
        return bool(self.waiting)

    def receive(self, item: Any, now: float) -> None:
        self.waiting.append(item)

    def release(self, ids: Iterable[Any]) -> list[Any]:
        ids = set(ids)
        out = [i for i in self.waiting if i in ids]
        self.waiting = [i for i in self.waiting if i not in ids]
        return out

    def wake(self) -> None:
        self.woken += 1

    def adopt_cost(self, cost: Any) -> None:
        self.costs.append(cost)


def _queue(kinds: list[tuple[Any, Any]]) -> CentralQueue:
    queue = CentralQueue()
    assert queue.open([(r, cost, serving) for r, (cost, serving) in enumerate(kinds)], Hub)
    queue.reset_candidates(range(len(kinds)))
    return queue


def test_one_view_per_cost_model_and_serving_config_in_order_of_first_replica() -> None:
    wide = load_profile("qwen-image-h200-vllm-omni")
    a, b = ServingConfig("request", 4), ServingConfig("request", 2)
    queue = _queue([(COST, a), (wide, a), (COST, a), (COST, b)])
    assert [v.first for v in queue.views] == [0, 1, 3]
    assert [queue.kind(r) for r in range(4)] == [0, 1, 0, 2]
    assert kind_key(COST, a) == kind_key(COST, ServingConfig("request", 4)) != kind_key(COST, b)
    same = queue.views
    assert not queue.open([(r, c, s) for r, (c, s) in enumerate([(COST, a), (wide, a), (COST, a), (COST, b)])], Hub)
    assert queue.views is same  # the same kinds: the views (and what they hold) are kept


def test_a_request_parks_in_every_view_and_leaves_every_view_when_handed_out() -> None:
    queue = _queue([(COST, 0), (COST, 1)])
    for rid in (7, 8, 9):
        queue.park(rid, 0.0)
    assert queue.hand_out(1, [8]) == [8]
    assert [v.waiting for v in queue.views] == [[7, 9], [7, 9]]
    queue.drop_elsewhere(None, [9])
    assert [v.waiting for v in queue.views] == [[7], [7]]


def test_a_dispatch_visits_free_replicas_lowest_first_skipping_held_ones_until_their_hold_ends() -> None:
    queue = _queue([(COST, 0)] * 4)
    queue.park("x", 0.0)
    free = {0: (False, INF), 1: (True, 0.0), 2: (False, 5.0), 3: (True, 0.0)}
    queue.hold(3, 2.0)
    seen = [r for r in queue.visit(0.0, free.__getitem__)]
    assert seen == [1]
    assert queue.views[0].woken == 0  # the driver wakes a kind's view when it serves one of its replicas
    assert queue.view_for(1, 0.0) == (0, queue.views[0]) and queue.view_for(3, 0.0)[0] == 0
    assert queue.views[0].woken == 1  # once a dispatch
    # replica 0 is not visited again until marked; 2 comes back at its timer, 3 when its hold ends
    free = {r: (True, 0.0) for r in range(4)}
    assert list(queue.visit(1.0, free.__getitem__)) == [1]
    assert list(queue.visit(2.0, free.__getitem__)) == [1, 3]
    assert list(queue.visit(5.0, free.__getitem__)) == [1, 2, 3]
    queue.mark(0)
    assert list(queue.visit(5.0, free.__getitem__)) == [0, 1, 2, 3]
    assert list(queue.visit(5.0, free.__getitem__, among=[3, 1])) == [1, 3]  # a scan of exactly those


def test_an_empty_queue_visits_nothing_and_a_fork_resumes_from_its_replica() -> None:
    queue = _queue([(COST, 0)] * 3)
    assert list(queue.visit(0.0, lambda r: (True, 0.0))) == []
    queue.park("x", 0.0)
    assert list(queue.visit(0.0, lambda r: (True, 0.0), start=1, resumed=True)) == [1, 2]
    assert queue.views[0].woken == 0 and queue.view_for(1, 0.0) and queue.views[0].woken == 0  # woken at the fork


def test_a_calibration_version_is_adopted_once_per_replica() -> None:
    queue = _queue([(COST, 0), (COST, 0)])
    queue.adopt(0, "c2", version=2)
    queue.adopt(0, "c2", version=2)
    queue.adopt(1, "c2", version=2)
    queue.adopt(5, "c9", version=3)  # a replica the queue does not serve
    queue.adopt(0, "c3")  # the simulator's replicas: every new calibration
    assert queue.views[0].costs == ["c2", "c2", "c3"]


def test_next_batch_is_takes_next_batch_with_its_due_time() -> None:
    assert next_batch(0, False, INF, 3.0, False) == (True, 3.0)
    assert next_batch(0, True, 10.0, 3.0, False, 0.5) == (False, 9.5)
    assert next_batch(1, False, INF, 3.0, False) == (False, INF)


def test_the_stage_serves_late_binding_through_its_central_queue(monkeypatch: Any) -> None:
    visits = []
    real = CentralQueue.visit

    def visit(self: CentralQueue, *a: Any, **kw: Any) -> Any:
        visits.append(self)
        return real(self, *a, **kw)

    monkeypatch.setattr(CentralQueue, "visit", visit)
    stage = Stage(workload(40, seed=1), replicas(3), seed=0)
    stage.run([make_policy("fifo") for _ in range(3)], central=lambda: make_policy("edf"))
    assert visits and all(q is stage.central_queue for q in visits)
    assert stage.hubs is stage.central_queue.views and all(not h.waiting for h in stage.hubs)
