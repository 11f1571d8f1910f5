"""The router seam (``rlsched.sim.view.StageView``): every registered router decides on both stages that
implement it, the simulator's ``Stage`` and the router plugin's ``LedgerStage``, and answers an index of a
replica; a teacher (which forks the simulator) refuses the ledger with a typed error naming itself."""

from __future__ import annotations

import pytest

from rlsched.errors import ConfigError
from rlsched.policies import make_policy
from rlsched.routing.routers import ROUTERS, TEACHERS, make_router
from rlsched.routing.views import Ledger, ViewRouter
from rlsched.sim import ServingConfig
from rlsched.sim.stage import Stage
from tests.sim.test_stage import COST, replicas, workload

SERVING = ServingConfig("request", 4)


def ledger_stage(n: int) -> Ledger:
    ledger = Ledger(lambda slot: COST, SERVING, seed=3)
    ledger.follow(list(range(n)))
    return ledger


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_every_router_routes_on_the_plugins_ledger_stage(name: str) -> None:
    """What the deployed router pool does: reset on the ledger's stage, then one route per arrival with the
    choice bound in the ledger (so the next decision sees it)."""
    ledger, router = ledger_stage(3), make_router(name, "edf")
    if isinstance(router, ViewRouter):  # the simulator's deployed view of a stage: the ledger is that view here
        router = router.router
    router.reset(ledger.stage)
    for i, req in enumerate(workload(40, rate=2.0)):
        choice = router.route(req, ledger.stage.at(req.arrival_s))
        assert type(choice) is int and 0 <= choice < 3, (name, choice)
        ledger.add(str(i), ledger.slots[choice], req)
    assert sum(len(v.waiting) + len(v.running) for v in ledger.stage.replicas) == 40


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_every_router_routes_on_the_simulators_stage(name: str) -> None:
    reqs = workload(60, rate=1.5)
    stage = Stage(reqs, replicas(3, "request"), seed=3)
    stage.run([make_policy("edf") for _ in range(3)], make_router(name, "edf"))
    assert set(stage.routed) == {r.id for r in reqs} and set(stage.routed.values()) <= {0, 1, 2}


@pytest.mark.parametrize("name", sorted(TEACHERS))
def test_a_teacher_refuses_the_ledger_stage_by_name(name: str) -> None:
    ledger, router = ledger_stage(2), make_router(name, "edf")
    with pytest.raises(ConfigError, match=rf"{name}.* runs on the simulator's stage only .* not on LedgerStage"):
        router.reset(ledger.stage)
