"""A multi-replica stage: routing, conservation, determinism, and one replica == the simulator."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from rlsched.errors import ConfigError, InvalidDecision
from rlsched.policies import make_policy
from rlsched.routing.routers import ROUTERS, make_router, split_pair
from rlsched.sim import Request, ServingConfig, Simulator, load_profile
from rlsched.sim.metrics import summarize, summarize_stage
from rlsched.sim.stage import ReplicaSpec, Stage

COST = load_profile("qwen-image-h200")


def workload(n: int = 120, seed: int = 0, rate: float = 0.4) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    sizes = rng.choice([512, 768, 1024, 1328], n)
    classes = rng.choice(["realtime", "batch", "background"], n)
    return [Request(i, float(t[i]), "qwen-image", "image", int(s), int(s), 1, 20, True, str(c), 60.0)
            for i, (s, c) in enumerate(zip(sizes, classes))]


def replicas(n: int, mode: str = "request") -> list[ReplicaSpec]:
    return [ReplicaSpec(f"r{i}", COST, ServingConfig(mode, 4)) for i in range(n)]


def outcome(recs) -> dict:
    return {i: (r.status, r.first_scheduled_s, r.finish_s, r.steps_done, r.preemptions) for i, r in recs.items()}


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("policy", ["fifo", "edf", "static:agents/tuned/default.json", "rl"])
def test_one_replica_is_the_simulator(mode: str, policy: str) -> None:
    reqs = workload()
    alone = Simulator(reqs, COST, ServingConfig(mode, 4)).run(make_policy(policy))
    stage = Stage(reqs, replicas(1, mode)).run([make_policy(policy)], make_router("round-robin"))
    assert outcome(stage.records) == outcome(alone.records)
    pooled, single = summarize_stage(stage), summarize(alone)
    assert pooled["weighted_slo_attainment"] == single["weighted_slo_attainment"]


@pytest.mark.parametrize("router", sorted(ROUTERS))
@pytest.mark.parametrize("mode", ["request", "step"])
def test_every_request_ends_exactly_once_in_the_replica_it_was_routed_to(router: str, mode: str) -> None:
    reqs = workload(200, rate=1.5)
    stage = Stage(reqs, replicas(4, mode), seed=3)
    finished: Counter[int] = Counter()
    where: dict[int, int] = {}
    for r, sim in enumerate(stage.replicas):
        sim.on_finish.append(lambda rec, r=r: (finished.update([rec.request.id]), where.setdefault(rec.request.id, r)))
    stage.run([make_policy("edf") for _ in range(4)], make_router(router))
    assert set(finished) == {q.id for q in reqs} and set(finished.values()) == {1}
    assert where == stage.routed
    out = summarize_stage(stage)
    assert sum(r["requests"] for r in out["per_replica"]) == len(reqs) == out["requests_completed"]


def test_round_robin_deals_in_turn_and_runs_are_deterministic() -> None:
    reqs = workload(40)
    a = Stage(reqs, replicas(3)).run([make_policy("fifo") for _ in range(3)], make_router("round-robin"))
    assert [a.routed[i] for i in range(40)] == [i % 3 for i in range(40)]
    for name in ("random", "least-queue", "rlsched"):
        runs = [Stage(reqs, replicas(3), seed=5).run([make_policy("fifo") for _ in range(3)], make_router(name))
                for _ in range(2)]
        assert runs[0].routed == runs[1].routed and outcome(runs[0].records) == outcome(runs[1].records)


def test_work_aware_routers_avoid_the_busy_replica() -> None:
    """Replica 0 holds 30 minutes of video-sized work; an image then goes to the idle replica."""
    big = [Request(i, 0.0, "qwen-image", "image", 2048, 2048, 1, 50, True, "background", 1e5) for i in range(3)]
    small = Request(9, 1.0, "qwen-image", "image", 512, 512, 1, 20, True, "realtime", 20.0)
    for name in ("least-work", "rlsched", "least-queue"):  # on the replicas' state: _First binds past the router
        stage = Stage([*big, small], replicas(2))
        stage.run([make_policy("fifo") for _ in range(2)], _First(make_router(f"{name};view=replica")))
        assert stage.routed[9] == 1, name


class _First:
    """Routes the first three requests to replica 0, then asks ``inner``."""

    name = "first"

    def __init__(self, inner) -> None:
        self.inner = inner

    def reset(self, stage) -> None:
        self.inner.reset(stage)

    def route(self, request, stage) -> int:
        return 0 if request.id < 3 else self.inner.route(request, stage)


def test_late_binding_serves_every_request_once() -> None:
    reqs = workload(150, rate=1.2)
    stage = Stage(reqs, replicas(3)).run([make_policy("fifo") for _ in range(3)],
                                         central=lambda: make_policy("static:agents/tuned/default.json"))
    recs = stage.records
    assert set(recs) == {q.id for q in reqs} and all(r.status == "completed" for r in recs.values())
    assert set(stage.routed) == set(recs) and set(stage.routed.values()) == {0, 1, 2}
    assert len(stage.hubs) == 1  # one kind of replica: one view of the central queue


class Recording:
    """A central policy that records which view decides (FIFO batches of one)."""

    def __init__(self, log: list) -> None:
        self.log, self.inner = log, make_policy("fifo")

    def reset(self, view) -> None:
        self.inner.reset(view)

    def decide(self, view):
        self.log.append(view.cost.name)
        return self.inner.decide(view)


def test_heterogeneous_late_binding_decides_in_the_freed_replicas_costs() -> None:
    """Two kinds of replica (one GPU; two GPUs at SP2): two views of one central queue, each
    decided by its own policy in its own costs; every request ends once; none runs twice."""
    from rlsched.sim.layout import at_layout

    wide = at_layout(load_profile("qwen-image-h200-vllm-omni"), 2)
    mixed = [*replicas(2), ReplicaSpec("wide", wide, ServingConfig("request", 4))]
    reqs = workload(200, rate=1.5)
    log: list[str] = []
    finished: Counter[int] = Counter()
    stage = Stage(reqs, mixed)
    for sim in stage.replicas:
        sim.on_finish.append(lambda rec: finished.update([rec.request.id]))
    stage.run([make_policy("fifo") for _ in mixed], central=lambda: Recording(log))
    assert [h.cost.name for h in stage.hubs] == [COST.name, wide.name]
    assert set(log) == {COST.name, wide.name}
    assert set(finished) == {q.id for q in reqs} and set(finished.values()) == {1}
    assert set(stage.routed.values()) == {0, 1, 2}
    wide_served = [i for i, r in stage.routed.items() if r == 2]
    rec = stage.records[wide_served[0]]
    assert rec.work_s == pytest.approx(wide.record(rec.request).work_s)  # run in the wide replica's costs
    assert all(not h.waiting for h in stage.hubs)


def test_a_router_choosing_no_replica_is_an_invalid_decision() -> None:
    class Bad:
        name = "bad"

        def reset(self, stage) -> None:
            pass

        def route(self, request, stage) -> int:
            return 7

    with pytest.raises(InvalidDecision, match="replica 7 of 2"):
        Stage(workload(5), replicas(2)).run([make_policy("fifo")] * 2, Bad())


def test_router_specs() -> None:
    assert split_pair("static:agents/tuned/default.json@rlsched") == ("static:agents/tuned/default.json", "rlsched")
    assert split_pair("fifo") == ("fifo", "round-robin")
    for bad, match in (("nosuch", "unknown router"), ("round-robin:3", "takes no argument"), ("random:x", "seed")):
        with pytest.raises(ConfigError, match=match):
            make_router(bad)
    with pytest.raises(ConfigError, match="POLICY@ROUTER"):
        split_pair("fifo@")
