"""The engine's router pool at fleet scale (issue 50), on ``rlsched bench router``'s fake replicas: every request
routed and sent once; the work of a decision (function calls, replicas' membership read) does not grow with
the replica count; the pool follows vLLM-Omni's membership changes (``members.py``) as when it read every
replica at every decision. Counted, never timed: the load is the machine's."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.bench import load  # noqa: E402
from rlsched.bench.router import Fleet  # noqa: E402

COUNTED = 100


def test_the_router_bench_routes_every_request_once() -> None:
    bench = load("router")
    assert bench is not None
    out = bench(argparse.Namespace(replicas="8", calls=60))
    cell = out["8"]
    assert cell["requests"] == cell["routed"] == cell["sent"] == cell["sent_once"] == 60
    assert cell["submit_cpu"]["calls"] == cell["submit_wall"]["calls"] == 60 - 8  # the fleet's filling untimed
    assert cell["states"] >= 8 + 8  # an idle state each, then a batch started on each replica at least
    assert cell["fallbacks_per_1000"] == 0.0 and not cell["view_fallbacks"]


def _counted(n: int) -> dict[str, Any]:
    fleet = Fleet(n, count=COUNTED)
    out = asyncio.run(fleet.run(10 * n))  # ten per replica: every replica busy, queues at their steady depth
    assert out["routed"] == out["sent_once"] == out["sent"] == 10 * n and out["fallbacks"] == {}
    return out


def test_a_decisions_work_does_not_grow_with_the_fleet() -> None:
    """Without the versioned membership the pool read every replica at each decision: 65 reads and 664 calls a
    decision at 64 replicas, 1,025 and 4,468 at 1,024."""
    small, large = _counted(64), _counted(1024)
    assert small["membership_reads"] == large["membership_reads"] == 1.0  # the chosen replica's check alone
    assert large["calls_per_decision"] <= 1.5 * small["calls_per_decision"], (small, large)


def _live(fleet: Fleet) -> list[int]:
    pool = fleet.pool
    return [r for r in pool.live_replica_ids() if pool.is_replica_available(r)]


def test_the_pool_follows_every_membership_change_as_when_it_read_them_all() -> None:
    fleet = Fleet(8, count=1_000)
    pool, n = fleet.pool, [0]

    async def route() -> int:
        n[0] += 1
        return await fleet._submit(f"r{n[0]}", counted=True)

    async def go() -> None:
        for _ in range(3):
            await route()
        assert fleet.reads == 3  # the membership unchanged: read once per decision (the chosen replica)
        changes = [lambda: pool.evict_replica(2), lambda: pool.mark_replica_unavailable(5),
                   lambda: pool.clients.__setitem__(6, None),  # found gone at the next routing
                   lambda: pool._unavailable_replicas.discard(5),
                   lambda: pool.add_client("new", fleet.replicas[2], replica_id=2),
                   lambda: pool.add_client("more", fleet.replicas[6])]  # the first vacant slot: 6
        for change in changes:
            change()
            chosen = {await route() for _ in range(12)}
            assert pool._ledger.slots == _live(fleet)
            assert chosen <= set(_live(fleet))
        assert pool._ledger.slots == list(range(8))

    asyncio.run(go())


def test_a_new_clients_list_is_versioned_too() -> None:
    fleet = Fleet(4)
    pool = fleet.pool
    pool.clients = pool.clients[:2]  # vLLM-Omni's StagePool assigns it; whoever assigns it is followed
    asyncio.run(fleet._submit("r", counted=False))
    assert pool._ledger.slots == [0, 1]
