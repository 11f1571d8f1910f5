"""Issue 50: ``RlschedRouter`` reads a few replicas per decision through ``LoadIndex`` and chooses exactly as
reading them all (``_scan``)."""

from __future__ import annotations

import pytest

from rlsched.evaluation import RunSpec, prepare_stage
from rlsched.policies import make_policy
from rlsched.routing import routers
from rlsched.routing.load_index import LoadIndex
from rlsched.routing.routers import RlschedRouter, make_router, run_spec
from rlsched.sim import Request, load_scenario
from rlsched.sim.stage import Stage
from tests.sim.test_stage import replicas, workload

STATIC = "static:agents/tuned/default.json"


def routed(spec: str, mode: str, scan: bool, monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    monkeypatch.setattr(routers, "MANY_KINDS", -1 if scan else 8)
    stage = Stage(workload(300, rate=6.0), replicas(24, mode), seed=1)
    return dict(run_spec(stage, spec).routed)


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("view", ["engine", "ledger", "replica"])
def test_the_index_chooses_as_reading_every_replica(mode: str, view: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = f"{STATIC}@rlsched;view={view}"
    assert routed(spec, mode, False, monkeypatch) == routed(spec, mode, True, monkeypatch)


def test_a_decision_reads_a_few_of_many_replicas() -> None:
    """256 replicas at the scenario's load: a decision reads a handful (every one without the index)."""
    reads = []

    class Counting(RlschedRouter):
        def _score(self, *args):  # type: ignore[no-untyped-def]
            reads[-1] += 1
            return super()._score(*args)

        def route(self, request, stage):  # type: ignore[no-untyped-def]
            reads.append(0)
            return super().route(request, stage)

    stage = prepare_stage(RunSpec("default", "t", 0, 1.0, 30.0, replicas=256), load_scenario("default"))
    stage.run([make_policy(STATIC) for _ in stage.replicas], Counting())
    assert len(reads) > 100 and sum(reads) / len(reads) < 8, sum(reads) / len(reads)


def test_an_empty_replica_that_changed_unseen_is_filed_again() -> None:
    stage = Stage([], replicas(3), seed=0)
    index = LoadIndex(stage.replicas)
    assert index.empty_candidates() == [0]
    stage.replicas[0].receive(Request(0, 0.0, "qwen-image", "image", 512, 512, 1, 20, True, "batch", 60.0), 0.0)
    assert index.empty_candidates() == [1]  # replica 0 holds a request no hook told of
    assert [i for _, i in index.by_end()] == [0]


def test_the_router_index_follows_a_reset_and_drops_its_hooks() -> None:
    stage = Stage(workload(40), replicas(4), seed=0)
    router = make_router("rlsched;view=replica")
    stage.run([make_policy("fifo") for _ in range(4)], router)
    hooks = [len(sim.on_change) for sim in stage.replicas]
    router.reset(stage)
    router.route(workload(1)[0], stage)
    assert [len(sim.on_change) for sim in stage.replicas] == hooks


def test_the_view_of_a_thousand_replicas_is_set_for_a_decision_without_visiting_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``LedgerStage.at`` takes the time and counts the fallbacks from the views' shared clock; a view is
    checked for silence only once the clock passes its bound."""
    from rlsched.routing.views import Ledger, LedgerReplica
    from rlsched.sim import ServingConfig
    from tests.sim.test_stage import COST

    visits = []
    monkeypatch.setattr(LedgerReplica, "current", lambda self: visits.append(self) or self.fallback)
    led = Ledger(lambda slot: COST, ServingConfig("request", 4), silence_s=5.0)
    led.follow(list(range(1000)))
    led.add("a", 7, workload(1)[0])
    assert led.stage.at(1.0).fallbacks == {"missing": 1000} and not visits
    led.stage.at(6.5)  # replica 7's bound (the request bound there at 0 + 5 s) passed: it alone is checked
    assert visits == [led.views[7]]
