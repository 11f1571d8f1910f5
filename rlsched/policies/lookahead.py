"""Candidate batches and a one-step look-ahead teacher over them (offline; slow by design).

At a decision point the ``static`` projection proposes one batch. ``candidate_batches``
adds the other feasible batches a scheduler could reasonably start now — the best
batch of each of the next most valuable keys, the proposal cut to its most valuable
request, the earliest-deadline and the shortest savable request's key — each one a
knapsack solution of the same projection, so every candidate is feasible.

``LookaheadPolicy`` tries each candidate on a fork of the simulator and lets the base
policy finish the fork; it starts the candidate whose fork meets the most
class-weighted SLOs. *Realizable*: the fork holds only the requests already queued or
running (what a scheduler knows). *Hindsight* (``future_s`` > 0): the fork also receives
the arrivals of the next ``future_s`` seconds (30 minutes for ``hindsight:``) — a
ceiling no online policy can reach. Both measure how
much choosing among feasible batches can gain over the base heuristic, the headroom a
learned policy can claim. Request mode only (in step mode every denoise step would be a
look-ahead); a step-mode simulator gets the base policy's decision.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rlsched.policies.base import register
from rlsched.policies.projected import ProjectedPolicy
from rlsched.projection import Items, Resources, project
from rlsched.sim.metrics import CLASS_WEIGHTS
from rlsched.sim.request import RequestRecord
from rlsched.sim.simulator import Decision, Simulator

NEXT_KEYS = 3
"""Keys besides the proposal's whose best batch becomes a candidate."""


def candidate_batches(policy: ProjectedPolicy, state: Simulator, proposal: tuple[int, ...],
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
    members = [i for i, rid in enumerate(ids.tolist()) if rid in proposal]
    if members and doubled:
        key = items.key_id[members[0]]
        top = min(state.config.max_num_seqs, 2 * int(items.cap[members[0]]))
        wide = replace(items, cap=np.where(items.key_id == key, top, items.cap))
        out.append(_key_batch(wide, res, ids, items.key_id == key, items.utility))
    if members:
        out.append((int(ids[max(members, key=lambda i: items.utility[i])]),))
    savable = ~items.lost
    if savable.any():
        for rank in (np.array([r.deadline_s for r in recs]), np.array([r.remaining_s for r in recs])):
            first = int(np.where(savable, rank, np.inf).argmin())
            prefer = np.max(rank[np.isfinite(rank)], initial=0.0) + 1.0 - np.where(np.isfinite(rank), rank, 0.0)
            out.append(_key_batch(items, res, ids, items.key_id == items.key_id[first], prefer))
    best_per_key = {int(k): float(items.utility[items.key_id == k].max()) for k in np.unique(items.key_id)}
    for key in sorted(best_per_key, key=best_per_key.__getitem__, reverse=True)[:NEXT_KEYS + 1]:
        out.append(_key_batch(items, res, ids, items.key_id == key, items.utility))
    return list(dict.fromkeys(tuple(sorted(b)) for b in out if b))


def _key_batch(items: Items, res: Resources, ids: np.ndarray, mask: np.ndarray,
               utility: np.ndarray) -> tuple[int, ...]:
    """The projection's batch among the ``mask`` requests, valued by ``utility``."""
    sub = np.flatnonzero(mask)
    view = Items(utility[sub], items.mem_gb[sub], items.tokens_m[sub], items.key_id[sub], items.cap[sub],
                 items.wait_s[sub], None if items.lost is None else items.lost[sub])
    return tuple(int(ids[sub[i]]) for i in project(view, res).tolist())


class LookaheadPolicy:
    """Start the candidate batch whose simulated future meets the most class-weighted SLOs."""

    name = "lookahead"

    def __init__(self, base: ProjectedPolicy, future_s: float = 0.0) -> None:
        self.base, self.future_s = base, future_s
        self.looked = 0
        """Decisions at which more than one candidate was simulated."""
        self.changed = 0
        """Decisions at which the teacher started something other than the base's proposal."""

    def reset(self, state: Simulator) -> None:
        self.base.reset(state)

    def decide(self, state: Simulator) -> Decision:
        decision = self.base.decide(state)
        if state.config.step_mode or not decision.batch:
            return decision
        batches = [b for b in candidate_batches(self.base, state, decision.batch) if fits(state, b)]
        if len(batches) < 2:
            return decision
        self.looked += 1
        scores = [self._score(state, b) for b in batches]
        best = batches[int(np.argmax(scores))]  # ties: the first, the base's proposal
        if best != tuple(sorted(decision.batch)):
            self.changed += 1
            return Decision(best)
        return decision

    def _score(self, state: Simulator, batch: tuple[int, ...]) -> float:
        return rollout_value(state, batch, self.base, self.future_s)


def rollout_value(state: Simulator, batch: tuple[int, ...], base: ProjectedPolicy, future_s: float) -> float:
    """Class-weighted SLOs met when ``batch`` starts now and ``base`` runs the rest on a fork
    (present requests; with ``future_s`` > 0 also the arrivals of the next ``future_s`` s)."""
    fork = state.fork(future_s)
    present = set(fork.records)
    fork.apply(Decision(batch))
    fork.run(ProjectedPolicy(base.params, base.config))
    return sum(CLASS_WEIGHTS[r.request.priority] for r in fork.records.values()
               if r.slo_met and (future_s > 0 or r.request.id in present))


def fits(state: Simulator, batch: tuple[int, ...]) -> bool:
    recs: list[RequestRecord] = [state.waiting[i] for i in batch if i in state.waiting]
    return len(recs) == len(batch) and len(batch) <= state.config.max_num_seqs and \
        state.cost.batch_memory_gb(recs) <= state.cost.gpu_memory_gb


HINDSIGHT_S = 1800.0
"""How far ``hindsight:`` sees into the future."""


def _lookahead(spec: str, future_s: float) -> LookaheadPolicy:
    from rlsched.policies.seed import load_static

    policy = LookaheadPolicy(load_static(spec), future_s)
    policy.name = f"{'hindsight' if future_s else 'lookahead'}:{spec}"
    return policy


register("lookahead")(lambda arg: _lookahead(arg, 0.0))
register("hindsight")(lambda arg: _lookahead(arg, HINDSIGHT_S))

__all__ = ["LookaheadPolicy", "candidate_batches", "fits", "rollout_value"]
