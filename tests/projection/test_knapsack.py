"""The fast projection's guarantees, over many random states (hypothesis), plus worked cases."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsched.projection import Items, Resources, project, takes_all
from rlsched.projection.instances import random_instance, realistic

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@st.composite
def states(draw: st.DrawFn, starving: float | None = None) -> tuple[Items, Resources]:
    """A random queue: 0-40 requests, 1-6 keys, sizes uniform per key or per request."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    items, res = random_instance(
        rng, n=draw(st.integers(0, 40)), n_keys=draw(st.integers(1, 6)), uniform=draw(st.booleans()),
        compute_budget=draw(st.booleans()),
        starving_share=draw(st.sampled_from([0.0, 0.05, 0.3, 1.0])) if starving is None else starving,
        integral=draw(st.booleans()))
    scale = draw(st.sampled_from([0.05, 0.5, 1.0, 3.0]))  # 0.05: most requests do not fit alone
    return items, Resources(res.memory_gb * scale, res.compute_budget_mtok, res.starvation_threshold_s)


def assert_feasible(items: Items, res: Resources, batch: np.ndarray) -> None:
    assert batch.dtype.kind == "i"
    assert len(set(batch.tolist())) == batch.size
    assert ((batch >= 0) & (batch < len(items))).all()
    if batch.size == 0:
        return
    assert items.mem_gb[batch].sum() <= res.memory_gb
    assert items.tokens_m[batch].sum() <= res.compute_budget_mtok
    assert batch.size <= items.cap[batch].min()
    assert (items.key_id[batch] == items.key_id[batch[0]]).all()


def fits_alone(items: Items, res: Resources) -> np.ndarray:
    return (items.mem_gb <= res.memory_gb) & (items.tokens_m <= res.compute_budget_mtok)


@settings(max_examples=5000, **SETTINGS)
@given(states())
def test_feasible_and_never_idle(state: tuple[Items, Resources]) -> None:
    items, res = state
    batch = project(items, res)
    assert_feasible(items, res, batch)
    assert (batch.size > 0) == bool(fits_alone(items, res).any())


@settings(max_examples=4000, **SETTINGS)
@given(states(starving=0.2))
def test_longest_waiting_starving_request_is_admitted(state: tuple[Items, Resources]) -> None:
    items, res = state
    batch = project(items, res)
    assert_feasible(items, res, batch)
    starving = fits_alone(items, res) & (items.wait_s > res.starvation_threshold_s)
    if starving.any():
        assert items.wait_s[batch].max() == items.wait_s[starving].max()


@settings(max_examples=1000, **SETTINGS)
@given(st.integers(0, 2**32 - 1), st.sampled_from([16, 256]))
def test_realistic_queues_are_feasible_and_full(seed: int, n: int) -> None:
    items, res = realistic(np.random.default_rng(seed), n)
    batch = project(items, res)
    assert_feasible(items, res, batch)
    # A uniform key's batch is full: nothing else of its key would still fit.
    same = np.flatnonzero(items.key_id == items.key_id[batch[0]])
    rest = np.setdiff1d(same, batch)
    if rest.size and batch.size < items.cap[batch[0]]:
        assert items.mem_gb[batch].sum() + items.mem_gb[rest].min() > res.memory_gb


@settings(max_examples=3000, **SETTINGS)
@given(states(), st.integers(1, 8), st.sampled_from([0.3, 0.5, 0.99, 1.0, 2.0]), st.booleans())
def test_takes_all_only_when_the_projection_takes_every_item(state: tuple[Items, Resources], size: int,
                                                            lost_share: float, late: bool) -> None:
    """``takes_all`` lets candidate key batches skip the projection: wherever it says yes, the
    projection's batch is exactly every item (any order). Instances: the first ``size`` items of
    one key, some lost (and past the hard bound with ``late``), budgets around their sums."""
    items, res = state
    if len(items) == 0:
        return
    sub = np.flatnonzero(items.key_id == items.key_id[0])[:size]
    mem = items.mem_gb[sub]
    rng = np.random.default_rng(len(sub) * 7919 + int(items.key_id[0]))
    lost = rng.random(sub.size) < 0.5
    view = Items(items.utility[sub], mem, items.tokens_m[sub], items.key_id[sub], items.cap[sub],
                 items.wait_s[sub], lost)
    res = Resources(float(mem.sum()) * lost_share, res.compute_budget_mtok, res.starvation_threshold_s,
                    res.starvation_threshold_s if late else math.inf)
    if takes_all(view, res):
        assert sorted(project(view, res).tolist()) == list(range(sub.size))


