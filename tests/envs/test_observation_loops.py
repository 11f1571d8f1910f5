"""The observation's Python loops over a decision's few candidates (per-class extremes, the top-K
order) against the numpy formulas they replaced: the same numbers, NaN and signed zeros included."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rlsched.learned.observation import _LATE, TOP_K, C, _most_urgent, _per_class

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
    got, want = _per_class(cls, slack, wait), _per_class_numpy(cls, slack, wait)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).tobytes() == w.tobytes(), (g, w)  # bit for bit: the sign of a zero, NaN


@given(st.lists(FLOATS | st.sampled_from([3.0, 3.0, -2.0, np.inf]), min_size=1, max_size=2 * TOP_K))
def test_most_urgent_as_numpy(slack: list[float]) -> None:
    s = np.array(slack)
    got = _most_urgent(s)
    assert got.dtype == np.intp and got.tolist() == _most_urgent_numpy(s).tolist()
