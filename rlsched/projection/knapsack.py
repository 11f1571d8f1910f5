"""Fast batch projection: greedy by utility density over every key at once + local search.

The batch to start now is a multi-dimensional 0/1 knapsack restricted to one
compatibility key: maximise Σ utility subject to Σ memory ≤ memory budget, count ≤
the key's cap, Σ tokens ≤ compute budget. ``project`` runs at every decision point
(under vLLM-Omni's scheduler lock), so it is numpy, not per-request Python:

1. one sort by (key, −density), density = utility ÷ the request's dominant share
   of memory, tokens and batch slots; per-group cumulative sums give every key's
   greedy prefix at once (count, memory and tokens only grow along a prefix);
2. requests of one key share their shape, hence their memory and tokens: on such
   uniform keys greedy by utility is optimal, and the most valuable prefix wins;
3. otherwise the ``_REFINE_GROUPS`` best keys are refined: a sequential fill that
   skips what does not fit (also started from the single most valuable request),
   then a bounded local search (add, 1-for-1 and 2-for-1 swaps, drop-and-refill).

Up to ``few.FEW`` items the same steps run in plain Python (``rlsched.projection.few``, equal bit
for bit): a decision's dozen candidates cost numpy's per-call overhead, not arithmetic. A change to
the steps below must be made there too; ``tests/projection/test_few.py`` fails until it is.
``scripts/projection_gap.py`` measures the gap to ``rlsched.projection.exact``.

Overload (``Items.lost`` marks requests that can no longer meet their SLO):

* **Savable first.** While some savable request fits, the batch is chosen among
  savable requests only, so a lost request never displaces a savable one; lost
  requests of the chosen key then fill the slots and memory left (they ride along).
  Only when every fitting request is lost are lost requests chosen on their own.
* **Bounded starvation.** If a request of the tier being served (savable, or lost when
  no savable one fits) has waited longer than ``starvation_threshold_s``, the batch is
  pinned to the key of the longest-waiting one; starving requests of that key are
  taken first, oldest first, and the local search never drops them. A lost request
  waiting longer than ``lost_starvation_threshold_s`` pins the batch even over
  savable ones (a hard bound on every wait; infinite by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rlsched.projection.few import FEW, project_few
from rlsched.projection.items import Items, Resources

EMPTY = np.empty(0, dtype=np.int64)
_SEARCH_ROUNDS = 8
"""Bound on local-search moves per call (each move strictly improves utility)."""
_GAIN_EPS = 1e-12
_REFINE_GROUPS = 3
"""Keys refined when sizes differ within a key (their greedy prefix may undersell them)."""

# The hot path calls ufunc methods (np.add.accumulate, ndarray.nonzero) rather than the
# np.cumsum / np.flatnonzero wrappers: at 16-256 requests the wrappers' Python cost dominates.
_any = np.logical_or.reduce
_all = np.logical_and.reduce
_sum = np.add.reduce


@dataclass(frozen=True, slots=True)
class Group:
    """One key's candidates, in the order the greedy fill visits them."""

    index: np.ndarray
    """Positions in the caller's ``Items``."""
    utility: np.ndarray
    mem: np.ndarray
    tokens: np.ndarray
    cap: int
    forced: int = 0
    """The first ``forced`` candidates are starving: taken first, never dropped."""


def project(items: Items, res: Resources) -> np.ndarray:
    """Indices of the batch to start now; empty only when no request fits alone."""
    if len(items) <= FEW:
        chosen = project_few(items, res)
        if chosen is not None:
            return np.array(chosen, dtype=np.int64)
    return project_arrays(items, res)


