"""Candidate batches: the feasible batches a scheduler could reasonably start now.

At a decision point the ``static`` projection proposes one batch. ``candidate_batches``
adds the other feasible batches — the best batch of each of the next most valuable
keys, the proposal cut to its most valuable request, the earliest-deadline and the
shortest savable request's key — each one a knapsack solution of the same projection,
so every candidate is feasible. Used while serving (the ``pick`` policy scores them) and
offline (the look-ahead teachers simulate each).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rlsched.policies.projected import ProjectedPolicy
from rlsched.projection import Items, Resources, project, takes_all
from rlsched.projection.few import np_maximum
from rlsched.projection.knapsack import fitting
from rlsched.sim.view import QueueView, batch_problem

NEXT_KEYS = 3
"""Keys besides the proposal's whose best batch becomes a candidate."""


def candidate_batches(policy: ProjectedPolicy, state: QueueView, proposal: tuple[int, ...],
                      doubled: bool = False) -> list[tuple[int, ...]]:
    """Feasible batches to choose from now, ``proposal`` (the policy's own) first, no duplicates:
    the proposal with a doubled cap (``doubled``) and cut to its most valuable request, the key
    batches of the earliest-deadline and the shortest savable request, then the best batch of
    each of the most valuable keys."""
    recs, _ = policy.candidates(state)
    out: list[tuple[int, ...]] = [proposal] if proposal else []
    if len(recs) < 2:
        return out
    items = policy.items(state, recs)
    res = replace(policy.resources(state), starvation_threshold_s=math.inf, lost_starvation_threshold_s=math.inf)
    ids = np.fromiter((r.request.id for r in recs), np.int64, len(recs))
    fit = fitting(items, res)  # the projection's own test, for the key batches of one request
    members = [i for i, rid in enumerate(ids.tolist()) if rid in proposal]
    if members and doubled:
        key = items.key_id[members[0]]
        top = min(state.config.max_num_seqs, 2 * int(items.cap[members[0]]))
        wide = replace(items, cap=np.where(items.key_id == key, top, items.cap))
        out.append(_key_batch(wide, res, ids, items.key_id == key, items.utility, fit))
    if members:
        out.append((int(ids[max(members, key=lambda i: items.utility[i])]),))
    savable = ~items.lost
    if savable.any():
        for rank in (np.array([r.deadline_s for r in recs]), np.array([r.remaining_s for r in recs])):
            first = int(np.where(savable, rank, np.inf).argmin())
            prefer = np.max(rank[np.isfinite(rank)], initial=0.0) + 1.0 - np.where(np.isfinite(rank), rank, 0.0)
            out.append(_key_batch(items, res, ids, items.key_id == items.key_id[first], prefer, fit))
    # sorted(set(...)) is np.unique's order; np.unique imports numpy.ma at its first call (~80 ms,
    # inside the engine's first pick decision: a budget fallback)
    best_per_key: dict[int, float] = {}
    for k, u in zip(items.key_id.tolist(), items.utility.tolist(), strict=True):  # a key's np.max
        best_per_key[k] = np_maximum(best_per_key.get(k, u), u)
    for key in sorted(sorted(best_per_key), key=best_per_key.__getitem__, reverse=True)[:NEXT_KEYS + 1]:
        out.append(_key_batch(items, res, ids, items.key_id == key, items.utility, fit))
    return list(dict.fromkeys(tuple(sorted(b)) for b in out if b))


def _key_batch(items: Items, res: Resources, ids: np.ndarray, mask: np.ndarray,
               utility: np.ndarray, fit: np.ndarray) -> tuple[int, ...]:
    """The projection's batch among the ``mask`` requests, valued by ``utility``, as a set (in no
    particular order: ``candidate_batches`` sorts every batch); ``fit``: ``fitting(items, res)``."""
    sub = np.flatnonzero(mask)
    if sub.size == 1:  # the projection of one request: it, if it fits alone
        i = int(sub[0])
        return (int(ids[i]),) if fit[i] else ()
    view = Items(utility[sub], items.mem_gb[sub], items.tokens_m[sub], items.key_id[sub], items.cap[sub],
                 items.wait_s[sub], None if items.lost is None else items.lost[sub])
    if takes_all(view, res):  # the projection would take them all: skip its numpy work
        return tuple(ids[sub].tolist())
    return tuple(int(ids[sub[i]]) for i in project(view, res).tolist())


def fits(state: QueueView, batch: tuple[int, ...]) -> bool:
    """Request mode: ``batch`` is a valid batch of waiting requests that fits the GPU's memory."""
    if batch_problem(state, batch) is not None or not all(i in state.waiting for i in batch):
        return False
    return state.cost.fits([state.waiting[i] for i in batch])



__all__ = ["NEXT_KEYS", "candidate_batches", "fits"]
