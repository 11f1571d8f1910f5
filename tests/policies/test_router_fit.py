"""rlsched's router sends a request only to a replica whose GPU holds it alone, while one does (its
proposal is what the learned router always offers): two one-GPU replicas and one SP2 replica, a
5120x5120 image fitting the SP2 replica only, arriving while that replica is busy.

Caught: the router chose the earliest predicted finish whatever the memory, so a large image went to a
one-GPU replica and was rejected (``cannot_fit``) although the SP2 replica could run it."""

from __future__ import annotations

import numpy as np

from rlsched.policies import make_policy
from rlsched.routing.routers import RlschedRouter
from rlsched.sim import Request, ServingConfig
from rlsched.sim.cost import load_profile
from rlsched.sim.layout import at_layout
from rlsched.sim.stage import ReplicaSpec, Stage

BASE = load_profile("qwen-image-h200-vllm-omni")
WIDE = at_layout(BASE, 2)
SPECS = [ReplicaSpec("a", BASE, ServingConfig("request", 2)), ReplicaSpec("b", BASE, ServingConfig("request", 2)),
         ReplicaSpec("wide", WIDE, ServingConfig("request", 2))]


def workload() -> list[Request]:
    rng = np.random.default_rng(7)
    sizes = rng.choice([512, 1024, 5120], 60, p=[0.45, 0.45, 0.1])
    return [Request(i, 20.0 * i, "qwen-image", "image", int(s), int(s), 1, 20, True, "batch", 3600.0)
            for i, s in enumerate(sizes)]


class Watched(RlschedRouter):
    """rlsched's router, checking that ``choose(predict(...))`` agrees with its fast ``route``."""

    def route(self, request: Request, stage: Stage) -> int:
        choice = super().route(request, stage)
        assert self.choose(request, self.predict(request, stage)) == choice
        return choice


def test_a_request_goes_to_a_replica_that_holds_it_while_one_does() -> None:
    reqs = workload()
    big = {q.id for q in reqs if not BASE.fits([BASE.record(q)])}
    assert len(big) >= 3 and all(WIDE.fits([WIDE.record(q)]) for q in reqs)
    stage = Stage(reqs, SPECS)
    stage.run([make_policy("static:agents/tuned/default.json") for _ in SPECS], Watched())
    assert {rid: stage.routed[rid] for rid in big} == {rid: 2 for rid in big}
    assert all(r.status == "completed" for r in stage.records.values())


def test_a_request_no_replica_holds_goes_by_the_predicted_finish() -> None:
    huge = Request(0, 0.0, "qwen-image", "image", 10_000, 10_000, 1, 20, True, "batch", 3600.0)
    stage = Stage([], SPECS)
    router = RlschedRouter()
    router.reset(stage)
    preds = router.predict(huge, stage)
    assert [p.fits for p in preds] == [False, False, False]
    assert router.route(huge, stage) == router.choose(huge, preds) == 2  # the wide replica: the earliest finish
