"""Issue 50: ``Stage.run`` keeps what exists before a run out of the collector's passes during it and collects
its youngest generation less often (``stage.frozen_heap``), then hands both back."""

from __future__ import annotations

import gc

from rlsched.policies import make_policy
from rlsched.routing.routers import RoundRobin
from rlsched.sim.stage import RUN_GC_EVERY, Stage
from tests.sim.test_stage import replicas, workload


class Watching(RoundRobin):
    """Round-robin, noting the collector's state at each decision."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def route(self, request, stage) -> int:  # type: ignore[no-untyped-def]
        self.seen.append((gc.get_freeze_count(), gc.get_threshold()[0]))
        return super().route(request, stage)


def test_a_run_freezes_what_exists_before_it_and_hands_it_back() -> None:
    reqs = workload(20)
    before = gc.get_threshold(), gc.get_freeze_count()
    router = Watching()
    Stage(reqs, replicas(2), seed=0).run([make_policy("fifo") for _ in range(2)], router)
    assert len(router.seen) == 20
    assert all(frozen > 0 and threshold == max(before[0][0], RUN_GC_EVERY) for frozen, threshold in router.seen)
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


def test_a_run_inside_a_frozen_process_leaves_the_freeze_alone() -> None:
    gc.freeze()
    try:
        Stage(workload(5), replicas(2), seed=0).run([make_policy("fifo") for _ in range(2)], RoundRobin())
        assert gc.get_freeze_count() > 0  # a run that froze and unfroze on its own would leave none
    finally:
        gc.unfreeze()
