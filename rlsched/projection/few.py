"""``project`` for a decision's few candidates, in plain Python, equal to the numpy path bit for bit.

Why hand-written beside the numpy path: a decision's candidates are a few per key (a dozen in
the shipped scenarios, four in the plugin bench), and there ``project``'s ~60 numpy calls cost
~1–2 µs each however few the items: in plain Python the same work is a few list passes.

Equal bit for bit means the same comparisons on the same float64 numbers and every sum added
in numpy's order: ``np.add.reduce`` is pairwise (``np_sum``: sequential below 8 terms, eight
running sums above), ``np.add.reduceat`` adds its first term to the pairwise sum of the rest,
``np.add.accumulate`` is sequential. Sorts keep numpy's stable ties (``sorted`` is stable).
Where numpy's path would do what this does not (local search over a key with mixed sizes, a
NaN size or sort key, a cap below 1), ``project_few`` returns None and the caller runs the numpy path.
``tests/projection/test_few.py`` checks equality on random instances.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlsched.projection.items import Items, Resources

FEW = 16
"""Largest candidate count served here: on ``instances.realistic`` queues this path took 19-23 µs at
4 items and 47-58 µs at 16 against numpy's 36-66 µs at both; beyond ~16 numpy's fixed cost wins."""

_INF = math.inf


# ------------------------------------------------ numpy's float rules on Python floats
# (also used where other decision code replaced small numpy calls by loops: the same values)


def np_sum(xs: list[float]) -> float:
    """``np.add.reduce`` of ``xs`` (float64), term for term: numpy's pairwise summation."""
    return _pairwise(xs, 0, len(xs))


def _segment_sum(xs: list[float]) -> float:
    """``np.add.reduceat``'s sum of one segment: its first term plus numpy's sum of the rest."""
    return xs[0] + np_sum(xs[1:]) if len(xs) > 1 else xs[0]


