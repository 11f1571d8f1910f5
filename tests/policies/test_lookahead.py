"""Simulator forks, candidate batches and the look-ahead teacher."""

from __future__ import annotations

import math

from rlsched.evaluation import RunSpec, prepare
from rlsched.policies import make_policy
from rlsched.policies.candidates import candidate_batches
from rlsched.sim.metrics import summarize
from rlsched.sim.request import COMPLETED, WAITING


def _mid_run(load: float = 1.5, decisions: int = 60):  # type: ignore[no-untyped-def]
    sim = prepare(RunSpec("default", "static", 7, load, 3600.0))
    policy = make_policy("static:agents/tuned/default.json")
    policy.reset(sim)
    for _ in range(decisions):
        assert sim.advance_to_next_decision()
        sim.apply(policy.decide(sim))
    return sim, policy


def test_a_fork_continues_exactly_like_the_original_and_leaves_it_untouched() -> None:
    sim, policy = _mid_run()
    before = {rid: (r.status, r.steps_done, r.finish_s) for rid, r in sim.records.items()}
    fork = sim.fork(future_s=math.inf)
    fork.run(make_policy("static:agents/tuned/default.json"))
    assert {rid: (r.status, r.steps_done, r.finish_s) for rid, r in sim.records.items()} == before
    sim.run(make_policy("static:agents/tuned/default.json"))
    assert all(r.status == COMPLETED for r in fork.records.values())
    assert {rid: r.finish_s for rid, r in fork.records.items()} == \
        {rid: r.finish_s for rid, r in sim.records.items() if rid in fork.records}


def test_a_realizable_fork_holds_only_the_present() -> None:
    sim, _ = _mid_run()
    fork = sim.fork()
    assert set(fork.records) == {rid for rid, r in sim.records.items() if r.status in (WAITING, "running")}
    assert fork.arrivals_left == 0 and fork.now == sim.now and fork.gpu_end_s == sim.gpu_end_s


def test_candidate_batches_are_feasible_distinct_and_start_with_the_proposal() -> None:
    sim, policy = _mid_run(load=2.0, decisions=120)
    seen = 0
    while sim.advance_to_next_decision() and seen < 40:
        decision = policy.decide(sim)
        if decision.batch:
            batches = candidate_batches(policy, sim, decision.batch)
            assert batches[0] == tuple(sorted(decision.batch)) and len(set(batches)) == len(batches)
            for batch in batches:
                recs = [sim.waiting[i] for i in batch]
                assert len({r.key for r in recs}) == 1 and len(batch) <= sim.config.max_num_seqs
                assert sum(r.mem_gb for r in recs) <= policy.resources(sim).memory_gb
            seen += len(batches) > 1
        sim.apply(decision)
    assert seen > 0


def test_lookahead_runs_every_request_to_one_outcome() -> None:
    sim = prepare(RunSpec("default", "lookahead", 3, 1.25, 1800.0))
    teacher = make_policy("lookahead:agents/tuned/default.json")
    metrics = summarize(sim.run(teacher))
    assert metrics["requests_unfinished"] == 0 and teacher.looked > 0
