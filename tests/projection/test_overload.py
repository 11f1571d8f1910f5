"""Overload semantics of the projection, over many random states (hypothesis).

* savable first: lost requests never change which savable requests are chosen;
* bounded starvation: the longest-waiting request of the tier being served (lost past
  the hard bound, else savable, else lost when no savable fits) is always admitted;
* simulation: every request ends exactly once, and with ``shed_lost`` only requests that
  could no longer meet their SLO are rejected.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsched.evaluation import RunSpec, prepare
from rlsched.policies.projected import ProjectedPolicy, ProjectionConfig
from rlsched.projection import Items, Resources, project
from rlsched.sim.request import COMPLETED, REJECTED
from tests.outcomes import FinishLog, check_outcomes
from tests.projection.test_knapsack import assert_feasible, fits_alone, states

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@st.composite
def overloaded(draw: st.DrawFn, hard_bound: bool = False) -> tuple[Items, Resources]:
    """A random queue (``test_knapsack.states``) in which a share of the requests is lost."""
    items, res = draw(states())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lost = rng.random(len(items)) < draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
    hard = res.starvation_threshold_s * 1.1 if hard_bound else np.inf  # starving waits: 30-40 s
    return dataclasses.replace(items, lost=lost), dataclasses.replace(res, lost_starvation_threshold_s=hard)


@settings(max_examples=3000, **SETTINGS)
@given(overloaded())
def test_lost_requests_never_displace_savable_ones(state: tuple[Items, Resources]) -> None:
    items, res = state
    batch = project(items, res)
    assert_feasible(items, res, batch)
    savable = (~items.lost & fits_alone(items, res)).nonzero()[0]
    if savable.size == 0:
        assert (batch.size > 0) == bool(fits_alone(items, res).any())  # lost ones run when nothing else can
        return
    alone = project(_subset(items, savable), res)  # the same queue without its lost requests
    assert sorted(batch[~items.lost[batch]].tolist()) == sorted(savable[alone].tolist())


@settings(max_examples=3000, **SETTINGS)
@given(overloaded(hard_bound=True))
def test_longest_waiting_request_of_the_served_tier_is_admitted(state: tuple[Items, Resources]) -> None:
    items, res = state
    batch = project(items, res)
    ok = fits_alone(items, res)
    hard = ok & items.lost & (items.wait_s > res.lost_starvation_threshold_s)
    savable = ok & ~items.lost
    starving = ok & (items.wait_s > res.starvation_threshold_s)
    for tier in (hard, savable & starving, starving if not savable.any() else None):
        if tier is not None and tier.any():
            oldest = int(np.where(tier, items.wait_s, -np.inf).argmax())
            assert oldest in batch.tolist()
            return


def _subset(items: Items, idx: np.ndarray) -> Items:
    return Items(*(getattr(items, f.name)[idx] for f in dataclasses.fields(Items) if f.name != "lost"))


@settings(max_examples=25, **SETTINGS)
@given(seed=st.integers(0, 10_000), load=st.sampled_from([0.5, 1.5, 4.0]), shed=st.booleans(),
       scenario=st.sampled_from(["default", "video-mix"]))
def test_every_request_ends_once_and_only_lost_ones_are_shed(seed: int, load: float, shed: bool,
                                                             scenario: str) -> None:
    duration = 1800.0 if scenario == "default" else 7200.0
    sim = prepare(RunSpec(scenario, "static", seed, load, duration))
    log = FinishLog(sim)
    rejected_when: dict[int, bool] = {}
    policy = ProjectedPolicy(config=ProjectionConfig(shed_lost=shed))
    policy.reset(sim)
    while sim.advance_to_next_decision():
        decision = policy.decide(sim)
        for rid in decision.reject:
            rec = sim.waiting[rid]
            rejected_when[rid] = rec.deadline_s - sim.now < rec.remaining_s
        _check_savable_first(sim, policy, decision)
        sim.apply(decision)
    metrics = check_outcomes(sim, log)  # one on_finish per request, its final status, counts agree
    assert metrics["requests_unfinished"] == 0  # at any load, no request waits forever
    rejected = [r for r in sim.records.values() if r.status == REJECTED]
    assert all(r.reject_reason == "lost" and rejected_when[r.request.id] for r in rejected)
    assert shed or not rejected
    # every rejection the policy decided was carried out and reported once, as a rejection
    assert {rid for rid, status in log.status.items() if status == REJECTED} == set(rejected_when)
    assert all(r.status == COMPLETED for r in sim.records.values() if r.request.id not in rejected_when
               and r.status != "failed_oom")


def _check_savable_first(sim, policy: ProjectedPolicy, decision) -> None:  # type: ignore[no-untyped-def]
    """When a savable waiting request fits, the batch holds one (unless the policy waits)."""
    if not decision.batch:
        return
    free = policy.resources(sim).memory_gb
    savable = [r for r in sim.waiting.values()
               if r.deadline_s - sim.now >= r.remaining_s and r.mem_gb <= free and r.request.id not in decision.reject]
    if sim.config.step_mode:
        savable += [r for r in sim.running if r.deadline_s - sim.now >= r.remaining_s]
    if savable:
        chosen = [sim.records[i] for i in decision.batch]
        assert any(r.deadline_s - sim.now >= r.remaining_s for r in chosen)


def test_an_engine_that_cannot_reject_refuses_shed_lost() -> None:
    """The plugin's queue view cannot drop requests: shedding there would strand them."""
    from types import SimpleNamespace

    import pytest

    from rlsched.errors import ConfigError

    with pytest.raises(ConfigError, match="shed_lost"):
        ProjectedPolicy(config=ProjectionConfig(shed_lost=True)).reset(SimpleNamespace(waiting={}, can_reject=False))