def _pairwise(a: list[float], lo: int, n: int) -> float:
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        i, stop = 8, n - n % 8
        while i < stop:
            j = lo + i
            r0, r1, r2, r3 = r0 + a[j], r1 + a[j + 1], r2 + a[j + 2], r3 + a[j + 3]
            r4, r5, r6, r7 = r4 + a[j + 4], r5 + a[j + 5], r6 + a[j + 6], r7 + a[j + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(lo + i, lo + n):
            res += a[j]
        return res
    half = n // 2
    half -= half % 8
    return _pairwise(a, lo, half) + _pairwise(a, lo + half, n - half)


def np_maximum(a: float, b: float) -> float:
    """``np.maximum(a, b)`` of two floats: a NaN wins; of two equal values (0.0 and -0.0) the second."""
    return a if a > b or a != a else b


def np_minimum(a: float, b: float) -> float:
    """``np.minimum(a, b)`` of two floats: a NaN wins; of two equal values (0.0 and -0.0) the second."""
    return a if a < b or a != a else b


class _Few:
    """One call's items as Python lists (see ``project_few``)."""

    __slots__ = ("u", "mem", "tok", "key", "cap", "wait", "lost", "res", "budget", "tokens_bound")

    def __init__(self, items: Items, res: Resources) -> None:
        self.u = [x if x > 0 else 0.0 for x in items.utility.tolist()]  # clean_utility: a NaN reads 0
        self.mem, self.tok = items.mem_gb.tolist(), items.tokens_m.tolist()
        self.key, self.cap, self.wait = items.key_id.tolist(), items.cap.tolist(), items.wait_s.tolist()
        self.lost = items.lost.tolist() if items.lost is not None else [False] * len(self.u)
        self.res, self.budget = res, res.compute_budget_mtok
        self.tokens_bound = math.isfinite(res.compute_budget_mtok)

    def size(self, i: int) -> float:
        """``knapsack._size`` of item ``i``: its dominant share."""
        res = self.res
        m = self.mem[i]
        share = m * (1.0 / res.memory_gb) if res.memory_gb > 0 else (1.0 if m > 0 else 0.0)
        size = np_maximum(share, 1.0 / self.cap[i])
        if self.tokens_bound and self.budget > 0:
            size = np_maximum(size, self.tok[i] * (1.0 / self.budget))
        return size

    def within_budget(self, chosen: list[int]) -> bool:
        if not np_sum([self.mem[i] for i in chosen]) <= self.res.memory_gb:
            return False
        return not self.tokens_bound or np_sum([self.tok[i] for i in chosen]) <= self.budget


def project_few(items: Items, res: Resources) -> list[int] | None:
    """``knapsack.project``'s batch (indices, in its order) for up to ``FEW`` items, or None where
    this does not follow the numpy path (see the module docstring)."""
    f = _Few(items, res)
    n = len(f.u)
    if any(x != x for x in (*f.mem, *f.tok, *f.wait)) or min(f.cap, default=1) < 1:
        return None  # numpy orders NaNs and divides by a zero cap without raising: its path
    mem_gb, budget = res.memory_gb, res.compute_budget_mtok
    ok = [f.mem[i] <= mem_gb and f.tok[i] <= budget for i in range(n)]
    if not any(ok):
        return []
    savable = [ok[i] and not f.lost[i] for i in range(n)]
    late = [ok[i] and f.lost[i] and f.wait[i] > res.lost_starvation_threshold_s for i in range(n)]
    tier = late if any(late) else (savable if any(savable) else ok)
    pinned = _pinned(f, tier, late)
    if pinned is None:
        chosen = _best_greedy(f, tier)
        forced = 0
    else:
        index, forced = pinned
        take = _refine(f, index, forced)
        chosen = None if take is None else [index[j] for j in take]
    if chosen is None:
        return None
    chosen = _trim(f, chosen, forced)
    if tier is savable:
        return _ride_along(f, chosen, [ok[i] and f.lost[i] for i in range(n)])
    return chosen


def _pinned(f: _Few, tier: list[bool], late: list[bool]) -> tuple[list[int], int] | None:
    """``knapsack.pinned_group``: the oldest starving item's key, starving ones first (oldest
    first), then by density; the candidates' indices and how many starve."""
    threshold = f.res.starvation_threshold_s
    starving = [tier[i] and (f.wait[i] > threshold or late[i]) for i in range(len(tier))]
    oldest = -1
    for i, s in enumerate(starving):
        if s and (oldest < 0 or f.wait[i] > f.wait[oldest]):  # argmax: the first of equal waits
            oldest = i
    if oldest < 0:
        return None
    key = f.key[oldest]
    grp = [i for i in range(len(tier)) if tier[i] and f.key[i] == key]
    sort_key = {i: (not starving[i], -f.wait[i] if starving[i] else -(f.u[i] / f.size(i))) for i in grp}
    if any(k[1] != k[1] for k in sort_key.values()):
        return None
    return sorted(grp, key=sort_key.__getitem__), sum(starving[i] for i in grp)


def _refine(f: _Few, index: list[int], forced: int) -> list[int] | None:
    """``knapsack.refine`` of the group ``index`` when its sizes are uniform (no local search)."""
    mem = [f.mem[i] for i in index]
    tok = [f.tok[i] for i in index]
    if any(x != mem[0] for x in mem) or any(x != tok[0] for x in tok):
        return None
    util = [f.u[i] for i in index]
    cap = max(1, min(f.cap[i] for i in index))
    take = _fill(f, mem, tok, cap, [False] * len(index))
    if forced == 0:
        best = util.index(max(util))
        if util[best] > np_sum([u for u, t in zip(util, take, strict=True) if t]):
            seed = [False] * len(index)
            seed[best] = True
            take = _fill(f, mem, tok, cap, seed)
    return [j for j, t in enumerate(take) if t]


def _fill(f: _Few, mem: list[float], tok: list[float], cap: int, take: list[bool]) -> list[bool]:
    """``knapsack.fill``: add candidates in order while they fit."""
    take = list(take)
    used_mem = np_sum([m for m, t in zip(mem, take, strict=True) if t])
    used_tok = np_sum([x for x, t in zip(tok, take, strict=True) if t])
    count, smallest = sum(take), min(mem)
    mem_gb, budget = f.res.memory_gb, f.budget
    for i, (m, t) in enumerate(zip(mem, tok, strict=True)):
        if count >= cap or used_mem + smallest > mem_gb:
            break
        if not take[i] and used_mem + m <= mem_gb and used_tok + t <= budget:
            take[i] = True
            used_mem, used_tok, count = used_mem + m, used_tok + t, count + 1
    return take


def _best_greedy(f: _Few, tier: list[bool]) -> list[int] | None:
    """``knapsack._best_greedy`` when every key's sizes are uniform (else None): the greedy prefix
    of the key worth most, items sorted by (key, −density)."""
    u, mem, tok, key, cap = f.u, f.mem, f.tok, f.key, f.cap
    fit = [i for i, t in enumerate(tier) if t]
    neg_density = {i: -(u[i] / f.size(i)) for i in fit}
    if any(d != d for d in neg_density.values()):
        return None
    order = sorted(fit, key=lambda i: (key[i], neg_density[i]))
    mem_gb, budget, bound = f.res.memory_gb, f.budget, f.tokens_bound
    # numpy: one np.add.accumulate over the whole sorted array, each group's prefix sums read off it
    run_mem = run_tok = base_mem = base_tok = 0.0
    best: list[int] | None = None
    best_value = 0.0
    lo, n = 0, len(order)
    while lo < n:
        first = order[lo]
        k, m0, t0, group_cap = key[first], mem[first], tok[first], cap[first]
        hi = lo + 1
        while hi < n and key[order[hi]] == k:
            i = order[hi]
            if mem[i] != m0 or (bound and tok[i] != t0):
                return None  # numpy refines such a key
            group_cap = min(group_cap, cap[i])
            hi += 1
        members: list[int] = []
        terms: list[float] = []
        for j in range(lo, hi):
            i = order[j]
            run_mem += mem[i]
            run_tok += tok[i]
            if j == lo:
                base_mem, base_tok = run_mem - mem[i], run_tok - tok[i]
            if j - lo < group_cap and run_mem - base_mem <= mem_gb and (not bound or run_tok - base_tok <= budget):
                members.append(i)
                terms.append(u[i])
            else:
                terms.append(u[i] * 0.0)
        value = _segment_sum(terms)
        if value != value:
            return None
        if best is None or value > best_value:  # argmax: the first of equal values
            best, best_value = members, value
        lo = hi
    return best


def _trim(f: _Few, chosen: list[int], forced: int) -> list[int]:
    """``knapsack._trim``: drop the least valuable unforced members while over budget."""
    threshold = f.res.starvation_threshold_s
    while len(chosen) > 1 and not f.within_budget(chosen):
        u = [_INF if forced and f.wait[i] > threshold else f.u[i] for i in chosen]
        finite = [x for x in u if math.isfinite(x)]
        drop = u.index(min(finite)) if finite else len(chosen) - 1
        chosen = chosen[:drop] + chosen[drop + 1:]
    return chosen


def _ride_along(f: _Few, chosen: list[int], pool: list[bool]) -> list[int]:
    """``knapsack._ride_along``: lost requests of the chosen key fill the slots and memory left."""
    if not chosen or not any(pool):
        return chosen
    key = f.key[chosen[0]]
    room = min(f.cap[i] for i in chosen) - len(chosen)
    extra = [i for i, p in enumerate(pool) if p and f.key[i] == key]
    if room <= 0 or not extra:
        return chosen
    used_mem = np_sum([f.mem[i] for i in chosen])
    used_tok = np_sum([f.tok[i] for i in chosen])
    out = list(chosen)
    mem_gb, budget = f.res.memory_gb, f.budget
    for i in sorted(extra, key=lambda i: -f.u[i]):
        if room == 0:
            break
        m, t = f.mem[i], f.tok[i]
        if used_mem + m <= mem_gb and used_tok + t <= budget and f.cap[i] > len(out):
            out.append(i)
            used_mem, used_tok, room = used_mem + m, used_tok + t, room - 1
    return out if f.within_budget(out) else chosen
