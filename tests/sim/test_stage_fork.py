"""Forks of a multi-replica stage: independent of the original, conserving, deterministic, and
exact (a fork run on under the same policy and router continues as the original does). The routers here
read the replicas' true state (``view=replica``): a router on the deployed view also carries what it has
heard but not yet acted on, which a fork's fresh router starts without."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from rlsched.errors import ConfigError, InvalidRequest
from rlsched.policies import make_policy
from rlsched.routing.routers import make_router
from rlsched.sim import Request, ServingConfig, load_profile
from rlsched.sim.request import COMPLETED, FAILED_OOM, REJECTED, RUNNING, WAITING
from rlsched.sim.simulator import Decision
from rlsched.sim.stage import ReplicaSpec, Stage
from tests.sim.test_stage import outcome, replicas, workload

STATIC = "static:agents/tuned/default.json"
TRUE = "rlsched;view=replica"
ENDED = (COMPLETED, FAILED_OOM, REJECTED)


class Forking:
    """Routes like ``base``; at request ``at`` it also calls ``probe(stage, request, choice)`` — which
    may fork the stage — before the request is delivered."""

    name = "forking"

    def __init__(self, base: str, at: int, probe: Callable[[Stage, Request, int], Any]) -> None:
        self.base, self.at, self.probe = make_router(base), at, probe
        self.seen: Any = None

    def reset(self, stage: Stage) -> None:
        self.base.reset(stage)

    def route(self, request: Request, stage: Stage) -> int:
        r = self.base.route(request, stage)
        if request.id == self.at:
            self.seen = self.probe(stage, request, r)
        return r


def run(reqs: list[Request], n: int, policy: str, router: Any, mode: str = "request") -> Stage:
    return Stage(reqs, replicas(n, mode), seed=4).run([make_policy(policy) for _ in range(n)], router)


def continue_fork(policy: str, base: str, future_s: float) -> Callable[[Stage, Request, int], Stage]:
    def probe(stage: Stage, request: Request, r: int) -> Stage:
        fork = stage.fork(future_s)
        fork.bind(request, r)
        return fork.run([make_policy(policy) for _ in fork.replicas], make_router(base))
    return probe


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("policy", ["fifo", "edf", STATIC])
@pytest.mark.parametrize("base", ["rlsched;view=replica", "least-work;view=replica"])
def test_a_fork_run_on_continues_exactly_as_the_original(mode: str, policy: str, base: str) -> None:
    reqs = workload(160, seed=2, rate=1.2)
    at = 100
    # the last arrival, nothing known beyond it: the realizable fork (future_s=0) sees all there is
    last = Forking(base, len(reqs) - 1, continue_fork(policy, base, 0.0))
    original = run(reqs, 3, policy, last, mode)
    fork = last.seen
    assert fork.arrivals_left == 0 and len(fork.records) > 1
    assert outcome(fork.records) == {i: v for i, v in outcome(original.records).items() if i in fork.records}
    # mid-run, shown every arrival to come (hindsight to the end): the fork is the rest of the run
    mid = Forking(base, at, continue_fork(policy, base, math.inf))
    original = run(reqs, 3, policy, mid, mode)
    fork = mid.seen
    assert {q.id for q in reqs if q.id > at} <= set(fork.records)
    assert outcome(fork.records) == {i: v for i, v in outcome(original.records).items() if i in fork.records}


@pytest.mark.parametrize("mode", ["request", "step"])
def test_forking_and_running_a_fork_leave_the_original_untouched(mode: str) -> None:
    reqs = workload(160, seed=3, rate=1.5)
    plain = run(reqs, 3, STATIC, make_router("rlsched;view=replica"), mode)
    forked = run(reqs, 3, STATIC, Forking(TRUE, 90, continue_fork(STATIC, TRUE, 600.0)), mode)
    assert outcome(forked.records) == outcome(plain.records)
    assert forked.routed == plain.routed
    assert [s.batch_sizes for s in forked.replicas] == [s.batch_sizes for s in plain.replicas]


def test_a_fork_holds_the_present_once_each_and_its_arrivals_are_the_next_future_s() -> None:
    reqs = workload(160, seed=5, rate=1.5)
    at, future = 90, 120.0

    def probe(stage: Stage, request: Request, r: int) -> dict[str, Any]:
        live = {rid: i for i, sim in enumerate(stage.replicas) for rid, rec in sim.records.items()
                if rec.status in (WAITING, RUNNING)}
        fork = stage.fork(future)
        held = [rid for sim in fork.replicas for rid in [*sim.waiting, *(x.request.id for x in sim.running)]]
        ahead = [q.id for q in reqs if stage.now < q.arrival_s <= stage.now + future]
        out = {"live": live, "routed": dict(fork.routed), "held": held, "ahead": ahead,
               "arrivals": [q.id for q in fork._arrivals], "now": (fork.now, stage.now)}
        fork.bind(request, r)
        fork.run([make_policy(STATIC) for _ in fork.replicas], make_router("rlsched;view=replica"))
        out["ended"] = sorted(rid for rid, rec in fork.records.items() if rec.status in ENDED)
        out["left"] = sorted(fork.records)
        return out

    router = Forking("rlsched;view=replica", at, probe)
    run(reqs, 3, STATIC, router)
    seen = router.seen
    assert len(seen["live"]) > 3  # a backlog, not an empty stage
    assert seen["routed"] == seen["live"]
    assert sorted(seen["held"]) == sorted(seen["live"])  # each present request once, where it was
    assert seen["arrivals"] == seen["ahead"] and seen["arrivals"] and at not in seen["arrivals"]
    assert seen["now"][0] == seen["now"][1]
    # run to the end: every request of the fork (present, bound, shown) ends exactly once
    assert seen["ended"] == seen["left"] == sorted({*seen["live"], at, *seen["ahead"]})


def test_two_forks_of_one_moment_run_the_same() -> None:
    reqs = workload(160, seed=6, rate=1.5)

    def probe(stage: Stage, request: Request, r: int) -> tuple[dict, dict]:
        runs = []
        for _ in range(2):
            fork = stage.fork(300.0, stage.now + 200.0)
            fork.bind(request, r)
            runs.append(outcome(fork.run([make_policy(STATIC) for _ in fork.replicas], make_router(TRUE)).records))
        return runs[0], runs[1]

    router = Forking("rlsched;view=replica", 80, probe)
    run(reqs, 3, STATIC, router)
    a, b = router.seen
    assert a == b
    assert any(v[0] not in ENDED for v in a.values())  # the horizon cut the fork short


def test_fork_and_bind_refuse_what_they_cannot_do() -> None:
    reqs = workload(40, rate=1.0)
    early = Stage(reqs, replicas(2))
    with pytest.raises(ConfigError, match="future_s"):
        early.fork(-1.0)
    fork = early.fork(math.inf)
    with pytest.raises(InvalidRequest, match="already"):
        fork.bind(reqs[3], 0)  # still among the fork's arrivals


# ------------------------------------------------------------------ late binding
class ForkingCentral:
    """A central policy deciding as ``policy``; at its ``at``-th decision with a batch it also forks the
    stage there (``Stage.fork_deciding``: the same decision, every arrival to come) and runs the fork on."""

    def __init__(self, policy: str, at: int, seen: list[Stage]) -> None:
        self.policy, self.base, self.at, self.seen = policy, make_policy(policy), at, seen
        self.decided, self.stage = 0, None

    def bind_stage(self, stage: Stage) -> None:
        self.stage = stage

    def reset(self, view: Any) -> None:
        self.base.reset(view)

    def decide(self, view: Any) -> Any:
        decision = self.base.decide(view)
        self.decided += bool(decision.batch)
        if decision.batch and self.decided == self.at:
            fork = self.stage.fork_deciding(decision, math.inf, future_s=math.inf)
            held = sorted(rid for sim in [*fork.replicas, fork.central] for rid in sim.records)
            fork.run([make_policy("fifo") for _ in fork.replicas], central=lambda: make_policy(self.policy))
            self.seen.append((fork, held, self.stage.now))
        return decision


def late_kinds(mode: str) -> list[ReplicaSpec]:
    """Three replicas of two kinds (the third an A100): two central views."""
    return [*replicas(2, mode), ReplicaSpec("a100", load_profile("qwen-image-a100-vllm-omni"), ServingConfig(mode, 4))]


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("policy", ["edf", STATIC])
@pytest.mark.parametrize("kinds", [1, 2])
def test_a_late_binding_fork_at_a_central_decision_continues_exactly_as_the_original(
        mode: str, policy: str, kinds: int) -> None:
    reqs = workload(160, seed=7, rate=1.4)
    specs = replicas(3, mode) if kinds == 1 else late_kinds(mode)
    plain = Stage(reqs, specs, seed=4).run([make_policy("fifo") for _ in specs], central=lambda: make_policy(policy))
    seen: list = []
    original = Stage(reqs, specs, seed=4).run([make_policy("fifo") for _ in specs],
                                              central=lambda: ForkingCentral(policy, 20, seen))
    assert outcome(original.records) == outcome(plain.records)  # forking and running a fork left it untouched
    assert original.routed == plain.routed
    fork, held, now = seen[0]
    assert len(held) > 3 and len(set(held)) == len(held) and fork.arrivals_left == 0
    # the fork holds the requests not yet ended (each once: a queue's or the central one) and those to come
    assert set(fork.records) == set(held) | {q.id for q in reqs if q.arrival_s > now}
    assert outcome(fork.records) == {i: v for i, v in outcome(original.records).items() if i in fork.records}
    assert all(v[0] in ENDED for v in outcome(fork.records).values())


def test_a_late_binding_fork_refuses_a_router_and_fork_deciding_needs_a_decision() -> None:
    reqs = workload(40, rate=1.0)
    late = Stage(reqs, replicas(2)).run([make_policy("fifo") for _ in range(2)], central=lambda: make_policy("edf"))
    fork = late.fork()
    with pytest.raises(ConfigError, match="a fork of a late-binding stage runs with a central policy, not routed"):
        fork.run([make_policy("fifo") for _ in range(2)], make_router("round-robin"))
    with pytest.raises(ConfigError, match=r"only inside a central policy's decision \(late binding\)"):
        late.fork_deciding(Decision((1,)))


def test_a_replaying_fork_receives_the_last_seconds_of_arrivals_again_later_under_new_ids() -> None:
    reqs = workload(160, seed=8, rate=1.4)
    seen: list = []

    class Replaying(ForkingCentral):
        def decide(self, view: Any) -> Any:
            decision = self.base.decide(view)
            self.decided += bool(decision.batch)
            if decision.batch and self.decided == self.at:
                fork = self.stage.fork_deciding(decision, self.stage.now + 90.0, replay_s=60.0)
                seen.append((fork._arrivals, self.stage.now))
            return decision

    Stage(reqs, replicas(3), seed=4).run([make_policy("fifo") for _ in range(3)],
                                         central=lambda: Replaying("edf", 30, seen))
    arrivals, now = seen[0]
    past = [q for q in reqs if now - 60.0 < q.arrival_s <= now]
    assert len(past) > 10 and len(arrivals) == len(past)
    assert [(q.arrival_s, q.height, q.priority) for q in arrivals] == [(q.arrival_s + 60.0, q.height, q.priority)
                                                                       for q in past]
    assert min(q.id for q in arrivals) > max(q.id for q in reqs)  # new ids: no clash with any request