def project_arrays(items: Items, res: Resources) -> np.ndarray:
    """``project`` in numpy, whatever the number of items (``few.project_few`` follows it bit for
    bit where it serves)."""
    ok = fitting(items, res)
    if not _any(ok):
        return EMPTY
    utility = clean_utility(items.utility)
    lost = items.lost if items.lost is not None else np.zeros(len(items), dtype=bool)
    savable = ok & ~lost
    late = ok & lost & (items.wait_s > res.lost_starvation_threshold_s)
    tier = late if _any(late) else (savable if _any(savable) else ok)
    pinned = pinned_group(items, res, tier, utility, late)
    if pinned is not None:
        chosen = _trim(items, res, pinned.index[refine(pinned, res)], pinned.forced)
    else:
        chosen = _trim(items, res, _best_greedy(items, res, tier, utility), 0)
    if tier is savable:
        return _ride_along(items, res, chosen, ok & lost, utility)
    return chosen


def fitting(items: Items, res: Resources) -> np.ndarray:
    """Mask of requests that fit alone (memory, tokens; every cap is >= 1)."""
    return (items.mem_gb <= res.memory_gb) & (items.tokens_m <= res.compute_budget_mtok)


def clean_utility(u: np.ndarray) -> np.ndarray:
    """Utilities as floats >= 0 (a NaN must not win a comparison)."""
    u = np.asarray(u, dtype=np.float64)
    return np.where(u > 0, u, 0.0)


def pinned_group(items: Items, res: Resources, ok: np.ndarray, utility: np.ndarray,
                 late: np.ndarray | None = None) -> Group | None:
    """The key of the longest-waiting starving request among ``ok``, starving ones first;
    None if none starves. ``late`` requests (lost past the hard bound) starve by definition."""
    starving = ok & (items.wait_s > res.starvation_threshold_s)
    if late is not None:
        starving |= ok & late
    if not _any(starving):
        return None
    oldest = int(np.where(starving, items.wait_s, -np.inf).argmax())
    grp = (ok & (items.key_id == items.key_id[oldest])).nonzero()[0]
    first = starving[grp]
    dens = utility[grp] / _size(items.mem_gb[grp], items.tokens_m[grp], items.cap[grp], res)
    order = grp[np.lexsort((np.where(first, -items.wait_s[grp], -dens), ~first))]
    return group_of(items, utility, order, int(_sum(first)))


def _ride_along(items: Items, res: Resources, chosen: np.ndarray, pool: np.ndarray,
                utility: np.ndarray) -> np.ndarray:
    """Add ``pool`` requests of the chosen key to the batch while slots and memory are left."""
    if chosen.size == 0 or not _any(pool):
        return chosen
    key = items.key_id[chosen[0]]
    room = int(items.cap[chosen].min()) - chosen.size
    extra = (pool & (items.key_id == key)).nonzero()[0]
    if room <= 0 or extra.size == 0:
        return chosen
    mem, tok = float(_sum(items.mem_gb[chosen])), float(_sum(items.tokens_m[chosen]))
    out = chosen.tolist()
    for i in extra[np.argsort(-utility[extra], kind="stable")].tolist():
        if room == 0:
            break
        m, t = float(items.mem_gb[i]), float(items.tokens_m[i])
        if mem + m <= res.memory_gb and tok + t <= res.compute_budget_mtok and items.cap[i] > len(out):
            out.append(i)
            mem, tok, room = mem + m, tok + t, room - 1
    batch = np.asarray(out, dtype=np.int64)
    return batch if within_budget(items, res, batch) else chosen


