"""``_first_seen_order``: the projection's key ids renumbered by first appearance, exactly as before."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rlsched.policies.projected import _first_seen_order


def _reference(key_id: np.ndarray) -> np.ndarray:
    """The numpy formula it replaced (``np.minimum.at`` over first positions)."""
    n = key_id.size
    if n < 2:
        return np.zeros_like(key_id)
    first = np.full(int(key_id.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first, key_id, np.arange(n))
    rank = np.empty_like(first)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[key_id]


@given(st.lists(st.integers(0, 40), max_size=60))
def test_same_ids_as_the_numpy_formula(ids: list[int]) -> None:
    key_id = np.asarray(ids, dtype=np.int64)
    got, want = _first_seen_order(key_id), _reference(key_id)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_first_appearance_order() -> None:
    assert _first_seen_order(np.array([7, 3, 7, 9, 3])).tolist() == [0, 1, 0, 2, 1]
