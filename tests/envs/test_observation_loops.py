"""The observation's Python loops over a decision's few candidates (per-class extremes, the top-K
order, the whole per-candidate arithmetic) against the numpy formulas they replaced: the same
numbers, NaN and signed zeros included, and the same observation bytes on simulated queues."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlsched.learned import observation as obs
from rlsched.learned.observation import _LATE, TOP_K, C, ObservationEncoder, _most_urgent, _per_class
from rlsched.policies.static import load_static
from rlsched.sim import Simulator, load_scenario

FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1.0, -1.0])


def _per_class_numpy(cls: np.ndarray, slack: np.ndarray, wait: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low, high = np.full(C, np.inf), np.zeros(C)
    with np.errstate(invalid="ignore"):  # a NaN input is part of what is compared
        np.minimum.at(low, cls, slack)
        np.maximum.at(high, cls, wait)
    return low, high


def _most_urgent_numpy(slack_s: np.ndarray) -> np.ndarray:
    if slack_s.size == 1:
        return np.zeros(1, dtype=np.intp)
    urgency = np.where(slack_s >= 0, slack_s, _LATE - slack_s)
    if urgency.size > TOP_K:
        part = np.argpartition(urgency, TOP_K - 1)[:TOP_K]
        part.sort()
        return part[np.argsort(urgency[part], kind="stable")]
    return np.argsort(urgency, kind="stable")


@given(st.lists(st.tuples(st.integers(0, C - 1), FLOATS, FLOATS), min_size=1, max_size=20))
def test_per_class_as_ufunc_at(rows: list[tuple[int, float, float]]) -> None:
    cls = np.array([r[0] for r in rows])
    slack, wait = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    got, want = _per_class(cls.tolist(), slack.tolist(), wait.tolist()), _per_class_numpy(cls, slack, wait)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).tobytes() == w.tobytes(), (g, w)  # bit for bit: the sign of a zero, NaN


@given(st.lists(FLOATS | st.sampled_from([3.0, 3.0, -2.0, np.inf]), min_size=1, max_size=2 * TOP_K))
def test_most_urgent_as_numpy(slack: list[float]) -> None:
    got = _most_urgent(slack)
    assert isinstance(got, list) and got == _most_urgent_numpy(np.array(slack)).tolist()


_ONE_HOT = np.concatenate([np.repeat(np.eye(C), obs.M, axis=0), np.tile(np.eye(obs.M), (C, 1))], axis=1)


class NumpyEncoder(ObservationEncoder):
    """The per-candidate entries as the numpy formulas wrote them (array arithmetic, ``ufunc.at``,
    ``argpartition``, fancy indexing): the oracle of ``ObservationEncoder._queue``."""

    def _queue(self, out, state, recs, n_wait, with_slots=True):  # type: ignore[no-untyped-def]
        now, M = state.now, obs.M
        rows = self.rows = self.table.gather(recs)
        remaining = np.array(rows.remaining_s(recs, state.config.step_mode))  # tested against the records
        slack = self.slack_s = rows.deadline_s - now - remaining
        rel = np.arcsinh(slack / np.maximum(rows.work_s, 1e-9))
        wait = np.log1p((now - rows.arrival_s) * (1.0 / obs.WAIT_SCALE_S))
        counts, work = np.zeros(C * M), np.zeros(C)
        per_key: dict = {}
        mem = 0.0
        for rec, n, w in [*self.policy.queue_summary(state), *((r, 1, r.remaining_s) for r in recs[n_wait:])]:
            c = obs.CLASS_INDEX[rec.request.priority]
            counts[c * M + obs.MODALITY_INDEX[rec.request.modality]] += n
            work[c] += w
            per_key[rec.key] = per_key.get(rec.key, 0) + n
            mem += n * rec.mem_gb
        out[obs._COUNTS:obs._COUNTS + C * M] = np.log1p(counts)
        out[obs._WORK:obs._WORK + C] = np.log1p(work * (1.0 / obs.WORK_SCALE_S))
        out[obs._SLACK:obs._SLACK + C], out[obs._WAIT:obs._WAIT + C] = _per_class_numpy(rows.cls, rel, wait)
        if with_slots:
            key_count = np.fromiter((per_key[r.key] for r in recs), np.float64, len(recs))
            top = _most_urgent_numpy(slack)
            slots = out[obs._SLOTS:obs._SLOTS + top.size * obs._F].reshape(top.size, obs._F)
            slots[:, :C + M] = _ONE_HOT[(rows.cls * M + rows.modality)[top]]
            slots[:, obs._S_WORK] = np.log1p(remaining[top] * (1.0 / obs.WORK_SCALE_S))
            slots[:, obs._S_SLACK] = rel[top]
            slots[:, obs._S_WAIT] = wait[top]
            slots[:, obs._S_SAME] = rows.key_id[top] == rows.key_id[top][0]
            slots[:, obs._S_RUN] = top >= n_wait
            slots[:, obs._S_KEYS] = np.log1p(key_count[top])
            slots[:, obs._S_VALID] = 1.0
        return len(per_key), mem, int(counts.sum())


class _Both:
    """The tuned static policy deciding; at each decision both encoders observe the queue."""

    def __init__(self, scenario: str) -> None:
        self.policy = load_static(f"agents/tuned/{scenario}.json")
        self.ours, self.oracle = ObservationEncoder(self.policy), NumpyEncoder(self.policy)
        self.name, self.seen, self.compared, self.sizes = "both", 0, [0, 0], set[int]()

    def reset(self, state) -> None:  # type: ignore[no-untyped-def]
        self.policy.reset(state)

    def decide(self, state):  # type: ignore[no-untyped-def]
        self.seen += 1
        n = len(self.policy.candidates(state)[0])
        many = n > TOP_K
        if self.compared[many] < 300 and (many or self.seen % 7 == 0):  # spread over the run
            for slots in (True, False):
                got, want = self.ours.encode(state, None, slots), self.oracle.encode(state, None, slots)
                assert got.tobytes() == want.tobytes(), (state.now, np.flatnonzero(got != want))
                assert self.ours.slack_s.tobytes() == self.oracle.slack_s.tobytes()
            self.compared[many] += 1
            self.sizes.add(min(n, TOP_K + 1))
        return self.policy.decide(state)


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("scenario", ["default", "bursty", "omni-mix"])
def test_the_observation_is_the_numpy_formulas_bit_for_bit(scenario: str, mode: str) -> None:
    sc = load_scenario(scenario)
    cost = sc.cost()
    both = _Both(scenario)
    for seed, load in ((0, 1.0), (1, 2.5)):  # a queue that drains and one that grows (many candidates)
        reqs = sc.requests(seed, load, 2400.0 if mode == "request" else 1200.0, cost=cost)
        Simulator(list(reqs), cost, dataclasses.replace(sc.serving, mode=mode)).run(both)
    assert sum(both.compared) >= 40
    assert {1, 2, TOP_K + 1} <= both.sizes  # one candidate, a few, more than the top-K slots
