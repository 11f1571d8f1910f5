"""The incremental queue index: equal to a full sort of the queue at every decision."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsched.errors import ConfigError
from rlsched.evaluation import RunSpec, prepare
from rlsched.policies import make_policy
from rlsched.policies.baselines import Drr
from rlsched.sim.queue_index import QueueIndex
from rlsched.sim.request import CLASS_INDEX, RequestRecord
from rlsched.sim.simulator import Decision, Simulator

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _key(rec: RequestRecord) -> tuple:
    return rec.key


def _rank(rec: RequestRecord) -> tuple[float, ...]:
    return (rec.deadline_s, rec.request.arrival_s)


def _same(index: QueueIndex, sim: Simulator) -> None:
    expected: dict[tuple, list[int]] = {}
    for rec in sorted(sim.waiting.values(), key=lambda r: (*_rank(r), r.request.id)):
        expected.setdefault(rec.key, []).append(rec.request.id)
    got = {k: [r.request.id for r in g.recs] for k, g in index.groups.items()}
    assert got == expected
    assert all(abs(g.work_s - sum(r.remaining_s for r in g.recs)) < 1e-6 * max(1.0, g.work_s)
               for g in index.groups.values())


@settings(max_examples=12, **SETTINGS)
@given(seed=st.integers(0, 500), scenario=st.sampled_from(["default", "video-mix"]),
       policy=st.sampled_from(["edf", "sjf", "static", "fifo"]))
def test_journal_replay_equals_the_waiting_queue(seed: int, scenario: str, policy: str) -> None:
    """Arrivals, starts and (step mode) preemptions replayed from the journal keep the index
    equal to a sort of ``waiting``; a rebuild from scratch agrees."""
    sim = prepare(RunSpec(scenario, policy, seed, 1.5, 3600.0))
    pol = make_policy(policy)
    pol.reset(sim)
    index = QueueIndex(_key, _rank)
    decisions = 0
    while sim.advance_to_next_decision() and decisions < 400:
        index.sync(sim)
        _same(index, sim)
        sim.apply(pol.decide(sim))
        decisions += 1
    fresh = QueueIndex(_key, _rank)
    fresh.sync(sim)
    _same(fresh, sim)


def _full_sort_decision(sim: Simulator, rank) -> Decision:  # type: ignore[no-untyped-def]
    """The ordered baselines as they were: sort the whole pool, batch the best key in order."""
    pool = list(sim.waiting.values()) + (list(sim.running) if sim.config.step_mode else [])
    pool.sort(key=lambda r: (*rank(r), r.request.id))
    key = pool[0].key
    return Decision(tuple(r.request.id for r in pool if r.key == key)[:sim.config.max_num_seqs])


@pytest.mark.parametrize("name, rank", [
    ("edf", lambda r: (r.deadline_s, r.request.arrival_s)),
    ("sjf", lambda r: (r.remaining_s, r.request.arrival_s)),
    ("priority", lambda r: (CLASS_INDEX[r.request.priority], r.request.arrival_s)),
])
@pytest.mark.parametrize("scenario", ["default", "video-mix"])
def test_indexed_baselines_decide_as_a_full_sort(name: str, rank, scenario: str) -> None:  # type: ignore[no-untyped-def]
    sim = prepare(RunSpec(scenario, name, 3, 1.5, 7200.0))
    policy = make_policy(name)
    policy.reset(sim)
    while sim.advance_to_next_decision():
        decision = policy.decide(sim)
        assert decision == _full_sort_decision(sim, rank)
        sim.apply(decision)


@pytest.mark.parametrize("quantum", [0.0, -1.0, float("nan"), float("inf")])
def test_drr_refuses_a_quantum_that_never_earns_a_batch(quantum: float) -> None:
    with pytest.raises(ConfigError, match="quantum"):
        Drr(quantum_s=quantum)
