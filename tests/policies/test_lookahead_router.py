"""The look-ahead routers (``POLICY@lookahead``, ``POLICY@hindsight``): specs, candidates, scores."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlsched.errors import ConfigError
from rlsched.evaluation import RunSpec, simulate
from rlsched.policies import make_policy
from rlsched.routing.routers import check_spec, make_router
from rlsched.routing.teachers import LookaheadRouter, outcome_value
from rlsched.sim import Request, ServingConfig, load_profile
from rlsched.sim.stage import ReplicaSpec, Stage
from tests.sim.test_stage import outcome, replicas, workload

STATIC = "static:agents/tuned/default.json"


class Probe(LookaheadRouter):
    """The realizable teacher that, at a few arrivals, also scores every candidate both ways."""

    def reset(self, stage: Stage) -> None:
        super().reset(stage)
        self.checks: list[tuple[list[int], list[float], list[float], int]] = []

    def route(self, request: Request, stage: Stage) -> int:
        choice = self.base.route(request, stage)
        tries = self.candidates(request, stage, choice)
        r = super().route(request, stage)
        if len(tries) > 1 and request.id % 7 == 0:
            whole = [self.stage_value(stage, request, t) for t in tries]
            gains = [self.replica_gain(stage, request, t) for t in tries]
            self.checks.append((tries, whole, gains, r))
        return r


def test_the_realizable_gain_ranks_replicas_as_whole_stage_forks_do() -> None:
    reqs = workload(150, seed=1, rate=1.4)
    probe = Probe(STATIC, horizon_s=240.0)
    Stage(reqs, replicas(3), seed=2).run([make_policy(STATIC) for _ in range(3)], probe)
    assert len(probe.checks) > 5
    moved = 0
    for tries, whole, gains, chosen in probe.checks:
        # the stage's score is the gain plus what the other replicas do anyway, the same for every try
        assert np.allclose(np.subtract(whole, whole[0]), np.subtract(gains, gains[0]))
        assert chosen == tries[int(np.argmax(whole))]  # the best, ties to the base router's choice
        moved += chosen != tries[0]
    assert moved > 0


def test_on_an_idle_pool_the_teacher_is_its_base_router() -> None:
    # one request at a time, each finished before the next arrives: every replica is empty, one kind
    reqs = [Request(i, 400.0 * i, "qwen-image", "image", 1024, 1024, 1, 20, True, "batch", 120.0) for i in range(12)]
    teacher = make_router("lookahead:120", STATIC)
    alone = Stage(reqs, replicas(4)).run([make_policy(STATIC) for _ in range(4)], teacher)
    base = Stage(reqs, replicas(4)).run([make_policy(STATIC) for _ in range(4)], make_router("rlsched"))
    assert outcome(alone.records) == outcome(base.records) and alone.routed == base.routed
    assert teacher.looked == 0 and teacher.forks == 0  # type: ignore[attr-defined]


def test_empty_replicas_are_tried_once_per_kind() -> None:
    cost = load_profile("qwen-image-h200")
    serving = ServingConfig("request", 4)
    other = ServingConfig("request", 2)
    specs = [ReplicaSpec("a0", cost, serving), ReplicaSpec("a1", cost, serving), ReplicaSpec("b0", cost, other),
             ReplicaSpec("b1", cost, other)]
    stage = Stage([], specs)
    teacher = LookaheadRouter(STATIC)
    teacher.reset(stage)
    req = Request(0, 0.0, "qwen-image", "image", 512, 512, 1, 20, True, "batch", 60.0)
    assert teacher.candidates(req, stage, 1) == [1, 2]
    assert teacher.candidates(req, stage, 3) == [3, 0]


def test_hindsight_sees_what_lookahead_does_not_and_both_end_every_request() -> None:
    reqs = workload(100, seed=4, rate=1.0)
    out: dict[str, Any] = {}
    for spec in ("lookahead:40", "hindsight:40", "hindsight:40;top=2"):
        teacher = make_router(spec, STATIC)
        stage = Stage(reqs, replicas(3), seed=1).run([make_policy(STATIC) for _ in range(3)], teacher)
        assert sorted(stage.records) == sorted(q.id for q in reqs)
        assert all(r.status in ("completed", "rejected", "failed_oom") for r in stage.records.values())
        out[spec] = (teacher.looked, teacher.changed, teacher.forks, dict(stage.routed))  # type: ignore[attr-defined]
    assert out["lookahead:40"][0] > 0 and out["lookahead:40"][1] > 0
    assert out["hindsight:40"][3] != out["lookahead:40"][3]  # knowing the next minutes binds otherwise
    assert out["hindsight:40;top=2"][3] != out["hindsight:40"][3]


def test_outcome_value_counts_met_against_missed_and_leaves_open_requests_out() -> None:
    reqs = [Request(i, 0.0, "qwen-image", "image", 1024, 1024, 1, 20, True, cls, slo)
            for i, (cls, slo) in enumerate([("realtime", 1e6), ("batch", 1e-3), ("background", 1e6)])]
    stage = Stage(reqs, replicas(1), horizon_s=1e-2).run([make_policy("fifo")], make_router("round-robin"))
    # at 0.01 s nothing has finished: the batch request's deadline has passed (missed, -2), the other two
    # are still open with later deadlines (neither way)
    assert outcome_value(stage) == -2.0
    assert outcome_value(stage, {0, 2}) == 0.0
    done = Stage(reqs, replicas(1)).run([make_policy("fifo")], make_router("round-robin"))
    assert outcome_value(done, end_s=1e9) == 3.0 + 1.0 - 2.0


@pytest.mark.parametrize("spec, policy, problem", [
    ("lookahead", None, "give it as POLICY@lookahead"), ("lookahead:soon", STATIC, "number of seconds"),
    ("hindsight:-5", STATIC, "horizon must be"), ("hindsight:60;top=1", STATIC, "top must"),
    ("hindsight:60;top=x", STATIC, "top must"), ("lookahead:60;depth=2", STATIC, "only the options"),
    ("lookahead:60", "nonsense", "unknown policy")])
def test_bad_teacher_specs_fail_at_construction(spec: str, policy: str | None, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        make_router(spec, policy)


def test_a_teacher_is_a_router_spec_of_simulate_and_eval() -> None:
    check_spec(f"{STATIC}@lookahead:120")
    _, m = simulate(RunSpec("qwen-image-8gpu", f"{STATIC}@hindsight:60;top=2", 1000, 1.0, 240.0))
    assert m["replicas"] == 8 and 0.0 <= m["weighted_slo_attainment"] <= 1.0 and m["requests_unfinished"] == 0
