"""``decode_action`` in Python floats: the same ``ActionParams`` as the numpy formula it replaced."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rlsched.policies.projected import ACTION_DIM, ActionParams, decode_action


def _reference(a: np.ndarray) -> ActionParams:
    """The numpy formula: clip(nan_to_num(a)) into [-1, 1], softmax(2 a[:3]) class weights."""
    a = np.minimum(np.maximum(np.where(a == a, a, 0.0), -1.0), 1.0)
    logits = 2.0 * a[:3]
    w = np.exp(logits - logits.max())
    w /= w.sum()
    v = a.tolist()
    return ActionParams(tuple(w.tolist()), tuple((x + 1.0) / 2.0 for x in v[3:7]), (v[7] + 1) / 2, 2 * (v[8] + 1))


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=ACTION_DIM, max_size=ACTION_DIM))
def test_same_params_as_the_numpy_formula(values: list[float]) -> None:
    a = np.asarray(values, dtype=np.float32)  # as the network emits it
    assert decode_action(a) == _reference(a.astype(np.float64))


def test_random_actions() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        a = rng.uniform(-1.2, 1.2, ACTION_DIM)
        assert decode_action(a) == _reference(a)
