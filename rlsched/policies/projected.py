"""Parameterised policy: action vector → utilities → projection → Decision.

The same mapping serves the RL policy (a network emits the action each decision),
the ``static`` policy (a fixed, tuned action) and the Gymnasium environment.

Action (``ACTION_DIM`` = 9 floats in [-1, 1]):

==========  =====================================  ===========================
index       meaning                                decoded to
==========  =====================================  ===========================
0..2        priority logit per class               class weight = softmax(2·a)
            (realtime, batch, background)
3..6        batch-cap fraction per modality        cap = max(1, round(f·key's batching cap))
            (image, video, audio, text)            with f = (a+1)/2 (see ``batching_cap``)
7           admission-wait fraction                wait ≤ f·batch_timeout_ms for a fuller batch
8           urgency exponent                       α = 2·(a+1) ∈ [0, 4]
==========  =====================================  ===========================

Utility of starting request i now: ``w_class · pressure^α / remaining_s`` where
``pressure = remaining_s / (deadline − now)`` (share of its time budget the
request still needs). α = 0 is weighted shortest-job-first; large α focuses on
requests about to miss. Requests that can no longer meet their SLO (lost) keep
``late_value`` of their utility; the projection serves savable requests first and
lost ones only in free slots of the chosen batch or when no savable request fits
(``ProjectionConfig`` holds the knobs every projection policy shares).

The key's batching cap comes from the cost model: the largest batch in which each
added request costs at most ``batch_marginal_cost`` × its standalone time (Qwen-Image on
an H200: 2, 3, 4 images of 512×512 cost 1.02, 1.09, 1.39× one, so up to 3 batch at the
default 0.25; two 1024×1024 cost 1.87× one, so they run alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TypeGuard

import numpy as np

from rlsched.errors import ConfigError
from rlsched.policies.table import RecordTable, Rows
from rlsched.projection import Items, Resources, project
from rlsched.projection.few import np_maximum, np_minimum
from rlsched.sim.cost import CostModel
from rlsched.sim.queue_index import Group, QueueIndex
from rlsched.sim.request import CLASS_INDEX, MODALITIES, MODALITY_INDEX, PRIORITY_CLASSES, RUNNING, RequestRecord
from rlsched.sim.simulator import Decision
from rlsched.sim.view import QueueView

ACTION_DIM = len(PRIORITY_CLASSES) + len(MODALITIES) + 2


@dataclass(frozen=True)
class ProjectionConfig:
    """Fixed knobs of the projection, shared by every projection policy (``static``, ``rl``)
    so that two of them differ only by their actions."""

    memory_safety_margin: float = 0.2
    """Fraction of free GPU memory kept in reserve."""
    batch_timeout_ms: float = 50.0
    """Longest admission wait a policy may choose to coalesce a batch."""
    starvation_threshold_s: float = 30.0
    """A savable request waiting longer than its threshold, max(this, ``starvation_slo_multiple``
    × its SLO), is admitted first (bounded starvation)."""
    starvation_slo_multiple: float = 1.0
    """Scale-aware threshold: a 30-minute video must not starve images, nor the reverse. At 1
    a request's threshold is at least its SLO, so urgency (the utility) orders savable requests
    and the bound acts on requests with SLOs shorter than the threshold; below 1 savable
    requests are pinned before their deadline (measured on training seeds: 0.5 costs video-mix
    at load x1.5 14 points, because a starving 30-minute video then blocks every image)."""
    lost_starvation_multiple: float = math.inf
    """A lost request (one that can no longer meet its SLO) waiting longer than this × its
    threshold is admitted first even over savable ones: a hard bound on every wait, paid for
    with savable requests under overload (training seeds, default scenario, load x1.5: 66 %
    with inf, 19 % with 10, 9 % with 3). inf: lost requests run when no savable one fits."""
    shed_lost: bool = False
    """Reject lost requests instead of serving them late (``rejected``, reason ``lost``)."""
    max_batch_size_per_modality: dict[str, int] = field(
        default_factory=lambda: {"image": 8, "video": 2, "audio": 16, "text": 16})
    """Upper batch-size cap per modality (also capped by max_num_seqs)."""
    batch_marginal_cost: float = 0.25
    """Per-key cap from the cost model: a batch grows while one more request adds at most
    this fraction of its standalone time (small images batch almost free; large ones do not)."""
    late_value: float = 0.05
    """Utility factor kept by a lost request (it still fills free batch slots)."""
    running_bonus: float = 1.5
    """Step mode: utility factor of running requests (avoids thrashing preemptions)."""

    def __post_init__(self) -> None:
        """The one set of range rules, used by the CLI's overrides, configs and checkpoints alike:
        every number finite (but ``_MAY_BE_INFINITE``) and in its range, a field added later included."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "max_batch_size_per_modality":
                _check_caps(value)
            elif f.name == "shed_lost":
                if not isinstance(value, bool):
                    raise ConfigError("projection.shed_lost", f"{value!r} must be true or false")
            elif _real(value) or f.name in _RANGES:
                ok, text = _RANGES.get(f.name, (_any, "finite"))
                if not _real(value) or not (math.isfinite(value) or (f.name in _MAY_BE_INFINITE and value > 0)) \
                        or not ok(value):
                    raise ConfigError(f"projection.{f.name}", f"{value!r} must be {text}")


