"""The seed design's three heuristics as policies, and ``static`` (a fixed, tuned action).

==================  =============================================================
``seed-memory``     memory-aware dynamic batch size, FIFO key choice, coalescing
``seed-priority``   weighted fair shares across classes, aging, quotas, load shift
``seed-composite``  both, with batch composition through the knapsack projection
``static``          ``ProjectedPolicy`` with a fixed action (``static:PATH.json``)
==================  =============================================================

Parameters live in ``SeedConfig`` (defaults: the seed design's numbers); a YAML file
of its fields (``agents/seed-heuristics.yaml``) is loaded when the policy spec names
one: ``seed-memory:agents/seed-heuristics.yaml``.

Design decisions the seed leaves open, decided here:

* **Key choice vs. head of line.** The head of the queue (seed-memory) or the
  request the shares select (seed-priority, seed-composite) chooses the key; the
  batch is then filled with requests of that key from anywhere in the queue,
  skipping incompatible ones (vLLM-Omni 0.30 stops at the first mismatch; the seed
  batches by memory, which only pays if the batch can be filled).
* **Memory.** Free memory is the GPU's minus ``memory_used_gb`` (weights, plus a
  running batch when the state reports one). If even one request does not fit
  within the margin it still runs alone: holding it would block its key forever.
* **Shares.** Stride scheduling over GPU-seconds: each class has a virtual time
  (work started for it ÷ its weight); the backlogged class with the smallest one
  goes next. Work is the standalone estimate (``remaining_s``; one step in step
  mode). A class that becomes backlogged starts no lower than the smallest virtual
  time of the classes that stayed backlogged (no credit for idling).
* **Aging.** Requests waiting longer than ``starvation_threshold_s`` form a tier
  served before every other request; within the tier the same shares apply, so the
  wait of every class stays bounded (each keeps at least ``min_resource_quota``).
* **Dynamic weights.** When the queued work exceeds ``high_load_s`` GPU-seconds,
  each class weight is multiplied by ``1 + load_shift × its share of the queued
  work`` (share moves toward the class with the most pending work), then floored
  at ``min_resource_quota`` and renormalised.
* **Cache-aware composition.** The simulator does not model prefix caching, so
  the prefix bonus changes only which requests share a batch, not its cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from rlsched.atomic import input_file
from rlsched.errors import ConfigError
from rlsched.policies.base import PolicySpec, no_options
from rlsched.projection import Items, Resources, project
from rlsched.sim.queue_index import QueueIndex, by_arrival, by_key
from rlsched.sim.request import PRIORITY_CLASSES, RequestRecord
from rlsched.sim.simulator import Decision
from rlsched.sim.view import QueueView
from rlsched.sim.yamlio import read_yaml


@dataclass(frozen=True)
class SeedConfig:
    """Knobs of the seed heuristics (the seed design's defaults)."""

    memory_safety_margin: float = 0.2
    """Fraction of free GPU memory kept in reserve."""
    memory_overhead_factor: float = 1.2
    """Per-request memory is multiplied by this (allocator slack, fragmentation)."""
    max_batch_size_per_modality: dict[str, int] = field(
        default_factory=lambda: {"image": 8, "video": 2, "audio": 16, "text": 16})
    """Upper batch-size cap per modality (also capped by the engine's max_num_seqs)."""
    batch_timeout_ms: float = 50.0
    """Request mode: wait up to this long after the batch's first request arrived, for a fuller batch."""
    priority_weights: dict[str, float] = field(
        default_factory=lambda: {"realtime": 0.6, "batch": 0.3, "background": 0.1})
    """Share of GPU-seconds per class."""
    starvation_threshold_s: float = 30.0
    """Requests waiting longer are promoted to the tier served first."""
    min_resource_quota: float = 0.05
    """Floor of every class's share after dynamic weighting."""
    high_load_s: float = 60.0
    """Queued standalone work (GPU-seconds) above which weights shift toward the backlog."""
    load_shift: float = 1.0
    """Strength of that shift (0: static weights)."""
    prefix_bonus: float = 0.5
    """seed-composite: extra utility factor for sharing the first request's prompt prefix."""

    def __post_init__(self) -> None:
        _check(0 <= self.memory_safety_margin < 1, "memory_safety_margin", "must be in [0, 1)")
        _check(self.memory_overhead_factor > 0, "memory_overhead_factor", "must be > 0")
        _check(self.batch_timeout_ms >= 0, "batch_timeout_ms", "must be >= 0")
        _check(self.starvation_threshold_s > 0, "starvation_threshold_s", "must be > 0")
        _check(0 <= self.min_resource_quota <= 1 / len(PRIORITY_CLASSES), "min_resource_quota",
               f"must be in [0, {1 / len(PRIORITY_CLASSES):.3f}]")
        _check(self.high_load_s >= 0 and self.load_shift >= 0 and self.prefix_bonus >= 0,
               "high_load_s/load_shift/prefix_bonus", "must be >= 0")
        _check(set(self.priority_weights) == set(PRIORITY_CLASSES)
               and all(w > 0 for w in self.priority_weights.values()),
               "priority_weights", f"needs a weight > 0 for each of {PRIORITY_CLASSES}")
        _check(all(isinstance(v, int) and v >= 1 for v in self.max_batch_size_per_modality.values()),
               "max_batch_size_per_modality", "caps must be integers >= 1")


def _check(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise ConfigError(f"seed config: {name}", why)


def load_seed_config(arg: str) -> SeedConfig:
    """Defaults for an empty ``arg``; else the YAML file it names (keys: ``SeedConfig`` fields)."""
    if not arg:
        return SeedConfig()
    path = input_file(arg, "seed-heuristics preset")
    data = read_yaml(path) or {}
    known = {f.name for f in fields(SeedConfig)}
    unknown = sorted(set(data) - known) if isinstance(data, dict) else ["<not a mapping>"]
    if unknown:
        raise ConfigError(str(path), f"unknown keys {unknown} (known: {sorted(known)})")
    try:
        return SeedConfig(**data)
    except ConfigError as exc:
        raise ConfigError(str(path), str(exc)) from None


# ------------------------------------------------------------------ shared parts


def memory_cap(state: QueueView, rec: RequestRecord, cfg: SeedConfig) -> int:
    """Batch size for ``rec``'s key: free × (1 − margin) / (mem × overhead), modality cap, max_num_seqs."""
    free = (state.cost.gpu_memory_gb - state.memory_used_gb) * (1 - cfg.memory_safety_margin)
    per_request = rec.mem_gb * cfg.memory_overhead_factor
    by_memory = int(free // per_request) if per_request > 0 else state.config.max_num_seqs
    return max(1, min(by_memory, modality_cap(state, rec, cfg)))


def modality_cap(state: QueueView, rec: RequestRecord, cfg: SeedConfig) -> int:
    top = state.config.max_num_seqs
    return max(1, min(top, cfg.max_batch_size_per_modality.get(rec.request.modality, top)))


def fill_key(anchor: RequestRecord, ordered: Iterable[RequestRecord], cap: int) -> tuple[int, ...]:
    """``anchor``, then requests of its key in the given order (skipping others), up to ``cap``."""
    out = [anchor.request.id]
    for rec in ordered:
        if len(out) >= cap:
            break
        if rec.key == anchor.key and rec is not anchor:
            out.append(rec.request.id)
    return tuple(out)


def coalesce(state: QueueView, batch: Sequence[int], cap: int, first_arrival_s: float,
             cfg: SeedConfig) -> Decision:
    """Run ``batch``, or (request mode, batch short of ``cap``) wait until the batch timeout."""
    until = first_arrival_s + cfg.batch_timeout_ms / 1e3
    if len(batch) < cap and not state.config.step_mode and state.now < until:
        return Decision((), wait_until=until)
    return Decision(tuple(batch))


# ------------------------------------------------------------------ seed-memory


class SeedMemory:
    """Memory-aware dynamic batch size; FIFO head chooses the key; batch timeout coalesces.

    Step mode: the running batch keeps going and same-key requests join it between
    steps, up to the memory cap (no preemption, as in vLLM-Omni).
    """

    name = "seed-memory"

    def __init__(self, config: SeedConfig | None = None) -> None:
        self.config = config or SeedConfig()

    def reset(self, state: QueueView) -> None:
        self.index = QueueIndex(by_key, by_arrival)  # same-key requests without scanning the queue

    def decide(self, state: QueueView) -> Decision:
        self.index.sync(state)
        if state.config.step_mode and state.running:
            anchor = state.running[0]
            cap = memory_cap(state, anchor, self.config)
            return Decision(fill_key(anchor, [*state.running, *self._same_key(anchor, cap)], cap))
        head = next(iter(state.waiting.values()))
        cap = memory_cap(state, head, self.config)
        batch = fill_key(head, self._same_key(head, cap), cap)
        return coalesce(state, batch, cap, head.request.arrival_s, self.config)

    def _same_key(self, anchor: RequestRecord, n: int) -> list[RequestRecord]:
        """The first ``n`` + 1 waiting requests of ``anchor``'s key, oldest first."""
        group = self.index.groups.get(anchor.key)
        return group.first(n + 1) if group is not None else []


# ------------------------------------------------------------------ seed-priority


class FairShare:
    """Stride scheduling of GPU-seconds across priority classes (see the module docstring)."""

    def __init__(self, config: SeedConfig) -> None:
        self.config = config
        self.virtual = dict.fromkeys(PRIORITY_CLASSES, 0.0)
        self._clock = 0.0
        """Smallest virtual time among classes backlogged at the last decision (never decreases)."""
        self._backlogged: set[str] = set()

    def weights(self, work: dict[str, float]) -> dict[str, float]:
        """Class shares now, given each class's queued standalone work: base weights, shifted
        toward the backlog under load, floored, normalised."""
        cfg = self.config
        w = dict(cfg.priority_weights)
        total = sum(work.values())
        if total > cfg.high_load_s and total > 0:
            w = {c: w[c] * (1 + cfg.load_shift * work[c] / total) for c in w}
        return _floor_normalise(w, cfg.min_resource_quota)

    def order(self, backlogged: set[str]) -> list[str]:
        """Backlogged classes, next to serve first (smallest virtual time, then class rank)."""
        self._activate(backlogged)
        return sorted(backlogged, key=lambda c: (self.virtual[c], PRIORITY_CLASSES.index(c)))

    def charge(self, recs: Iterable[RequestRecord], weights: dict[str, float], step_mode: bool) -> None:
        """Advance each class's virtual time by the work just started for it ÷ its weight."""
        for rec in recs:
            work = rec.step_s if step_mode else rec.remaining_s
            self.virtual[rec.request.tier] += work / weights[rec.request.tier]

    def _activate(self, backlogged: set[str]) -> None:
        """A class that (re)joins the backlog starts at the clock: idling earns no credit."""
        still = backlogged & self._backlogged
        if still:
            self._clock = max(self._clock, min(self.virtual[c] for c in still))
        for c in backlogged - self._backlogged:
            self.virtual[c] = max(self.virtual[c], self._clock)
        self._backlogged = set(backlogged)


def _floor_normalise(w: dict[str, float], quota: float) -> dict[str, float]:
    total = sum(w.values())
    w = {c: max(v / total, quota) for c, v in w.items()}
    total = sum(w.values())
    return {c: v / total for c, v in w.items()}


class SeedPriority:
    """Weighted fair shares across classes with aging, quotas and load-dependent weights.

    The next request is the oldest of the class the shares select, within the
    starving tier if it is non-empty; its key's batch is filled in the same order,
    up to the modality cap and max_num_seqs (no memory model: see seed-composite).
    Step mode: running requests compete with waiting ones at every step (preemptive).
    """

    name = "seed-priority"

    def __init__(self, config: SeedConfig | None = None) -> None:
        self.config = config or SeedConfig()
        self.shares = FairShare(self.config)

    def reset(self, state: QueueView) -> None:
        self.shares = FairShare(self.config)
        self.index = QueueIndex(_CLASS_KEY, by_arrival)

    def decide(self, state: QueueView) -> Decision:
        same, weights = self.ranked(state, lambda anchor: modality_cap(state, anchor, self.config))
        return self.commit(state, tuple(r.request.id for r in same), weights)

    def ranked(self, state: QueueView,
               depth: Callable[[RequestRecord], int]) -> tuple[list[RequestRecord], dict[str, float]]:
        """The anchor's key in service order (anchor first; starving tier first, classes by share,
        FIFO within), cut to ``depth(anchor)`` requests; and the class weights.

        Waiting requests live in a ``QueueIndex`` by (class, key) in arrival order, so the
        starving ones are a prefix of each group: a decision reads O(groups · depth) records."""
        self.index.sync(state)
        running = list(state.running) if state.config.step_mode else []
        work = dict.fromkeys(PRIORITY_CLASSES, 0.0)
        for (cls, _), group in self.index.groups.items():
            work[cls] += group.work_s
        for rec in running:
            work[rec.request.tier] += rec.remaining_s
        weights = self.shares.weights(work)
        backlogged = {c for c, _ in self.index.groups} | {r.request.tier for r in running}
        rank = {c: i for i, c in enumerate(self.shares.order(backlogged))}
        cutoff = state.now - self.config.starvation_threshold_s  # arrived before: starving

        def order(rec: RequestRecord) -> tuple[bool, int, float, int]:
            arrival = rec.request.arrival_s
            return (not arrival < cutoff, rank[rec.request.tier], arrival, rec.request.id)

        heads = [g.recs[0] for g in self.index.groups.values()] + running
        anchor = min(heads, key=order)
        n = depth(anchor)
        same = [r for r in running if r.key == anchor.key]
        for cls in PRIORITY_CLASSES:
            group = self.index.groups.get((cls, anchor.key))
            if group is not None:
                starving = group.bisect((cutoff,))
                same += group.first(min(starving, n)) + group.first(n, starving)
        same.sort(key=order)
        return same[:n], weights

    def commit(self, state: QueueView, batch: tuple[int, ...], weights: dict[str, float],
               decision: Decision | None = None) -> Decision:
        """Charge the batch to the shares unless the decision is to wait."""
        decision = decision or Decision(batch)
        if decision.batch:
            self.shares.charge(_records(state, decision.batch), weights, state.config.step_mode)
        return decision


def _CLASS_KEY(rec: RequestRecord) -> tuple[str, tuple]:
    return (rec.request.tier, rec.key)


def _records(state: QueueView, ids: Iterable[int]) -> list[RequestRecord]:
    running = {r.request.id: r for r in state.running}
    return [state.waiting.get(i) or running[i] for i in ids]


# ------------------------------------------------------------------ seed-composite


COMPOSE_DEPTH = 8
"""seed-composite composes from the first 8 x cap requests of the anchor's key in service
order (bounded work per decision; a deeper prefix-sharing match is rarely worth the scan)."""


class SeedComposite(SeedPriority):
    """Shares and aging choose the anchor; the projection composes its key's batch.

    Utility of a candidate of the anchor's key: its class share, × (1 + prefix_bonus)
    when it shares the anchor's prompt prefix (cache-aware). Memory: the seed's
    budget (free × (1 − margin)) against mem × overhead; caps: modality and
    max_num_seqs. The anchor is passed to the projection as the only starving
    request, so it is admitted first. Request mode: a short batch waits up to
    ``batch_timeout_ms`` after the anchor arrived.
    """

    name = "seed-composite"

    def decide(self, state: QueueView) -> Decision:
        same, weights = self.ranked(state, lambda a: COMPOSE_DEPTH * memory_cap(state, a, self.config))
        anchor = same[0]
        cap = memory_cap(state, anchor, self.config)
        chosen = project(self.items(same, weights, cap), self.resources(state))
        batch = tuple(same[i].request.id for i in chosen.tolist()) or (anchor.request.id,)
        full_at = cap if len(batch) == len(same) else len(batch)  # left some out: resources bind
        decision = coalesce(state, batch, full_at, anchor.request.arrival_s, self.config)
        return self.commit(state, batch, weights, decision)

    def items(self, same: Sequence[RequestRecord], weights: dict[str, float], cap: int) -> Items:
        """Candidates of one key (anchor first) as projection items."""
        n, prefix = len(same), same[0].request.prefix_id
        share = np.array([weights[r.request.tier] for r in same])
        cached = np.array([prefix >= 0 and r.request.prefix_id == prefix for r in same])
        wait = np.zeros(n)
        wait[0] = math.inf
        mem = np.array([r.mem_gb for r in same]) * self.config.memory_overhead_factor
        return Items(share * (1 + self.config.prefix_bonus * cached), mem, np.array([r.tokens for r in same]),
                     np.zeros(n, dtype=np.int64), np.full(n, cap), wait)

    def resources(self, state: QueueView) -> Resources:
        free = (state.cost.gpu_memory_gb - state.memory_used_gb) * (1 - self.config.memory_safety_margin)
        return Resources(free, starvation_threshold_s=self.config.starvation_threshold_s)


def seed_memory(spec: PolicySpec) -> SeedMemory:
    no_options(spec)
    return SeedMemory(load_seed_config(spec.arg))


def seed_priority(spec: PolicySpec) -> SeedPriority:
    no_options(spec)
    return SeedPriority(load_seed_config(spec.arg))


def seed_composite(spec: PolicySpec) -> SeedComposite:
    no_options(spec)
    return SeedComposite(load_seed_config(spec.arg))


__all__ = ["FairShare", "SeedComposite", "SeedConfig", "SeedMemory", "SeedPriority", "load_seed_config",
           "memory_cap"]
