"""The exact projection is optimal (brute force on tiny instances) and the fast path matches it
wherever greedy is provably optimal (sizes uniform within a key)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsched.projection import Items, Resources, project, project_exact
from rlsched.projection.instances import random_instance
from tests.projection.test_knapsack import assert_feasible

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def brute_force(items: Items, res: Resources) -> float:
    """Best total utility over every single-key subset (no starvation in these instances)."""
    best = 0.0
    for key in np.unique(items.key_id):
        idx = np.flatnonzero(items.key_id == key)
        cap = int(items.cap[idx].min())
        for k in range(1, min(cap, idx.size) + 1):
            for combo in itertools.combinations(idx.tolist(), k):
                c = list(combo)
                if items.mem_gb[c].sum() <= res.memory_gb and items.tokens_m[c].sum() <= res.compute_budget_mtok:
                    best = max(best, float(items.utility[c].sum()))
    return best


def instance(seed: int, n: int, n_keys: int, uniform: bool, compute: bool, starving: float = 0.0):
    return random_instance(np.random.default_rng(seed), n, n_keys, uniform, compute, starving, integral=True)


@settings(max_examples=300, **SETTINGS)
@given(st.integers(0, 2**32 - 1), st.integers(1, 9), st.integers(1, 3), st.booleans(), st.booleans())
def test_exact_matches_brute_force(seed: int, n: int, n_keys: int, uniform: bool, compute: bool) -> None:
    items, res = instance(seed, n, n_keys, uniform, compute)
    batch = project_exact(items, res)
    assert_feasible(items, res, batch)
    assert items.utility[batch].sum() == brute_force(items, res)


@settings(max_examples=300, **SETTINGS)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 4), st.booleans(),
       st.sampled_from([0.0, 0.2]))
def test_fast_is_optimal_on_uniform_keys(seed: int, n: int, n_keys: int, compute: bool, starving: float) -> None:
    items, res = instance(seed, n, n_keys, True, compute, starving)
    fast, exact = project(items, res), project_exact(items, res)
    assert_feasible(items, res, exact)
    assert items.utility[fast].sum() == items.utility[exact].sum()


@settings(max_examples=200, **SETTINGS)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 4), st.booleans())
def test_fast_never_beats_exact(seed: int, n: int, n_keys: int, compute: bool) -> None:
    items, res = instance(seed, n, n_keys, False, compute)
    assert items.utility[project(items, res)].sum() <= items.utility[project_exact(items, res)].sum()
