"""Event loop, conservation, memory failures, step mode and determinism."""

import math
from dataclasses import replace

import pytest

from rlsched.errors import ConfigError, InvalidDecision
from rlsched.evaluation import RunSpec, prepare, simulate
from rlsched.policies import make_policy
from rlsched.sim import Decision, Simulator
from rlsched.sim.metrics import summarize
from rlsched.sim.request import COMPLETED, FAILED_OOM
from tests.conftest import make_request
from tests.outcomes import FinishLog, check_outcomes


def _records(sim):
    return [(r.request.id, r.first_scheduled_s, r.finish_s, r.status, r.batch_id) for r in sim.records.values()]


@pytest.mark.parametrize("scenario", ["default", "video-mix", "omni-mix", "trace-azure", "bursty"])
def test_same_seed_same_records(scenario: str) -> None:
    spec = RunSpec(scenario, "fifo", seed=3, duration_s=3600)
    a, _ = simulate(spec)
    b, _ = simulate(spec)
    assert _records(a) == _records(b)
    c, _ = simulate(RunSpec(scenario, "fifo", seed=4, duration_s=3600))
    assert _records(a) != _records(c)


@pytest.mark.parametrize("policy", ["fifo", "sjf", "edf", "priority", "drr"])
@pytest.mark.parametrize("mode", ["request", "step"])
def test_every_request_accounted_once(policy: str, mode: str) -> None:
    sim = prepare(RunSpec("omni-mix", policy, seed=1, duration_s=1800, mode=mode, rate_scale=1.5))
    log = FinishLog(sim)
    m = check_outcomes(sim.run(make_policy(policy)), log)  # one on_finish per request, counts agree
    assert m["requests_total"] == len(sim.records) == len(log.calls) > 50
    assert m["requests_unfinished"] == 0  # drained
    for rec in sim.records.values():
        assert rec.status in (COMPLETED, FAILED_OOM)
        assert rec.first_scheduled_s >= rec.request.arrival_s
        assert rec.finish_s >= rec.first_scheduled_s


def test_wave_runs_all_steps_and_batches(make_sim, qwen_cost) -> None:
    reqs = [make_request(i, 0.0) for i in range(3)]
    sim = make_sim(reqs).run(make_policy("fifo"))
    recs = [qwen_cost.record(r) for r in reqs]
    wave = 50 * qwen_cost.batch_step_time(recs) + sum(r.encode_s + r.decode_s for r in recs)
    assert [r.finish_s for r in sim.records.values()] == pytest.approx([wave] * 3)
    assert {r.batch_id for r in sim.records.values()} == {1}


def test_batch_over_memory_fails_with_oom(make_sim) -> None:
    reqs = [make_request(i, 0.0, size=2048) for i in range(8)]  # 8 x ~18.5 GB activations > 75 GB free
    sim = make_sim(reqs, max_num_seqs=8).run(make_policy("fifo"))
    m = summarize(sim)
    assert m["requests_failed"] == 8 and m["failures"]["oom_batches"] == 1
    assert m["slo_attainment"] == 0.0


def test_invalid_decisions_raise(make_sim) -> None:
    sim = make_sim([make_request(0, 0.0), make_request(1, 0.0, size=1024), make_request(2, 0.0)], max_num_seqs=2)
    assert sim.advance_to_next_decision()
    with pytest.raises(InvalidDecision, match="mixes"):
        sim.apply(Decision((0, 1)))
    with pytest.raises(InvalidDecision, match="max_num_seqs"):
        sim.apply(Decision((0, 2, 1)))
    with pytest.raises(InvalidDecision, match="neither"):
        sim.apply(Decision((7,)))
    sim.apply(Decision((0, 2)))  # state untouched by the refused decisions
    assert set(sim.waiting) == {1}


def test_step_mode_preemption_keeps_progress(make_sim) -> None:
    long = make_request(0, 0.0, size=1024, steps=50)
    short = make_request(1, 1.0, size=512, steps=10)
    sim = make_sim([long, short], mode="step", max_num_seqs=1).run(make_policy("sjf"))
    a, b = sim.records[0], sim.records[1]
    assert a.preemptions == 1 and a.status == COMPLETED and a.steps_done == 50
    assert b.finish_s < a.finish_s
    # the long request lost no steps: total busy time = both alone + nothing redone
    assert sim.busy_s == pytest.approx(a.work_s + b.work_s, rel=1e-9)


def test_wait_until_wakes_the_policy(make_sim) -> None:
    sim = make_sim([make_request(0, 0.0)])
    assert sim.advance_to_next_decision() and sim.now == 0.0
    sim.apply(Decision((), wait_until=2.5))
    assert sim.advance_to_next_decision() and sim.now == 2.5


def test_policy_that_never_serves_leaves_requests_unfinished(make_sim) -> None:
    class Idle:
        def reset(self, state): ...
        def decide(self, state):
            return Decision()
    sim = make_sim([make_request(i, float(i)) for i in range(3)]).run(Idle())
    m = summarize(sim)
    assert m["requests_unfinished"] == 3 and m["requests_completed"] == 0


def test_horizon_cuts_the_run() -> None:
    sim = prepare(RunSpec("default", "fifo", seed=0))
    sim.horizon_s = 600.0
    log = FinishLog(sim)
    sim.run(make_policy("fifo"))
    m = check_outcomes(sim, log)  # left-over records waiting/running, never reported finished
    assert m["requests_unfinished"] > 0 and sim.now <= 600.0
    assert m["requests_unfinished"] == m["requests_total"] - len(log.calls)
    assert not math.isnan(m["slo_attainment"])


def test_drr_with_nothing_waiting_waits(make_sim) -> None:
    sim = make_sim([make_request(0, 0.0)])
    policy = make_policy("drr")
    policy.reset(sim)
    sim.waiting.clear()  # e.g. a plugin call after the queue drained
    assert policy.decide(sim) == Decision()


def test_duplicate_ids_are_refused_up_front(make_sim) -> None:
    from rlsched.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="'id'"):
        make_sim([make_request(3, 0.0), make_request(3, 1.0)])


def test_engine_overhead_lengthens_each_wave_by_its_fixed_and_per_megapixel_parts() -> None:
    base = prepare(RunSpec("default", "fifo", 0, 1.0, 600.0))
    slow = Simulator(list(base._arrivals), base.cost,
                     replace(base.config, engine_overhead_ms=2.0, engine_overhead_ms_per_mpx=5.7))
    for sim in (base, slow):
        sim.advance_to_next_decision()
        sim.apply(Decision(tuple(sim.waiting)[:1]))
    (rec,) = slow.running
    mpx = rec.request.height * rec.request.width / 1e6
    assert slow.gpu_end_s - base.gpu_end_s == pytest.approx((2.0 + 5.7 * mpx) / 1e3)
    with pytest.raises(ConfigError, match="engine_overhead_ms"):
        replace(base.config, engine_overhead_ms=-1.0)
