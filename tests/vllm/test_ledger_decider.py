"""``LedgerStagePool`` composes a ``Decider`` (issue 49) instead of subclass template hooks: the pool asks it for a
request's replica and tells it when the live replicas change, a state is heard and a replica leaves. Any object
with those four methods is a decider; the router pool's is ``RouterDecider``, the central pool's its central
policies."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from prometheus_client import CollectorRegistry  # noqa: E402

from rlsched.integrations.vllm_omni.central_pool import CentralStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.ledger_pool import LedgerStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.router_pool import RouterDecider, RouterStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics  # noqa: E402
from rlsched.sim.request import Request  # noqa: E402
from tests.vllm.fakes import ReplicaClient as Client  # noqa: E402
from tests.vllm.test_router import PROFILE, pool, sent, submit  # noqa: E402

HOOKS = ("ask", "replicas_changed", "state_heard", "replica_left")


class Last:
    """A decider that sends every request to the last live replica and notes what it was told."""

    def __init__(self, pool: LedgerStagePool) -> None:
        self.pool, self.told = pool, []
        self.told.append(("made", list(pool._ledger.slots)))  # before the pool first follows its replicas

    def ask(self, req: Request) -> tuple[int | None, str | None]:
        return self.pool._ledger.slots[-1], None

    def replicas_changed(self) -> None:
        self.told.append(("replicas", list(self.pool._ledger.slots)))

    def state_heard(self, slot: int) -> None:
        self.told.append(("state", slot))

    def replica_left(self) -> None:
        self.told.append(("left", list(self.pool._ledger.slots)))


def test_a_ledger_pool_asks_and_tells_its_decider() -> None:
    p = LedgerStagePool(0, [Client() for _ in range(3)], decider=Last, config=RouterConfig(),
                        settings=PluginConfig(profile=PROFILE), clock=lambda: 0.0,
                        metrics=RouterMetrics(CollectorRegistry()))
    decider = p.decider
    assert isinstance(decider, Last) and decider.told == [("made", []), ("replicas", [0, 1, 2])]
    assert [submit(p, f"r{i}") for i in range(3)] == [2, 2, 2] and sent(p) == {"r0": 2, "r1": 2, "r2": 2}
    p.evict_replica(2)
    assert decider.told[-2:] == [("replicas", [0, 1]), ("left", [0, 1])]
    assert submit(p, "r3") == 1


def test_the_router_and_central_pools_compose_a_decider_and_override_no_hook() -> None:
    router = pool(2, "round-robin")
    central = CentralStagePool(0, [Client() for _ in range(2)], policy="edf", config=RouterConfig(router="central"),
                               settings=PluginConfig(profile=PROFILE), metrics=RouterMetrics(CollectorRegistry()))
    assert isinstance(router.decider, RouterDecider) and router._guard is router.decider.guard
    assert central._guard is central.decider.guard and central.central_queue is central.decider.queue
    for p in (router, central):
        assert all(callable(getattr(p.decider, hook)) for hook in HOOKS)
    old_hooks = {"_ask", "_state_heard", "_replicas_changed", "_replica_left", "_follow_live", "_new_guard"}
    for cls in (RouterStagePool, CentralStagePool):
        assert not old_hooks & set(vars(cls)), cls
    assert not {"_ask", "_state_heard", "_replicas_changed"} & set(vars(LedgerStagePool))


def test_the_router_decider_resets_its_router_when_the_replicas_change() -> None:
    resets: list[int] = []

    class Counting:
        name = "counting"

        def reset(self, stage: Any) -> None:
            resets.append(len(stage.replicas))

        def route(self, request: Any, stage: Any) -> int:
            return 0

    p = pool(3, Counting())
    assert resets == [3]
    p.evict_replica(1)
    assert resets == [3, 2] and submit(p, "a") == 0