def _best_greedy(items: Items, res: Resources, ok: np.ndarray, utility: np.ndarray) -> np.ndarray:
    """The batch of the key whose greedy packing is worth most.

    When every key's sizes are uniform the greedy prefixes are optimal and the best
    one wins outright; otherwise the ``_REFINE_GROUPS`` best keys are refined.
    """
    fit = None if _all(ok) else ok.nonzero()[0]
    u, m, t, cap, key = (a if fit is None else a[fit] for a in
                         (utility, items.mem_gb, items.tokens_m, items.cap, items.key_id))
    order = np.lexsort((-u / _size(m, t, cap, res), key))
    ms, ts, us = m[order], t[order], u[order]
    start, prefix = _greedy_prefixes(key[order], ms, ts, cap[order], res)
    value = np.add.reduceat(us * prefix, start)
    uniform = _uniform_groups(ms, start)
    if math.isfinite(res.compute_budget_mtok):
        uniform &= _uniform_groups(ts, start)
    members = order if fit is None else fit[order]
    if _all(uniform):
        lo, hi = _bounds(start, int(value.argmax()), us.size)
        return members[lo:hi][prefix[lo:hi]]
    score = np.maximum(value, np.maximum.reduceat(us, start))  # a big request may beat a greedy prefix
    return _refine_best(items, res, utility, members, start, prefix, score, uniform)


