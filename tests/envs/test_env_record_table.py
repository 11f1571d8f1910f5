"""The per-request cache behind the encoder and ``ProjectedPolicy``, and its single-candidate path."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from rlsched.policies.projected import ACTION_DIM, ProjectedPolicy
from rlsched.policies.table import RecordTable
from rlsched.projection import project
from rlsched.sim import Request, RequestRecord, ServingConfig, load_profile
from rlsched.sim.request import CLASS_INDEX
from rlsched.sim.view import Journal

COST = load_profile("qwen-image-h200")


def rec(rid: int, t: float = 0.0, size: int = 512, priority: str = "batch") -> RequestRecord:
    q = Request(rid, t, "qwen-image", "image", size, size, 1, 50, True, priority, 60.0)
    r = COST.record(q)
    r.deadline_s, r.key = t + q.slo_s, q.key(True)
    return r


def test_rows_match_the_records_bit_for_bit() -> None:
    recs = [rec(i, float(i), size=512 * (1 + i % 2), priority="realtime" if i % 3 else "batch") for i in range(6)]
    for i, r in enumerate(recs):
        r.steps_done = i * 7
    rows = RecordTable().gather(recs)
    assert rows.request_id.tolist() == list(range(6))
    assert rows.cls.tolist() == [CLASS_INDEX[r.request.priority] for r in recs]
    assert rows.deadline_s.tolist() == [r.deadline_s for r in recs]
    assert rows.remaining_s(recs, step_mode=True) == [r.remaining_s for r in recs]
    assert rows.key_id.tolist() == [0, 1, 0, 1, 0, 1]


def test_rows_follow_record_identity_and_survive_overflow() -> None:
    table = RecordTable(capacity=4)
    first = [rec(i) for i in range(3)]
    table.gather(first)
    again = [rec(i, t=100.0) for i in range(3)]  # same ids, another run: must not reuse rows
    rows = table.gather(again + first[:1])
    assert rows.arrival_s.tolist() == [100.0, 100.0, 100.0, 0.0]
    assert table.gather(first).arrival_s.tolist() == [0.0, 0.0, 0.0]


def test_single_candidate_shortcut_agrees_with_the_projection() -> None:
    rng = np.random.default_rng(0)
    policy = ProjectedPolicy()
    for trial in range(200):
        one = rec(trial, t=10.0, size=int(rng.choice([512, 1024, 2048])))
        st = SimpleNamespace(now=10.0 + rng.uniform(0, 0.06), waiting={one.request.id: one}, running=[],
                             config=ServingConfig(mode="request", max_num_seqs=4), cost=COST, step_mode=False,
                             journal=Journal(), can_reject=True)
        policy.set_action(rng.uniform(-1, 1, ACTION_DIM))
        decision = policy.decide(st)
        items = policy.items(st, [one])
        chosen = project(items, policy.resources(st))
        wait_s = policy.params.wait_frac * policy.config.batch_timeout_ms / 1e3
        may_wait = chosen.size == 1 and int(items.cap[0]) > 1 and st.now < 10.0 + wait_s
        if may_wait:
            assert decision.batch == () and math.isclose(decision.wait_until, 10.0 + wait_s)
        else:
            assert decision.batch == (trial,)


def test_rows_follow_a_recosted_record() -> None:
    """A calibration version re-costs ``work_s`` and ``mem_gb`` in place (``rlsched.sim.online``): the rows of
    the next gather carry the new figures, whether the same list is asked again or another list."""
    from rlsched.sim.online import refresh
    from rlsched.sim.truth import rescaled

    recs = [rec(i, float(i), size=512 * (1 + i % 2)) for i in range(4)]
    table = RecordTable()
    before = table.gather(recs)
    refresh(recs, rescaled(COST, {"qwen-image": (1.3, 1.0, 1.5)}, "calibrated"))
    assert [r.mem_gb for r in recs] != before.mem_gb.tolist()
    for asked in (recs, recs[:3], recs):
        rows = table.gather(asked)
        assert rows.mem_gb.tolist() == [r.mem_gb for r in asked]
        assert rows.work_s.tolist() == [r.work_s for r in asked]