def _any(value: float) -> bool:
    return True


_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "memory_safety_margin": (lambda x: 0 <= x < 1, "in [0, 1)"),
    "batch_timeout_ms": (lambda x: x >= 0, "finite and >= 0"),
    "starvation_threshold_s": (lambda x: x >= 0, "finite and >= 0"),
    "starvation_slo_multiple": (lambda x: x >= 0, "finite and >= 0"),
    "lost_starvation_multiple": (lambda x: x >= 0, ">= 0 (inf: no hard bound)"),
    "batch_marginal_cost": (lambda x: x >= 0, "finite and >= 0"),
    "late_value": (lambda x: 0 <= x <= 1, "in [0, 1]"),
    "running_bonus": (lambda x: x > 0, "finite and > 0"),
}
"""Range of every numeric ``ProjectionConfig`` field (all finite but those in ``_MAY_BE_INFINITE``)."""
_MAY_BE_INFINITE = frozenset({"lost_starvation_multiple"})
"""Settings whose infinity means "off"."""


def _real(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_caps(caps: object) -> None:
    if not isinstance(caps, dict):
        raise ConfigError("projection.max_batch_size_per_modality", f"{caps!r} must be a mapping")
    for modality, cap in caps.items():
        if not _real(cap) or not math.isfinite(cap) or cap < 1 or cap != int(cap):
            raise ConfigError(f"projection.max_batch_size_per_modality.{modality}", f"{cap!r} must be an integer >= 1")


def with_overrides(options: Mapping[str, str], base: ProjectionConfig | None = None) -> ProjectionConfig:
    """``base`` with the ``ProjectionConfig`` numbers or booleans named in ``options`` (a policy
    spec's ``;name=value`` pairs, e.g. ``static:t.json;shed_lost=true``) replaced."""
    kinds = {f.name: f.type for f in fields(ProjectionConfig)}
    changes: dict[str, object] = {}
    for name, value in options.items():
        text = value.strip().lower()
        if kinds.get(name) not in ("bool", "float"):
            known = sorted(k for k, t in kinds.items() if t in ("bool", "float"))
            raise ConfigError(f"policy option {name!r}", f"not a projection setting (known: {', '.join(known)})")
        try:
            changes[name] = {"true": True, "false": False}[text] if kinds[name] == "bool" else float(text)
        except (KeyError, ValueError):
            raise ConfigError(f"policy option {name}", f"{text!r} is not a {kinds[name]}") from None
    return replace(base or ProjectionConfig(), **changes)


@dataclass(frozen=True)
class ActionParams:
    """A decoded action."""

    class_weights: tuple[float, float, float] = (0.6, 0.3, 0.1)
    cap_frac: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    wait_frac: float = 0.0
    urgency_exp: float = 1.0


def decode_action(a: np.ndarray) -> ActionParams:
    """Map an action in [-1, 1]^ACTION_DIM to ``ActionParams`` (see module docstring)."""
    # in Python floats but the exponential (numpy's own): a decision's nine numbers cost numpy's
    # per-call overhead, not arithmetic; the same values as clip(nan_to_num(a)) and softmax in numpy
    v = [min(max(x, -1.0), 1.0) if x == x else 0.0 for x in np.asarray(a, dtype=np.float64).tolist()]
    logits = [2.0 * x for x in v[:3]]
    top = max(logits)
    e = np.exp(np.array([x - top for x in logits])).tolist()
    total = (e[0] + e[1]) + e[2]  # numpy's order for three terms
    w = (e[0] / total, e[1] / total, e[2] / total)
    return ActionParams(w, tuple((x + 1.0) / 2.0 for x in v[3:7]), (v[7] + 1) / 2, 2 * (v[8] + 1))


def encode_params(p: ActionParams) -> np.ndarray:
    """Inverse of ``decode_action`` (class weights up to softmax shift)."""
    logits = np.log(np.maximum(np.asarray(p.class_weights), 1e-9)) / 2.0
    logits -= logits.max()
    logits = np.clip(logits - logits.mean(), -1, 1)
    return np.concatenate([logits, 2 * np.asarray(p.cap_frac) - 1, [2 * p.wait_frac - 1, p.urgency_exp / 2 - 1]])


_PARTIAL = ("partial",)
"""Index group of preempted requests: their remaining time differs from a fresh request's."""


def _group(rec: RequestRecord) -> tuple:
    """(key, class, standalone work): within a group the lost requests are a deadline prefix."""
    if rec.steps_done:
        return _PARTIAL
    return (rec.key, CLASS_INDEX[rec.request.tier], rec.work_s)


def _head(item: tuple[tuple, Group]) -> tuple:
    return item[1].keys[0]


def _by_deadline(rec: RequestRecord) -> tuple[float, float]:
    return (rec.deadline_s, rec.request.arrival_s)


def batching_cap(cost: CostModel, rec: RequestRecord, limit: int, marginal: float, step_mode: bool) -> int:
    """Largest batch of ``rec``'s key, up to ``limit``, in which each added request costs at most
    ``marginal`` × one request's standalone time (wave time in request mode, step time in step mode)."""
    def wave(b: int) -> float:
        batch = [rec] * b
        return cost.batch_step_time(batch) if step_mode else cost.batch_duration(batch)

    one, b = wave(1), 1
    while b < limit and wave(b + 1) - wave(b) <= marginal * one:
        b += 1
    return b


class ProjectedPolicy:
    """Utilities from ``ActionParams``; batch from the knapsack projection.

    Candidates come from a ``QueueIndex`` grouped by (key, class, standalone work) and
    sorted by deadline, so the requests that can no longer meet their SLO (lost) are a
    prefix of each group, found by bisection. Per group the projection sees the first
    ``cap`` lost and the first ``cap`` savable requests (the most urgent of each, and the
    only ones the best batch of that key can hold), every preempted request and, in
    step mode, the running ones: a decision costs O(groups · cap + log n), not O(n).

    Semantics that degrade gracefully under overload (see ``rlsched.projection.project``):
    savable requests come first and a lost request never displaces a savable one; a
    savable request waiting past its threshold pins the batch; lost requests fill free
    slots of the chosen batch and run when no savable request fits (or are rejected with
    ``shed_lost``).
    """

    name = "projected"

    def __init__(self, params: ActionParams | None = None, config: ProjectionConfig | None = None) -> None:
        self.params = params or ActionParams()
        self.config = config or ProjectionConfig()
        self.table = RecordTable()
        self.index = QueueIndex(_group, _by_deadline)
        self._caps: dict[tuple, int] = {}
        self._caps_cost: object = None
        """The cost model ``_caps`` were computed on."""
        self._candidates: tuple[object, tuple[list[RequestRecord], list[RequestRecord]]] = (None, ([], []))
        self._items_of: tuple[object, Items | None] = (None, None)
        """The last request-mode ``Items`` and what they were built from: ``pick`` asks twice per
        decision (the proposal, then its candidate batches), as the encoder and the decision share rows."""
        self._resources: tuple[object, Resources] = (None, Resources(0.0))

    def reset(self, state: QueueView) -> None:
        if self.config.shed_lost and not state.can_reject:
            raise ConfigError("projection.shed_lost", "this engine cannot reject requests (the simulator can; "
                              "the vLLM-Omni plugin serves lost requests late instead)")
        self.index = QueueIndex(_group, _by_deadline)
        self._caps = {}
        self._candidates = (None, ([], []))
        self._items_of = (None, None)

    def set_action(self, action: np.ndarray) -> None:
        self.params = decode_action(action)

    def decide(self, state: QueueView) -> Decision:
        recs, lost = self.candidates(state)
        decision = self._choose(state, recs) if recs else Decision()
        if lost and not decision.reject:  # a cannot_fit rejection goes first; the lost ones at the next decision
            return Decision(decision.batch, decision.wait_until, tuple(r.request.id for r in lost), "lost")
        return decision

    def _choose(self, state: QueueView, recs: list[RequestRecord]) -> Decision:
        if len(recs) == 1:
            return self._decide_alone(state, recs[0])
        items = self._items(state, recs, self._running_mask(state, len(recs)))
        chosen = project(items, self.resources(state))
        if chosen.size == 0:
            return self._fallback(state, recs)
        picked = [recs[i] for i in chosen.tolist()]
        return self._maybe_wait(state, picked, int(items.cap[chosen[0]])) or Decision(
            tuple(r.request.id for r in picked))

    # ------------------------------------------------------------- internals
    def candidates(self, state: QueueView) -> tuple[list[RequestRecord], list[RequestRecord]]:
        """The requests the projection considers (see the class docstring), and the lost
        waiting requests to reject now (``shed_lost``; empty otherwise).

        Per group the first ``base_cap`` (the action-free cap) are taken, so the candidates do
        not depend on the action and one call serves the observation and the decision."""
        # the running batch is part of the candidates in step mode: a finish that moves neither
        # the clock nor the queue (an engine clock that stood still) must not serve a stale list
        stamp = (state, state.now, state.journal.end, tuple(map(id, state.running)))
        if self._candidates[0] == stamp:
            return self._candidates[1]
        self.index.sync(state)
        now, shed = state.now, self.config.shed_lost
        out: list[RequestRecord] = []
        lost: list[RequestRecord] = []
        # groups in the order of their heads (deadline, arrival, id): the same candidates in the
        # same order whatever the history of the index (replayed, or rebuilt after a trim)
        for name, group in sorted(self.index.groups.items(), key=_head):
            if name is _PARTIAL:  # few: preempted requests, each checked on its own
                partial = list(group.recs)
                if shed:
                    lost += (r for r in partial if _late(r, now))
                    partial = [r for r in partial if not _late(r, now)]
                out += partial
                continue
            n = self.base_cap(state, group.recs[0])
            b = group.bisect((now + name[2],))
            if shed:
                lost += group.first(b)
            else:
                out += group.first(min(b, n))
            out += group.first(n, b)
        if state.config.step_mode:
            out += state.running
        self._candidates = (stamp, (out, lost))
        return out, lost

    def base_cap(self, state: QueueView, rec: RequestRecord) -> int:
        """The cost model's batching cap of ``rec``'s key (``batching_cap``), before the action."""
        if state.cost is not self._caps_cost:  # a new calibration (rlsched.sim.online): caps afresh
            self._caps, self._caps_cost = {}, state.cost
        base = self._caps.get(rec.key)
        if base is None:
            top = state.config.max_num_seqs
            limit = max(1, min(top, self.config.max_batch_size_per_modality.get(rec.request.modality, top)))
            base = self._caps[rec.key] = batching_cap(state.cost, rec, limit, self.config.batch_marginal_cost,
                                                      state.config.step_mode)
        return base

    def key_cap(self, state: QueueView, rec: RequestRecord) -> int:
        """Batch cap of ``rec``'s key: the batching cap scaled by the action's cap fraction."""
        return max(1, round(self.params.cap_frac[MODALITY_INDEX[rec.request.modality]] * self.base_cap(state, rec)))

    def queue_summary(self, state: QueueView) -> list[tuple[RequestRecord, int, float]]:
        """Per index group: a representative record, the group's size and its total remaining
        standalone work — what the observation needs about the whole queue, in O(groups)."""
        self.index.sync(state)
        out = []
        for name, group in self.index.groups.items():
            if name is _PARTIAL:
                out += [(r, 1, r.remaining_s) for r in group.recs]
            else:
                out.append((group.recs[0], len(group), len(group) * name[2]))
        return out

    def resources(self, state: QueueView) -> Resources:
        cost, cfg = state.cost, self.config
        if self._resources[0] is not cost:  # CostModel.weights_gb sums every model: once per profile
            free = (cost.gpu_memory_gb - cost.weights_gb) * (1 - cfg.memory_safety_margin)
            threshold = cfg.starvation_threshold_s
            self._resources = (cost, Resources(free, starvation_threshold_s=threshold,
                                               lost_starvation_threshold_s=threshold * cfg.lost_starvation_multiple))
        return self._resources[1]

    def items(self, state: QueueView, recs: list[RequestRecord]) -> Items:
        """What the projection sees for the candidates ``recs``."""
        running = None
        if state.config.step_mode:
            running = np.fromiter([r.status == RUNNING for r in recs], bool, len(recs))
        return self._items(state, recs, running)

    def _items(self, state: QueueView, recs: list[RequestRecord], running: np.ndarray | None) -> Items:
        # request mode, the cached candidate list, the same action: the same Items (nothing they read
        # changes while the candidates' stamp holds: no waiting request has made progress)
        made_of = (self._candidates[0], state, state.now, self.params) \
            if running is None and recs is self._candidates[1][0] else None
        made, cached = self._items_of
        if made_of is not None and made == made_of and cached is not None:  # cached: set with made, never None
            return cached
        items = self._build_items(state, recs, running)
        if made_of is not None:
            self._items_of = (made_of, items)
        return items

    def _build_items(self, state: QueueView, recs: list[RequestRecord], running: np.ndarray | None) -> Items:
        """The candidates' ``Items``. A decision has a few candidates: the arithmetic runs on Python
        floats (the same IEEE operations in the same order as the numpy formulas it replaced, with
        numpy's NaN rules), the urgency power as one ``ndarray ** exp`` (numpy's own scalar-power
        paths, not ``math.pow``); ``tests/policies/test_items_formulas.py`` holds it to them."""
        now = state.now
        rows = self.table.gather(recs)
        remaining = rows.remaining_s(recs, state.config.step_mode)
        deadline = rows.deadline_s.tolist()
        time_left = [d - now for d in deadline]
        util = self.utility(rows.cls.tolist(), remaining, time_left)
        if running is not None:
            bonus = float(self.config.running_bonus)
            util = [u * bonus if run else u for u, run in zip(util, running.tolist(), strict=True)]
        return Items(np.array(util, dtype=np.float64), rows.mem_gb, rows.tokens, _first_seen_order(rows.key_id),
                     self._key_caps(state, recs, rows), self._wait(rows.arrival_s.tolist(), deadline, now),
                     lost=np.array([r > t for r, t in zip(remaining, time_left, strict=True)], dtype=bool))

    def _key_caps(self, state: QueueView, recs: list[RequestRecord], rows: Rows) -> np.ndarray:
        """``key_cap`` of every candidate, computed once per (key, modality) of the decision."""
        memo: dict[tuple[int, int], int] = {}
        caps = [memo[k] if k in memo else memo.setdefault(k, self.key_cap(state, r))
                for k, r in zip(zip(rows.key_id.tolist(), rows.modality.tolist()), recs)]
        return np.array(caps, dtype=np.int64)

    def _wait(self, arrival: list[float], deadline: list[float], now: float) -> np.ndarray:
        """Waits as the projection's starvation test should see them.

        With ``starvation_slo_multiple`` each wait is rescaled so that exceeding the
        common threshold means exceeding the request's own, max(threshold, m × SLO).
        """
        wait = [now - a for a in arrival]
        m = float(self.config.starvation_slo_multiple)
        if m > 0:
            base = float(self.config.starvation_threshold_s)
            own = [np_maximum(base, m * (d - a)) for d, a in zip(deadline, arrival, strict=True)]
            wait = [w * (base / np_maximum(o, 1e-12)) if math.isfinite(o) and o > 0 else w
                    for w, o in zip(wait, own, strict=True)]
        return np.array(wait, dtype=np.float64)

    def utility(self, cls: list[int], remaining: list[float], time_left: list[float]) -> list[float]:
        """Each candidate's value of starting now per second of its work:
        ``w_class · min(pressure, 1)^α / remaining`` (``late_value`` in place of the power when late)."""
        # as Python floats: a numpy scalar among them would make the arithmetic below its own dtype
        weights, late_value = tuple(map(float, self.params.class_weights)), float(self.config.late_value)
        pressure = [r / np_maximum(t, 1e-3) for r, t in zip(remaining, time_left, strict=True)]
        # the power over every candidate as one array, as the numpy formula computed it (late ones unused)
        powered = (np.array([np_minimum(p, 1.0) for p in pressure]) ** self.params.urgency_exp).tolist()
        return [weights[c] * (late_value if t <= 0 or p > 1.0 else v) / np_maximum(r, 1e-3)
                for c, r, t, p, v in zip(cls, remaining, time_left, pressure, powered, strict=True)]

    @staticmethod
    def _running_mask(state: QueueView, n: int) -> np.ndarray | None:
        """Step mode: candidates end with the running requests."""
        if not state.config.step_mode:
            return None
        mask = np.zeros(n, dtype=bool)
        mask[n - len(state.running):] = True
        return mask

    def _decide_alone(self, state: QueueView, rec: RequestRecord) -> Decision:
        """One candidate: the projection starts it or nothing (and then the fallback starts
        it), so only the admission wait is left to decide — without building ``Items``."""
        alone = Decision((rec.request.id,))
        if rec.mem_gb > self.resources(state).memory_gb:  # the projection's fit test; fallback
            return self._fallback(state, [rec])
        return self._maybe_wait(state, [rec], self.key_cap(state, rec)) or alone

    def _maybe_wait(self, state: QueueView, picked: list[RequestRecord], cap: int) -> Decision | None:
        wait_s = self.params.wait_frac * self.config.batch_timeout_ms / 1e3
        if wait_s <= 0 or state.config.step_mode or len(picked) >= cap:
            return None
        oldest = min(r.request.arrival_s for r in picked)
        until = oldest + wait_s  # bounded: at most batch_timeout_ms after the oldest
        return Decision((), wait_until=until) if state.now < until else None

    @staticmethod
    def _fallback(state: QueueView, recs: list[RequestRecord]) -> Decision:
        """Nothing fits within the safety margin: run the oldest that fits the GPU at all alone
        (vLLM-Omni would run the oldest). A request no GPU of this profile can hold is never
        started while another can run; it is rejected (``cannot_fit``) where the state can
        reject, else started last — the engine fails it, as vLLM-Omni would."""
        can_run = [r for r in recs if state.cost.fits([r])]
        if can_run:
            return Decision((min(can_run, key=_arrival).request.id,))
        if state.can_reject:
            return Decision(reject=tuple(r.request.id for r in recs if r.request.id in state.waiting),
                            reason="cannot_fit")
        return Decision((min(recs, key=_arrival).request.id,))


def _arrival(rec: RequestRecord) -> float:
    return rec.request.arrival_s


def _late(rec: RequestRecord, now: float) -> bool:
    """Can no longer meet its SLO, even started alone now."""
    return rec.deadline_s - now < rec.remaining_s


def _first_seen_order(key_id: np.ndarray) -> np.ndarray:
    """Renumber ids 0, 1, … in order of first appearance (the projection breaks ties by id).
    In Python: over a decision's few candidates a dict is ~3x faster than ``np.minimum.at``."""
    n = key_id.size
    if n < 2:
        return np.zeros_like(key_id)
    keys = key_id.tolist()
    rank = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    return np.fromiter(map(rank.__getitem__, keys), np.int64, n)


__all__ = ["ACTION_DIM", "ActionParams", "ProjectedPolicy", "ProjectionConfig", "batching_cap", "decode_action",
           "encode_params", "with_overrides"]
