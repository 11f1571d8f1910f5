"""``project_few`` (plain Python, a decision's few candidates) against the numpy path: the same
batch in the same order, on random instances that reach every branch (starvation pins, the lost
tiers, ride-alongs, rounding at the budget, NaN utilities), and the numpy path where it declines."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from rlsched.projection import Items, Resources, project
from rlsched.projection.few import FEW, _segment_sum, np_maximum, np_minimum, np_sum, project_few
from rlsched.projection.instances import random_instance
from rlsched.projection.knapsack import project_arrays


def _instance(seed: int) -> tuple[Items, Resources]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, FEW + 1))
    items, res = random_instance(rng, n, n_keys=int(rng.integers(1, 6)), uniform=bool(rng.random() < 0.8),
                                 compute_budget=bool(rng.random() < 0.4),
                                 starving_share=float(rng.choice([0.0, 0.05, 0.3, 1.0])),
                                 integral=bool(rng.random() < 0.3))
    utility = items.utility.copy()
    if n and rng.random() < 0.3:  # ties, zeros, negatives and NaNs (each reads as 0)
        utility[rng.random(n) < 0.3] = rng.choice([0.0, -1.0, np.nan, 1.0])
    lost = rng.random(n) < float(rng.choice([0.0, 0.3, 0.7, 1.0]))
    memory = res.memory_gb * float(rng.choice([0.05, 0.5, 1.0, 3.0]))
    if n and rng.random() < 0.3:  # a budget equal to a prefix sum: the comparisons at the boundary
        same = np.flatnonzero(items.key_id == items.key_id[0])
        memory = float(items.mem_gb[same[:int(rng.integers(1, same.size + 1))]].sum())
    lost_threshold = float(rng.choice([math.inf, 30.0, 5.0]))
    return (Items(utility, items.mem_gb, items.tokens_m, items.key_id, items.cap, items.wait_s,
                  lost if rng.random() < 0.9 else None),
            Resources(memory, res.compute_budget_mtok, res.starvation_threshold_s, lost_threshold))


def test_project_few_matches_the_numpy_path() -> None:
    served, paths = 0, Counter[str]()
    for seed in range(4000):
        items, res = _instance(seed)
        expected = project_arrays(items, res).tolist()
        few = project_few(items, res)
        assert project(items, res).tolist() == expected, seed
        if few is None:
            continue
        assert few == expected, seed
        served += 1
        if expected:
            lost = items.lost if items.lost is not None else np.zeros(len(items), bool)
            paths["starving"] += bool((items.wait_s[expected] > res.starvation_threshold_s).any())
            paths["lost and savable"] += bool(lost[expected].any() and not lost[expected].all())
            paths["lost only"] += bool(lost[expected].all())
            paths["several"] += len(expected) > 1
        else:
            paths["nothing fits"] += 1
    assert served > 3000, served  # most instances are served here, not declined
    assert min(paths.values()) >= 50 and len(paths) == 5, paths


def test_project_few_declines_what_it_does_not_follow() -> None:
    mixed = Items(np.array([3.0, 2.0, 1.0]), np.array([4.0, 5.0, 6.0]), np.zeros(3), np.zeros(3, int),
                  np.full(3, 4), np.zeros(3))
    assert project_few(mixed, Resources(10.0)) is None  # one key, sizes differ: the local search's
    assert project(mixed, Resources(10.0)).tolist() == project_arrays(mixed, Resources(10.0)).tolist()
    nan = Items(np.ones(2), np.array([1.0, np.nan]), np.zeros(2), np.zeros(2, int), np.full(2, 4), np.zeros(2))
    assert project_few(nan, Resources(10.0)) is None


@pytest.mark.parametrize("starving", [0, 5])
def test_trim_when_numpy_sums_over_the_budget(starving: int) -> None:
    """13 requests of 8.17695… GB: their running sum meets the budget, numpy's pairwise sum is
    one ulp over it, so the projection drops its least valuable unforced member (``_trim``)."""
    x, n = 8.176950185803168, 13
    budget = 0.0
    for _ in range(n):
        budget += x
    assert float(np.full(n, x).sum()) > budget
    rng = np.random.default_rng(starving)
    wait = np.where(np.arange(n) < starving, 40.0, 1.0)
    items = Items(rng.permutation(n) + 1.0, np.full(n, x), np.zeros(n), np.zeros(n, int), np.full(n, 16), wait)
    res = Resources(budget, starvation_threshold_s=30.0)
    few = project_few(items, res)
    assert few == project_arrays(items, res).tolist() and len(few) == n - 1
    assert int(np.argmin(np.where(wait > 30.0, np.inf, items.utility))) not in few


def test_segment_sum_is_reduceat() -> None:
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(1, 40))
        a = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
        assert _segment_sum(a.tolist()) == float(np.add.reduceat(a, [0])[0])


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 15, 16, 17, 127, 128, 129, 300, 1000])
def testnp_sum_adds_in_numpy_order(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(50):
        a = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
        assert np_sum(a.tolist()) == float(np.add.reduce(a))


def test_np_maximum_and_minimum_follow_numpy() -> None:
    values = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan]
    for a in values:
        for b in values:
            assert np.array(np_maximum(a, b)).tobytes() == np.maximum(a, b).tobytes(), (a, b)
            assert np.array(np_minimum(a, b)).tobytes() == np.minimum(a, b).tobytes(), (a, b)
