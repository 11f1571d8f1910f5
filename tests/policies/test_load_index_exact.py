"""Issue 50: ``LoadIndex``'s keys count the work queued behind each batch (``QueueWork.least_finish``) and the
pruning stays exact: on random fleets, idle to saturated, every decision of ``RlschedRouter`` through the index
is the one reading every replica (``_scan``) gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlsched.policies import make_policy
from rlsched.routing.routers import QueueWork, RlschedRouter
from rlsched.routing.views import ViewRouter
from rlsched.sim import Request, ServingConfig
from rlsched.sim.stage import ReplicaSpec, Stage
from rlsched.sim.truth import scaled
from tests.sim.test_stage import COST, replicas

STATIC = "static:agents/tuned/default.json"


def fleet_workload(n: int, rate: float, seed: int) -> list[Request]:
    """Mixed sizes, classes and SLOs (5 s to 10 min): some requests come due sooner than any before them."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    sizes = rng.choice([512, 768, 1024, 1328], n)
    classes = rng.choice(["realtime", "batch", "background"], n)
    slos = rng.choice([5.0, 15.0, 60.0, 600.0], n, p=[0.1, 0.3, 0.4, 0.2])
    return [Request(i, float(t[i]), "qwen-image", "image", int(s), int(s), 1, 20, True, str(c), float(slo))
            for i, (s, c, slo) in enumerate(zip(sizes, classes, slos))]


class Checked(RlschedRouter):
    """Each decision through the index, checked against reading every replica; counts the replicas read."""

    def __init__(self, savable_first: bool = True) -> None:
        super().__init__(savable_first)
        self.decisions = self.reads = 0
        self._counting = False

    def _score(self, *args):  # type: ignore[no-untyped-def]
        self.reads += self._counting
        return super()._score(*args)

    def route(self, request: Request, stage) -> int:  # type: ignore[no-untyped-def]
        every = self._scan(request, stage)
        self._counting = True
        chosen = super().route(request, stage)
        self._counting = False
        self.decisions += 1
        assert chosen == every, (request.id, stage.now, chosen, every)
        return chosen


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("load", [0.5, 2.0, 6.0])
@pytest.mark.parametrize("view", ["replica", "engine", "ledger"])
def test_the_index_chooses_as_reading_every_replica_idle_to_saturated(seed: int, load: float, view: str) -> None:
    n = 12
    rng = np.random.default_rng(100 + seed)
    mode = "step" if rng.random() < 0.3 else "request"
    router = Checked(savable_first=bool(rng.random() < 0.8))
    stage = Stage(fleet_workload(240, rate=0.18 * n * load, seed=seed), replicas(n, mode), seed=seed)
    policies = [make_policy(str(rng.choice([STATIC, "fifo", "edf"]))) for _ in range(n)]
    stage.run(policies, router if view == "replica" else ViewRouter(router, view))
    assert router.decisions == 240


@pytest.mark.parametrize("mode", ["request", "step"])
def test_the_index_chooses_as_reading_every_replica_on_calibrating_replicas(mode: str) -> None:
    """Each replica's GPU 30% slower than its profile says: it calibrates online and re-costs its queue (in step
    mode at a step's end that changes nothing else); the keys follow."""
    n = 10
    specs = [ReplicaSpec(f"r{i}", COST, ServingConfig(mode, 4), scaled(COST, time_scale=1.3)) for i in range(n)]
    router = Checked()
    stage = Stage(fleet_workload(300, rate=0.18 * n * 1.5, seed=7), specs, seed=7)
    stage.run([make_policy(STATIC) for _ in range(n)], router)
    assert router.decisions == 300 and any(sim.calibrator.version for sim in stage.replicas)


def test_a_saturated_fleet_is_decided_on_a_few_replicas() -> None:
    """64 replicas at their capacity in full batches, work queued behind every batch, one SLO: the keys that
    count the queued work leave ~9 to read (the batch ends alone left 50 of 64: every end is near, the queues
    decide)."""
    n = 64
    reqs = [Request(i, 0.075 * i, "qwen-image", "image", 1024, 1024, 1, 20, True, "batch", 60.0) for i in range(2000)]
    router = Checked()
    Stage(reqs, replicas(n), seed=0).run([make_policy(STATIC) for _ in range(n)], ViewRouter(router, "engine"))
    assert router.decisions == 2000 and router.reads / router.decisions < 15, router.reads / router.decisions


@pytest.mark.parametrize("seed", range(40))
def test_least_finish_is_a_lower_bound_of_every_later_prediction(seed: int) -> None:
    """``least_finish(end, t0, theta)`` <= ``max(end, t) + due_first(d, t)`` at every ``t >= t0``, ``d >= theta``."""
    rng = np.random.default_rng(seed)
    work = QueueWork()
    for rid in range(int(rng.integers(0, 9))):
        rec = COST.record(Request(rid, 0.0, "qwen-image", "image", int(rng.choice([512, 1024, 1328])),
                                  int(rng.choice([512, 1024])), 1, 20, True, "batch", 1.0))
        rec.deadline_s = float(rng.uniform(0, 40))
        rec.key = rid
        work._add(rec)
    end = -math.inf if rng.random() < 0.3 else float(rng.uniform(0, 30))
    t0, theta = float(rng.uniform(0, 10)), float(rng.uniform(0, 45))
    for savable in (True, False):
        least, later = work.least_finish(end, t0, theta, savable)
        assert later == min((d for d, _ in work._by_deadline if d > theta), default=math.inf)
        for t in [t0, *rng.uniform(t0, 50, 60), *(s + 1e-9 for s in work._latest if s >= t0)]:
            for d in (theta, theta + float(rng.uniform(0, 20))):
                due = work.due_first(d, t) if savable else work.due_before(d)
                assert least <= max(end, t) + due + 1e-9, (t, d, savable)


def test_the_ledger_records_a_request_as_its_cost_model_does() -> None:
    """``LedgerReplica`` takes a shape's cost figures from the last request of that shape at the same cost model
    (``_record``): every figure as ``cost.record`` gives it, at the shipped profile and at a calibrated one."""
    from rlsched.routing.views import Ledger

    fast = scaled(COST, time_scale=0.7)
    ledger = Ledger(lambda slot: COST, ServingConfig("request", 4))
    ledger.follow([0])
    view = ledger.views[0]
    rng = np.random.default_rng(3)
    for rid in range(60):
        view.cost = fast if 20 <= rid < 40 else COST  # a calibration, then back to the profile as shipped
        size = int(rng.choice([512, 1024, 1328]))
        req = Request(rid, float(rid), "qwen-image", "image", size, size, 1, int(rng.choice([20, 30])),
                      bool(rng.random() < 0.5), "batch", float(rng.choice([5.0, 60.0])))
        ledger.add(str(rid), 0, req)
        got, want = view.waiting[rid], view.cost.record(req, req.arrival_s + req.slo_s)
        assert [getattr(got, f) for f in FIGURES] == [getattr(want, f) for f in FIGURES]


FIGURES = ("tokens", "quad", "encode_s", "decode_s", "work_s", "step_s", "mem_gb", "deadline_s")
