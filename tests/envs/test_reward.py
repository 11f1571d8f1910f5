"""``SloReward``: +v_c for a request that meets its SLO, −λ·v_c once for one that misses it,
including the branch where a request is first known to be late when it finishes late."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlsched.envs import ENV_ID
from rlsched.envs.reward import SloReward
from rlsched.policies import make_policy
from rlsched.policies.projected import ACTION_DIM
from rlsched.sim.metrics import CLASS_WEIGHTS, summarize
from rlsched.sim.request import CLASS_INDEX, COMPLETED
from tests.conftest import make_request


@pytest.mark.parametrize("late_penalty", [0.5, 1.0])
def test_a_request_finishing_after_its_deadline_is_penalised(make_sim, qwen_cost, late_penalty: float) -> None:
    """Caught: the sign of the late-finish branch flipped (envs/reward.py ``on_finish``:
    ``_pending += late_penalty * value`` rewards a miss). Four requests run one at a time with
    an SLO of 1.5 standalone runs: the first meets it, the other three finish late, and no
    ``check_late`` ever saw them late, so every miss goes through that branch."""
    reqs = [make_request(i, 0.0, priority=p, steps=10) for i, p in enumerate(["realtime", "batch", "realtime",
                                                                             "background"])]
    work = qwen_cost.record(reqs[0]).work_s
    reqs = [make_request(r.id, 0.0, priority=r.priority, steps=10, slo=1.5 * work) for r in reqs]
    sim = make_sim(reqs, max_num_seqs=1)
    reward = SloReward(reqs, late_penalty)
    sim.on_finish.append(lambda rec: reward.on_finish(rec, CLASS_INDEX[rec.request.priority]))
    per_finish = []
    sim.on_finish.append(lambda rec: per_finish.append((rec.request.id, rec.slo_met, reward.take())))
    sim.run(make_policy("fifo"))
    assert all(r.status == COMPLETED for r in sim.records.values())
    # independent of SloReward: v_c = w_c / (N_c · Σ w over the classes present)
    counts = {c: sum(r.priority == c for r in reqs) for c in CLASS_WEIGHTS}
    total_w = sum(CLASS_WEIGHTS[c] for c, n in counts.items() if n)
    value = {r.id: CLASS_WEIGHTS[r.priority] / counts[r.priority] / total_w for r in reqs}
    assert [(rid, met) for rid, met, _ in per_finish] == [(0, True), (1, False), (2, False), (3, False)]
    for rid, met, got in per_finish:
        assert got == pytest.approx(value[rid] if met else -late_penalty * value[rid], abs=1e-15)
    assert sum(got for *_, got in per_finish) == pytest.approx(value[0] - late_penalty * (1 - value[0]), abs=1e-12)


def test_a_miss_is_penalised_once_whether_seen_late_before_or_only_at_its_finish() -> None:
    """The same bug at the level of ``SloReward`` alone: a request flagged by ``check_late_one``
    then finishing late costs −λ·v once; one first seen late at its finish costs −λ·v too."""
    reqs = [make_request(0, 0.0, priority="batch"), make_request(1, 0.0, priority="batch")]
    reward = SloReward(reqs, 0.5)
    v = reward.value[CLASS_INDEX["batch"]]
    assert v == pytest.approx(0.5)

    class Late:  # a finished record that missed its SLO
        def __init__(self, rid: int) -> None:
            self.request = reqs[rid]
            self.slo_met = False
            self.deadline_s, self.remaining_s = 10.0, 5.0

    reward.check_late_one(Late(0), CLASS_INDEX["batch"], now=6.0)  # slack 10 − 6 − 5 < 0: flagged
    assert reward.take() == pytest.approx(-0.5 * v)
    reward.on_finish(Late(0), CLASS_INDEX["batch"])  # already paid for
    assert reward.take() == 0.0
    reward.on_finish(Late(1), CLASS_INDEX["batch"])  # first known late at its finish
    assert reward.take() == pytest.approx(-0.5 * v)


def test_a_request_mode_episode_returns_attainment_minus_lambda_times_the_misses() -> None:
    """Caught: the same flipped branch inside ``DiTBatch-v0``. In request mode a request seen late
    never meets its SLO afterwards and every request of an episode finishes, so the return is
    exactly W − λ·(1 − W) with W the class-weighted attainment (the values v_c sum to 1). These
    episodes (large batches, overload) hold requests that start on time and finish late in a big
    wave, i.e. reach the late-finish branch; the test checks that they do."""
    lam, reached = 0.5, 0
    for scenario, seed in (("default", 0), ("omni-mix", 0), ("omni-mix", 1)):
        env = gym.make(ENV_ID, scenario=scenario, mode="request", late_penalty=lam, window_s=900.0, rate_scale=1.5)
        u = env.unwrapped
        env.reset(seed=seed)
        reward, finish = u.reward, u.reward.on_finish

        def spy(rec, cls, reward=reward, finish=finish):  # type: ignore[no-untyped-def]
            nonlocal reached
            reached += not rec.slo_met and not reward._late[rec.request.id]  # missed, never seen late
            finish(rec, cls)

        reward.on_finish = spy
        total, done = 0.0, False
        while not done:
            _, r, terminated, truncated, _ = env.step(np.ones(ACTION_DIM, dtype=np.float32))
            total, done = total + r, terminated or truncated
        assert terminated and summarize(u.sim)["requests_unfinished"] == 0
        w = summarize(u.sim)["weighted_slo_attainment"]
        assert total == pytest.approx(w - lam * (1 - w), abs=1e-12), (scenario, seed)
    assert reached > 0  # the episodes above went through the late-finish branch
