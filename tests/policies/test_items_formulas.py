"""``ProjectedPolicy``'s candidate ``Items`` on Python floats against the numpy formulas they
replaced: the same bytes at simulated decisions, for urgency exponents on numpy's fast
scalar-power paths (0.5, 1, 2) and off them, with and without the starvation rescaling, in
request and step mode."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rlsched.policies.projected import ActionParams, ProjectedPolicy, ProjectionConfig
from rlsched.policies.static import load_static
from rlsched.sim import Simulator, load_scenario


def numpy_items(policy: ProjectedPolicy, state, recs, running) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """Utility, wait and lost as ``_build_items``, ``utility`` and ``_wait`` computed them in numpy."""
    now, p, cfg = state.now, policy.params, policy.config
    rows = policy.table.gather(recs)
    remaining = np.array(rows.remaining_s(recs, state.config.step_mode))  # tested against the records
    time_left = rows.deadline_s - now
    w = np.asarray(p.class_weights)[rows.cls]
    pressure = remaining / np.maximum(time_left, 1e-3)
    late = (time_left <= 0) | (pressure > 1.0)
    value = np.where(late, cfg.late_value, np.minimum(pressure, 1.0) ** p.urgency_exp)
    util = w * value / np.maximum(remaining, 1e-3)
    if running is not None:
        util = np.where(running, util * cfg.running_bonus, util)
    wait = now - rows.arrival_s
    m = cfg.starvation_slo_multiple
    if m > 0:
        base = cfg.starvation_threshold_s
        own = np.maximum(base, m * (rows.deadline_s - rows.arrival_s))
        wait = np.where(np.isfinite(own) & (own > 0), wait * (base / np.maximum(own, 1e-12)), wait)
    return util, wait, remaining > time_left


class _Both:
    """``policy`` deciding; at each decision with two or more candidates both formulas see them."""

    def __init__(self, policy: ProjectedPolicy) -> None:
        self.policy, self.name, self.compared = policy, "both", 0

    def reset(self, state) -> None:  # type: ignore[no-untyped-def]
        self.policy.reset(state)

    def decide(self, state):  # type: ignore[no-untyped-def]
        recs, _ = self.policy.candidates(state)
        if len(recs) >= 2 and self.compared < 400:
            items = self.policy.items(state, recs)
            running = self.policy._running_mask(state, len(recs)) if state.config.step_mode else None
            util, wait, lost = numpy_items(self.policy, state, recs, running)
            assert items.utility.dtype == np.float64 and items.utility.tobytes() == util.tobytes()
            assert items.wait_s.dtype == np.float64 and items.wait_s.tobytes() == wait.tobytes()
            assert items.lost is not None and items.lost.tolist() == lost.tolist()
            self.compared += 1
        return self.policy.decide(state)


def _policies() -> list[tuple[str, ProjectedPolicy]]:
    tuned = load_static("agents/tuned/default.json")
    out = [("tuned", tuned)]
    for exp in (0.5, 1.0, 2.0, 3.3):
        out.append((f"urgency_exp={exp}", ProjectedPolicy(dataclasses.replace(tuned.params, urgency_exp=exp),
                                                          tuned.config)))
    no_rescaling = ProjectionConfig(starvation_slo_multiple=0)
    out.append(("no starvation rescaling", ProjectedPolicy(ActionParams(), no_rescaling)))
    return out


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("label, policy", _policies(), ids=[label for label, _ in _policies()])
def test_items_are_the_numpy_formulas_bit_for_bit(label: str, policy: ProjectedPolicy, mode: str) -> None:
    sc = load_scenario("default")
    cost = sc.cost()
    both = _Both(policy)
    for seed, load in ((0, 1.0), (1, 2.5)):
        reqs = sc.requests(seed, load, 2400.0 if mode == "request" else 600.0, cost=cost)
        Simulator(list(reqs), cost, dataclasses.replace(sc.serving, mode=mode)).run(both)
    assert both.compared >= 50, label
