"""Exact projection: each key's 0/1 knapsack as a MILP (HiGHS via ``scipy.optimize.milp``).

For small candidate sets and offline bounds (the optimality gap of ``project``), not
the hot path: one solve costs milliseconds. Same problem as ``project``: starving
requests pin the key, and the starving ones the greedy fill admits (oldest first) are
fixed in the batch. Needs scipy (extras ``dev`` or ``rl``).
"""

from __future__ import annotations

import numpy as np

from rlsched.projection.knapsack import (
    EMPTY,
    Group,
    Items,
    Resources,
    clean_utility,
    fill,
    fitting,
    group_of,
    pinned_group,
    within_budget,
)


def project_exact(items: Items, res: Resources, time_limit_s: float = 10.0) -> np.ndarray:
    """Indices of a utility-maximising feasible batch (solve per key, best key wins)."""
    ok = fitting(items, res)
    if not ok.any():
        return EMPTY
    utility = clean_utility(items.utility)
    pinned = pinned_group(items, res, ok, utility)
    groups = [pinned] if pinned is not None else _groups(items, np.flatnonzero(ok), utility)
    best, best_value = EMPTY, -1.0
    for g in groups:
        chosen = g.index[solve_group(g, res, time_limit_s)]
        value = float(utility[chosen].sum())
        if value > best_value:
            best, best_value = chosen, value
    return best


def _groups(items: Items, fit: np.ndarray, utility: np.ndarray) -> list[Group]:
    keys = items.key_id[fit]
    return [group_of(items, utility, fit[keys == k]) for k in np.unique(keys)]


def solve_group(g: Group, res: Resources, time_limit_s: float = 10.0) -> np.ndarray:
    """Positions in ``g`` of its optimal batch (the greedy fill if HiGHS returns nothing)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    greedy = fill(g, res, np.zeros(g.index.size, dtype=bool))
    lower = np.zeros(g.index.size)
    lower[:g.forced] = greedy[:g.forced]
    rows, upper = [g.mem, np.ones(g.index.size)], [res.memory_gb, g.cap]
    if np.isfinite(res.compute_budget_mtok):
        rows.append(g.tokens)
        upper.append(res.compute_budget_mtok)
    out = milp(-g.utility, constraints=LinearConstraint(np.vstack(rows), -np.inf, np.asarray(upper)),
               integrality=np.ones(g.index.size), bounds=Bounds(lower, 1.0),
               options={"time_limit": time_limit_s, "mip_rel_gap": 1e-9})
    if out.x is None:
        return np.flatnonzero(greedy)
    return _repair(g, res, np.flatnonzero(out.x > 0.5), lower > 0)


def _repair(g: Group, res: Resources, take: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """Drop the least valuable unfixed members if solver tolerance let a sum creep over budget."""
    probe = Items(g.utility, g.mem, g.tokens, np.zeros(g.index.size), np.full(g.index.size, g.cap),
                  np.zeros(g.index.size))
    while take.size > 1 and not within_budget(probe, res, take):
        u = np.where(fixed[take], np.inf, g.utility[take])
        take = np.delete(take, int(np.argmin(u)))
    return take
