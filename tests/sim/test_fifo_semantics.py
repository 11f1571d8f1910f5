"""FIFO behaves exactly as vLLM-Omni 0.30's diffusion scheduler."""

import pytest

from rlsched.policies import make_policy
from tests.conftest import make_request


def _batches(sim):
    out: dict[int, list[int]] = {}
    for rec in sorted(sim.records.values(), key=lambda r: r.request.id):
        out.setdefault(rec.batch_id, []).append(rec.request.id)
    return [out[k] for k in sorted(out)]


def test_head_of_line_blocking_request_mode(make_sim) -> None:
    # A(512) B(1024) C(512) D(512) all waiting: the wave stops at B even though C, D match A.
    reqs = [make_request(0, 0.0), make_request(1, 0.1, size=1024), make_request(2, 0.2), make_request(3, 0.3)]
    sim = make_sim(reqs, max_num_seqs=4)
    sim.advance_to_next_decision()
    sim.apply(make_policy("fifo").decide(sim))  # starts A alone at t=0
    sim.run(make_policy("fifo"))
    assert _batches(sim) == [[0], [1], [2, 3]]


def test_wave_capped_by_max_num_seqs(make_sim) -> None:
    reqs = [make_request(i, 0.0) for i in range(5)]
    assert _batches(make_sim(reqs, max_num_seqs=2).run(make_policy("fifo"))) == [[0, 1], [2, 3], [4]]


def test_no_memory_check(make_sim) -> None:
    reqs = [make_request(i, 0.0, size=2048) for i in range(8)]
    sim = make_sim(reqs, max_num_seqs=8).run(make_policy("fifo"))
    assert _batches(sim) == [list(range(8))]
    assert all(r.status == "failed_oom" for r in sim.records.values())


def test_admission_wait_as_the_engine_does_it(make_sim) -> None:
    # 50 ms max wait -> 10 ms stable window: B (8 ms) restarts it; the wave starts 10 ms after B.
    reqs = [make_request(0, 0.0), make_request(1, 0.008), make_request(2, 0.030)]
    sim = make_sim(reqs, max_num_seqs=4, wait_ms=50).run(make_policy("fifo"))
    assert _batches(sim) == [[0, 1], [2]]  # C arrived after the window closed
    assert sim.records[0].first_scheduled_s == pytest.approx(0.018)
    # arrivals every 8 ms keep the window open until the 50 ms deadline
    reqs = [make_request(i, 0.008 * i) for i in range(3)] + [make_request(3, 0.2)]
    sim = make_sim(reqs, max_num_seqs=8, wait_ms=50).run(make_policy("fifo"))
    assert sim.records[0].first_scheduled_s == pytest.approx(0.026)
    # a full queue (by count, whatever the keys) ends the wait at once
    reqs = [make_request(0, 0.0), make_request(1, 0.0, size=1024)]
    sim = make_sim(reqs, max_num_seqs=2, wait_ms=50).run(make_policy("fifo"))
    assert sim.records[0].first_scheduled_s == 0.0 and _batches(sim) == [[0], [1]]
    no_wait = make_sim([make_request(0, 0.0), make_request(1, 0.030)], max_num_seqs=4).run(make_policy("fifo"))
    assert _batches(no_wait) == [[0], [1]]


def test_step_mode_joins_running_key_only(make_sim) -> None:
    # A runs; B (other shape) arrives, then C (A's shape, other step count): C is blocked behind B.
    reqs = [make_request(0, 0.0, steps=10), make_request(1, 0.5, size=1024, steps=10),
            make_request(2, 0.6, steps=20)]
    sim = make_sim(reqs, mode="step", max_num_seqs=4).run(make_policy("fifo"))
    a, b, c = (sim.records[i] for i in range(3))
    assert b.first_scheduled_s >= a.finish_s   # head of line: B waits for A's batch to drain
    assert c.first_scheduled_s >= b.first_scheduled_s
    assert a.preemptions == b.preemptions == c.preemptions == 0


def test_step_mode_join_between_steps(make_sim) -> None:
    reqs = [make_request(0, 0.0, steps=10), make_request(1, 0.5, steps=30)]
    sim = make_sim(reqs, mode="step", max_num_seqs=4).run(make_policy("fifo"))
    a, b = sim.records[0], sim.records[1]
    assert b.first_scheduled_s < a.finish_s  # joined the running batch at a step boundary


def test_head_of_line_blocking_with_the_queue_already_formed(make_sim) -> None:
    """Caught: FIFO skipping an incompatible head request instead of stopping there (``_head_run``
    in policies/baselines.py ``continue`` instead of ``break``). A(512), B(1024), C(512) wait
    together before the first decision: vLLM-Omni 0.30 starts A alone (B blocks C), then B, then C.
    (In the test above A starts alone because it is alone, so a skipping FIFO passes it.)"""
    reqs = [make_request(0, 0.0), make_request(1, 0.0, size=1024), make_request(2, 0.0)]
    sim = make_sim(reqs, max_num_seqs=4)
    policy = make_policy("fifo")
    policy.reset(sim)
    assert sim.advance_to_next_decision() and set(sim.waiting) == {0, 1, 2}
    assert policy.decide(sim).batch == (0,)
    sim = make_sim(reqs, max_num_seqs=4).run(make_policy("fifo"))
    assert _batches(sim) == [[0], [1], [2]]
    a, b, c = (sim.records[i] for i in range(3))
    assert a.finish_s <= b.first_scheduled_s and b.finish_s <= c.first_scheduled_s


def test_step_mode_head_of_line_blocking_with_the_queue_already_formed(make_sim) -> None:
    """The same in step mode (``Fifo._join`` and the first batch): A and C share a key, B does not;
    C may not join A's running batch past B."""
    reqs = [make_request(0, 0.0, steps=10), make_request(1, 0.0, size=1024, steps=10),
            make_request(2, 0.0, steps=10)]
    sim = make_sim(reqs, mode="step", max_num_seqs=4).run(make_policy("fifo"))
    a, b, c = (sim.records[i] for i in range(3))
    assert a.finish_s <= b.first_scheduled_s and b.finish_s <= c.first_scheduled_s
    assert a.preemptions == b.preemptions == c.preemptions == 0
