"""Late binding's rule is written once (issue 49): the simulator's ``Stage`` and the engine's ``CentralStagePool``
both serve their central queue through one ``rlsched.sim.central.CentralQueue`` — the same class, the same replica
kind key, the same free-replica visit, hand-out and calibration adoption."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from prometheus_client import CollectorRegistry  # noqa: E402

import rlsched.sim.central  # noqa: E402
from rlsched.integrations.vllm_omni import central_pool  # noqa: E402
from rlsched.integrations.vllm_omni.central_pool import CentralStagePool, CentralView  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics  # noqa: E402
from rlsched.policies import make_policy  # noqa: E402
from rlsched.sim import stage as stage_module  # noqa: E402
from rlsched.sim.central import CentralQueue, Hub  # noqa: E402
from rlsched.sim.layout import at_layout  # noqa: E402
from rlsched.sim.simulator import ServingConfig  # noqa: E402
from rlsched.sim.stage import ReplicaSpec, Stage  # noqa: E402
from tests.sim.test_stage import workload  # noqa: E402
from tests.vllm.test_central import BASE, PROFILE, Rig, run  # noqa: E402


def test_the_simulator_and_the_plugin_use_the_same_central_queue_class() -> None:
    assert central_pool.CentralQueue is stage_module.CentralQueue is rlsched.sim.central.CentralQueue
    assert central_pool.next_batch_s is stage_module.next_batch_s  # the lead's timer, one function
    rig = Rig(2, "edf")
    stage = Stage([], [ReplicaSpec("r0", BASE, ServingConfig())])
    assert type(rig.pool.central_queue) is type(stage.central_queue) is CentralQueue
    for name in [*Hub.__annotations__, "needs_decision", "receive", "release", "wake", "adopt_cost"]:
        assert hasattr(rig.pool.central_queue.views[0], name), name  # a CentralView is a Hub


def test_both_drivers_dispatch_and_hand_out_through_the_central_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, CentralQueue]] = []
    for name in ("park", "visit", "view_for", "hand_out"):
        real = getattr(CentralQueue, name)

        def spy(self: CentralQueue, *a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls.append((_name, self))
            return _real(self, *a, **kw)

        monkeypatch.setattr(CentralQueue, name, spy)

    stage = Stage(workload(30, seed=2), [ReplicaSpec(f"r{i}", BASE, ServingConfig("request", 2)) for i in range(2)])
    stage.run([make_policy("fifo") for _ in range(2)], central=lambda: make_policy("edf"))
    assert {n for n, q in calls if q is stage.central_queue} == {"park", "visit", "view_for", "hand_out"}

    async def go() -> CentralStagePool:
        rig = Rig(2, "edf", seqs=2)
        for i in range(5):
            await rig.add(f"r{i}")
        await rig.settle()
        assert sorted(rig.sent()) == ["r0", "r1", "r2", "r3"] and rig.pool.parked() == ["r4"]
        return rig.pool

    pool = run(go())
    assert {n for n, q in calls if q is pool.central_queue} == {"park", "visit", "view_for", "hand_out"}


def test_the_plugin_keys_replica_kinds_as_the_simulator_does() -> None:
    """Heterogeneous replicas (two cost models, one serving config): one view per kind, in order of each kind's
    first replica, in both drivers."""
    wide = at_layout(BASE, 2)
    costs = [BASE, wide, BASE]
    serving = ServingConfig("request", 2)
    pool = CentralStagePool(0, [object() for _ in costs], policy="edf", costs=costs,
                            config=RouterConfig(router="central", policy="edf"),
                            settings=PluginConfig(profile=PROFILE), serving=serving,
                            metrics=RouterMetrics(CollectorRegistry()))
    stage = Stage(workload(20, seed=1), [ReplicaSpec(f"r{i}", c, serving) for i, c in enumerate(costs)])
    stage.run([make_policy("fifo") for _ in costs], central=lambda: make_policy("edf"))
    kinds = [pool.central_queue.kind(s) for s in range(3)]
    assert kinds == [stage.central_queue.kind(r) for r in range(3)] == [0, 1, 0]
    assert [v.shipped for v in pool.central_queue.views] == [BASE, wide]
    assert all(isinstance(v, CentralView) for v in pool.central_queue.views)