def _refine_best(items: Items, res: Resources, utility: np.ndarray, members: np.ndarray, start: np.ndarray,
                 prefix: np.ndarray, score: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Refine the best-scoring keys (uniform ones keep their prefix); the most valuable batch."""
    best, best_value = EMPTY, -1.0
    for g in np.argsort(-score, kind="stable")[:_REFINE_GROUPS].tolist():
        lo, hi = _bounds(start, g, members.size)
        group = members[lo:hi]
        chosen = group[prefix[lo:hi]] if uniform[g] else group[refine(group_of(items, utility, group), res)]
        value = float(_sum(utility[chosen]))
        if value > best_value:
            best, best_value = chosen, value
    return best


def _bounds(start: np.ndarray, g: int, n: int) -> tuple[int, int]:
    return int(start[g]), int(start[g + 1]) if g + 1 < start.size else n


def _uniform_groups(x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per group: all sizes equal (greedy by utility is then optimal within the group)."""
    return np.maximum.reduceat(x, start) == np.minimum.reduceat(x, start)


def _greedy_prefixes(key: np.ndarray, mem: np.ndarray, tok: np.ndarray, cap: np.ndarray,
                     res: Resources) -> tuple[np.ndarray, np.ndarray]:
    """Group starts of key-sorted arrays, and the mask of each group's greedy prefix.

    Count, memory and token sums only grow along a group, so the requests that fit
    before the first one that does not form a prefix: three vectorised comparisons.
    """
    new = np.empty(key.size, dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    start = new.nonzero()[0]
    gid = np.add.accumulate(new) - 1
    first = start[gid]
    prefix = np.arange(key.size) - first < np.minimum.reduceat(cap, start)[gid]
    prefix &= _segment_cumsum(mem, first) <= res.memory_gb
    if math.isfinite(res.compute_budget_mtok):
        prefix &= _segment_cumsum(tok, first) <= res.compute_budget_mtok
    return start, prefix


def _segment_cumsum(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at each group's first position (``_trim`` rechecks rounding)."""
    c = np.add.accumulate(x)
    return c - (c[first] - x[first])


def _uniform(x: np.ndarray) -> bool:
    """Equal sizes across a group: greedy by utility is then already optimal."""
    return not _any(x[1:] != x[0])


def _size(m: np.ndarray, t: np.ndarray, cap: np.ndarray, res: Resources) -> np.ndarray:
    """Dominant share of one request: the largest of its memory, tokens and batch-slot fractions."""
    size = np.maximum(m * (1.0 / res.memory_gb) if res.memory_gb > 0 else (m > 0) * 1.0, 1.0 / cap)
    if math.isfinite(res.compute_budget_mtok) and res.compute_budget_mtok > 0:
        size = np.maximum(size, t * (1.0 / res.compute_budget_mtok))
    return size


def group_of(items: Items, utility: np.ndarray, index: np.ndarray, forced: int = 0) -> Group:
    """The candidates ``index`` (in fill order) as a ``Group``; its cap is their smallest."""
    return Group(index, utility[index], items.mem_gb[index], items.tokens_m[index],
                 max(1, int(items.cap[index].min())), forced)


# ------------------------------------------------------------------ refinement


def refine(g: Group, res: Resources) -> np.ndarray:
    """Positions in ``g`` of a feasible batch: greedy fill (best of two starts) + local search."""
    take = fill(g, res, np.zeros(g.index.size, dtype=bool))
    if g.forced == 0:
        best = int(np.argmax(g.utility))
        if g.utility[best] > g.utility[take].sum():  # greedy's classic failure: one big item
            seed = np.zeros(g.index.size, dtype=bool)
            seed[best] = True
            take = fill(g, res, seed)
    if not (_uniform(g.mem) and _uniform(g.tokens)):
        locked = np.zeros(g.index.size, dtype=bool)
        locked[:g.forced] = take[:g.forced]
        take = _local_search(g, res, take, locked)
    return np.flatnonzero(take)


def fill(g: Group, res: Resources, take: np.ndarray, skip: int = -1) -> np.ndarray:
    """Add candidates in group order while they fit (skipping those that do not, and ``skip``)."""
    take = take.copy()
    mem, tok, count = float(g.mem[take].sum()), float(g.tokens[take].sum()), int(take.sum())
    smallest = float(g.mem.min())
    for i, (m, t) in enumerate(zip(g.mem.tolist(), g.tokens.tolist(), strict=True)):
        if count >= g.cap or mem + smallest > res.memory_gb:
            break
        if not take[i] and i != skip and mem + m <= res.memory_gb and tok + t <= res.compute_budget_mtok:
            take[i] = True
            mem, tok, count = mem + m, tok + t, count + 1
    return take


def _local_search(g: Group, res: Resources, take: np.ndarray, locked: np.ndarray) -> np.ndarray:
    """Improving moves until none helps or the round budget is spent: add, swap, drop-and-refill."""
    for _ in range(_SEARCH_ROUNDS):
        if not (_add_best(g, res, take) or _swap_best(g, res, take, locked) or _swap_pair(g, res, take, locked)):
            better = _drop_refill(g, res, take, locked)
            if better is None:
                break
            take = better
    return take


def _drop_refill(g: Group, res: Resources, take: np.ndarray, locked: np.ndarray) -> np.ndarray | None:
    """Drop one unlocked member and refill greedily (1-for-many); the best strict improvement."""
    value = float(g.utility[take].sum())
    best, best_value = None, value * (1 + 1e-12) + _GAIN_EPS
    for i in (take & ~locked).nonzero()[0].tolist():
        trial = take.copy()
        trial[i] = False
        trial = fill(g, res, trial, skip=i)
        trial_value = float(g.utility[trial].sum())
        if trial_value > best_value:
            best, best_value = trial, trial_value
    return best


def _slack(g: Group, res: Resources, take: np.ndarray) -> tuple[float, float]:
    return res.memory_gb - float(g.mem[take].sum()), res.compute_budget_mtok - float(g.tokens[take].sum())


def _add_best(g: Group, res: Resources, take: np.ndarray) -> bool:
    """Add the most valuable outside candidate that fits; in place."""
    if take.sum() >= g.cap:
        return False
    mem_left, tok_left = _slack(g, res, take)
    ok = ~take & (g.mem <= mem_left) & (g.tokens <= tok_left)
    if not ok.any():
        return False
    take[int(np.argmax(np.where(ok, g.utility, -1.0)))] = True
    return True


def _swap_best(g: Group, res: Resources, take: np.ndarray, locked: np.ndarray) -> bool:
    """Best strictly improving 1-for-1 exchange of an unlocked member; in place."""
    inside = np.flatnonzero(take & ~locked)
    if inside.size == 0:
        return False
    outside = np.flatnonzero(~take & (g.utility > g.utility[inside].min()))
    if outside.size == 0:
        return False
    mem_left, tok_left = _slack(g, res, take)
    gain = g.utility[outside][None, :] - g.utility[inside][:, None]
    ok = (g.mem[outside][None, :] - g.mem[inside][:, None] <= mem_left)
    ok &= g.tokens[outside][None, :] - g.tokens[inside][:, None] <= tok_left
    gain = np.where(ok, gain, 0.0)
    best = int(np.argmax(gain))
    if gain.flat[best] <= _GAIN_EPS * max(1.0, float(g.utility[take].sum())):
        return False
    i, j = divmod(best, outside.size)
    take[inside[i]], take[outside[j]] = False, True
    return True


def _swap_pair(g: Group, res: Resources, take: np.ndarray, locked: np.ndarray) -> bool:
    """Best strictly improving 2-for-1 exchange (two unlocked members out, one candidate in); in place."""
    inside = np.flatnonzero(take & ~locked)
    if inside.size < 2:
        return False
    a, b = np.triu_indices(inside.size, 1)
    a, b = inside[a], inside[b]
    pair_u = g.utility[a] + g.utility[b]
    outside = np.flatnonzero(~take & (g.utility > pair_u.min()))
    if outside.size == 0:
        return False
    mem_left, tok_left = _slack(g, res, take)
    ok = g.mem[outside][None, :] - (g.mem[a] + g.mem[b])[:, None] <= mem_left
    ok &= g.tokens[outside][None, :] - (g.tokens[a] + g.tokens[b])[:, None] <= tok_left
    gain = np.where(ok, g.utility[outside][None, :] - pair_u[:, None], 0.0)
    best = int(np.argmax(gain))
    if gain.flat[best] <= _GAIN_EPS * max(1.0, float(g.utility[take].sum())):
        return False
    i, j = divmod(best, outside.size)
    take[a[i]], take[b[i]], take[outside[j]] = False, False, True
    return True


def _trim(items: Items, res: Resources, chosen: np.ndarray, forced: int) -> np.ndarray:
    """Drop the least valuable unforced members while rounding left the sums over budget."""
    while chosen.size > 1 and not within_budget(items, res, chosen):
        u = clean_utility(items.utility[chosen])
        if forced:
            u = np.where(items.wait_s[chosen] > res.starvation_threshold_s, np.inf, u)
        drop = int(u.argmin()) if np.isfinite(u).any() else chosen.size - 1
        chosen = np.delete(chosen, drop)
    return chosen


_ROOM = 1.0 + 1e-9
"""``takes_all``'s margin on the sums: room for any order's rounding (project sums along its own order)."""


def takes_all(items: Items, res: Resources) -> bool:
    """Whether one batch holds every item of ``items`` with room to spare: one key, no more than
    the smallest cap, memory and token sums within the budgets with ``_ROOM``'s margin, and no
    lost request past the hard bound (that tier would be served alone). ``project`` then returns
    every item (in its own order), so a caller that needs the set, not the order, can skip it:
    most of a decision's ``candidate_batches`` are such key batches of one to a few requests, and
    this test costs ~10 µs where ``project`` of three items costs ~20 µs even on its plain-Python path."""
    n = len(items)
    if n == 0 or n > int(items.cap.min()) or not _all(items.key_id == items.key_id[0]):
        return False
    if items.lost is not None and _any(items.lost & (items.wait_s > res.lost_starvation_threshold_s)):
        return False
    return bool(_sum(items.mem_gb) * _ROOM <= res.memory_gb) and (
        not math.isfinite(res.compute_budget_mtok) or bool(_sum(items.tokens_m) * _ROOM <= res.compute_budget_mtok))


def within_budget(items: Items, res: Resources, chosen: np.ndarray) -> bool:
    """Memory and token sums of ``chosen`` within the budgets (numpy's own summation)."""
    if not _sum(items.mem_gb[chosen]) <= res.memory_gb:
        return False
    return not math.isfinite(res.compute_budget_mtok) or bool(_sum(items.tokens_m[chosen]) <= res.compute_budget_mtok)