@settings(max_examples=500, **SETTINGS)
@given(states())
def test_one_request_key_batches_match_the_projection(state: tuple[Items, Resources]) -> None:
    """``candidate_batches`` answers a one-request key batch without the projection: the same answer."""
    from rlsched.policies.candidates import _key_batch

    items, res = state
    ids = np.arange(100, 100 + len(items))
    for i in range(min(len(items), 5)):
        mask = np.zeros(len(items), dtype=bool)
        mask[i] = True
        view = Items(items.utility[[i]], items.mem_gb[[i]], items.tokens_m[[i]], items.key_id[[i]],
                     items.cap[[i]], items.wait_s[[i]])
        assert _key_batch(items, res, ids, mask, items.utility, fits_alone(items, res)) == tuple(
            int(ids[i]) for _ in project(view, res))


def test_takes_all_cases() -> None:
    one = _items([1.0, 2.0], [3.0, 4.0], [0, 0], cap=2)
    assert takes_all(one, Resources(7.1))
    assert not takes_all(one, Resources(7.0 - 1e-6))  # over the budget
    assert not takes_all(_items([1.0, 2.0], [3.0, 4.0], [0, 0], cap=1), Resources(100.0))  # over the cap
    assert not takes_all(_items([1.0, 2.0], [3.0, 4.0], [0, 1]), Resources(100.0))  # two keys
    assert not takes_all(_items([], [], []), Resources(100.0))
    lost = Items(one.utility, one.mem_gb, one.tokens_m, one.key_id, one.cap, np.array([50.0, 1.0]),
                 np.array([True, False]))
    assert takes_all(lost, Resources(100.0, starvation_threshold_s=30.0))
    assert not takes_all(lost, Resources(100.0, starvation_threshold_s=30.0, lost_starvation_threshold_s=40.0))
    assert sorted(project(lost, Resources(100.0, lost_starvation_threshold_s=40.0)).tolist()) == [0]


def _items(utility, mem, key, cap=4, tokens=None, wait=None) -> Items:
    n = len(utility)
    return Items(np.asarray(utility, float), np.asarray(mem, float),
                 np.asarray(tokens if tokens is not None else [0.0] * n, float), np.asarray(key),
                 np.full(n, cap), np.asarray(wait if wait is not None else [0.0] * n, float))


def test_empty_queue_and_nothing_fits() -> None:
    assert project(_items([], [], []), Resources(10.0)).size == 0
    assert project(_items([1.0], [11.0], [0]), Resources(10.0)).size == 0


def test_best_key_wins_over_head_key() -> None:
    items = _items([1, 1, 5, 5], [2, 2, 2, 2], [0, 0, 1, 1])
    assert sorted(project(items, Resources(10.0)).tolist()) == [2, 3]


def test_memory_binds_before_cap() -> None:
    items = _items([4, 3, 2, 1], [4, 4, 4, 4], [0, 0, 0, 0], cap=4)
    assert sorted(project(items, Resources(9.0)).tolist()) == [0, 1]


def test_one_large_item_beats_greedy_by_density() -> None:
    # Density prefers the two small ones (3 + 3); the large one alone is worth more.
    items = _items([3, 3, 10], [1, 1, 10], [0, 0, 0], cap=4)
    assert project(items, Resources(10.0)).tolist() == [2]


def test_compute_budget_binds() -> None:
    items = _items([5, 4, 3], [1, 1, 1], [0, 0, 0], tokens=[2, 2, 2])
    assert sorted(project(items, Resources(10.0, compute_budget_mtok=4.0)).tolist()) == [0, 1]


def test_starving_request_pins_its_key() -> None:
    items = _items([100, 100, 0.1], [1, 1, 1], [0, 0, 1], wait=[1, 1, 45])
    assert 2 in project(items, Resources(10.0, starvation_threshold_s=30.0)).tolist()


def test_nan_and_negative_utilities_still_give_a_batch() -> None:
    items = _items([math.nan, -1.0], [1, 1], [0, 1])
    batch = project(items, Resources(10.0))
    assert batch.size == 1
