"""The rlsched router in vLLM-Omni 0.30's distributed mode (``--omni-lb-policy``): ``StagePool.pick``
asks the ``LoadBalancer`` vLLM-Omni attached, which the router pool wraps (``RouterLoadBalancer``).
Real ``StagePool.pick`` and real balancers; a fake hub and fake replica clients."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from prometheus_client import CollectorRegistry  # noqa: E402
from vllm_omni.distributed.omni_coordinator import ReplicaInfo, ReplicaStatus  # noqa: E402
from vllm_omni.distributed.omni_coordinator.load_balancer import RoundRobinBalancer  # noqa: E402
from vllm_omni.distributed.omni_coordinator.messages import ReplicaList  # noqa: E402
from vllm_omni.inputs.data import OmniDiffusionSamplingParams  # noqa: E402

from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.router_pool import RouterLoadBalancer, RouterStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics  # noqa: E402
from rlsched.sim.cost import load_profile  # noqa: E402
from rlsched.sim.layout import at_layout  # noqa: E402
from tests.vllm.fakes import ReplicaClient as Client  # noqa: E402
from tests.vllm.fakes import Scripted  # noqa: E402

PROFILE = "qwen-image-h200-vllm-omni"
BASE = load_profile(PROFILE)


class Hub:
    """The coordinator's cached replica list, as ``OmniCoordClientForHub`` gives it to ``pick``."""

    def __init__(self, addrs: list[str]) -> None:
        self.status = {a: ReplicaStatus.UP for a in addrs}

    def get_replicas_for_stage(self, stage_id: int) -> ReplicaList:
        return ReplicaList(replicas=[ReplicaInfo(a, a + "-out", stage_id, s, 0, 0.0, 0.0)
                                     for a, s in self.status.items()], timestamp=0.0)




def distributed(n: int = 2, router: Any = "rlsched", costs: Any = BASE) -> tuple[RouterStagePool, Hub]:
    addrs = [f"tcp://r{i}" for i in range(n)]
    pool = RouterStagePool(0, [Client(a) for a in addrs], router=router, costs=costs,
                           config=RouterConfig(budget_ms=60_000, deadline_ms=60_000),
                           settings=PluginConfig(profile=PROFILE),
                           clock=lambda: 0.0, metrics=RouterMetrics(CollectorRegistry()))
    hub = Hub(addrs)
    pool.attach_hub(hub)  # what MembershipController does for every pool
    pool.attach_load_balancer(RoundRobinBalancer())
    return pool, hub


def submit(pool: RouterStagePool, rid: str, size: int = 512) -> int:
    sp = OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=20)
    return asyncio.run(pool.submit_initial(rid, SimpleNamespace(sampling_params_list=[sp]), {"prompt": rid}))


def test_the_attached_balancer_is_wrapped_and_the_router_chooses() -> None:
    pool, _ = distributed(2, costs=[BASE, at_layout(BASE, 2)])
    assert isinstance(pool._lb, RouterLoadBalancer) and pool.is_distributed
    assert submit(pool, "big", 1024) == 1  # both idle: the 2-GPU replica finishes it first (round-robin: 0)
    assert pool.clients[1].got == ["big"] and pool.get_bound_replica_id("big") == 1
    assert pool.outstanding() == {0: [], 1: ["big"]} and pool.router_decisions == 1
    pool.release_binding("big")  # every exit: the affinity and the ledger entry go together
    assert pool.outstanding() == {0: [], 1: []} and pool.get_bound_replica_id("big") is None


@pytest.mark.parametrize("bad, reason", [(ValueError("boom"), "exception"), (5, "out_of_range"),
                                         (None, "not_int")])
def test_a_bad_choice_falls_back_to_vllm_omnis_balancer(bad: Any, reason: str) -> None:
    pool, _ = distributed(2, Scripted(bad, bad, bad))
    assert [submit(pool, f"r{i}") for i in range(3)] == [0, 1, 0]  # RoundRobinBalancer's
    assert pool.router_fallbacks == {reason: 3}
    assert sorted(sum(pool.outstanding().values(), [])) == ["r0", "r1", "r2"]  # followed all the same


def test_the_balancers_fallback_never_sends_a_request_to_a_replica_whose_gpu_cannot_hold_it() -> None:
    import dataclasses

    small = dataclasses.replace(BASE, gpu_memory_gb=BASE.weights_gb + 2.0)  # holds no 1536² image
    pool, _ = distributed(2, Scripted(*[ValueError("boom")] * 3), costs=[small, BASE])
    assert [submit(pool, f"r{i}", 1536) for i in range(3)] == [1, 1, 1]  # RoundRobinBalancer's: 0, 1, 0
    assert pool.router_fallbacks == {"exception": 3}


def test_a_replica_the_hub_reports_down_is_not_chosen() -> None:
    pool, hub = distributed(2, Scripted(1, 1))
    hub.status["tcp://r1"] = ReplicaStatus.DOWN  # pick offers only UP replicas
    assert submit(pool, "a") == 0 and pool.router_fallbacks == {"evicted": 1}


def test_a_removed_replica_is_dropped_from_routing() -> None:
    pool, hub = distributed(2, Scripted(1, 0))
    submit(pool, "a")
    pool.remove_client("tcp://r1")  # membership: the replica unregistered
    del hub.status["tcp://r1"]
    assert 1 not in pool.outstanding()
    assert submit(pool, "b") == 0 and not pool.router_fallbacks
