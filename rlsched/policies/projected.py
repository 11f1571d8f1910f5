"""Parameterised policy: action vector → utilities → projection → Decision.

The same mapping serves the RL policy (a network emits the action each decision),
the ``static`` policy (a fixed, tuned action) and the Gymnasium environment.

Action (``ACTION_DIM`` = 9 floats in [-1, 1]):

==========  =====================================  ===========================
index       meaning                                decoded to
==========  =====================================  ===========================
0..2        priority logit per class               class weight = softmax(2·a)
            (realtime, batch, background)
3..6        batch-cap fraction per modality        cap = max(1, round(f·max_batch_size_per_modality))
            (image, video, audio, text)            with f = (a+1)/2
7           admission-wait fraction                wait ≤ f·batch_timeout_ms for a fuller batch
8           urgency exponent                       α = 2·(a+1) ∈ [0, 4]
==========  =====================================  ===========================

Utility of starting request i now: ``w_class · pressure^α / remaining_s`` where
``pressure = remaining_s / (deadline − now)`` (share of its time budget the
request still needs). α = 0 is weighted shortest-job-first; large α focuses on
requests about to miss. Requests that can no longer meet their SLO keep
``late_value`` of their utility (served when nothing better waits; starvation
threshold bounds their wait).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlsched.projection import Items, Resources, project
from rlsched.sim.request import CLASS_INDEX, MODALITIES, MODALITY_INDEX, PRIORITY_CLASSES, RequestRecord
from rlsched.sim.simulator import Decision, Simulator

ACTION_DIM = len(PRIORITY_CLASSES) + len(MODALITIES) + 2


@dataclass(frozen=True)
class ProjectionConfig:
    """Fixed knobs of the projection (the seed design's defaults)."""

    memory_safety_margin: float = 0.2
    """Fraction of free GPU memory kept in reserve."""
    batch_timeout_ms: float = 50.0
    """Longest admission wait a policy may choose to coalesce a batch."""
    starvation_threshold_s: float = 30.0
    """Requests waiting longer than this are admitted first."""
    max_batch_size_per_modality: dict[str, int] = field(
        default_factory=lambda: {"image": 8, "video": 2, "audio": 16, "text": 16})
    """Upper batch-size cap per modality (also capped by max_num_seqs)."""
    late_value: float = 0.05
    """Utility factor kept by a request that can no longer meet its SLO."""
    running_bonus: float = 1.5
    """Step mode: utility factor of running requests (avoids thrashing preemptions)."""


@dataclass(frozen=True)
class ActionParams:
    """A decoded action."""

    class_weights: tuple[float, float, float] = (0.6, 0.3, 0.1)
    cap_frac: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    wait_frac: float = 0.0
    urgency_exp: float = 1.0


def decode_action(a: np.ndarray) -> ActionParams:
    """Map an action in [-1, 1]^ACTION_DIM to ``ActionParams`` (see module docstring)."""
    a = np.clip(np.nan_to_num(np.asarray(a, dtype=np.float64), nan=0.0), -1.0, 1.0)
    logits = 2.0 * a[:3]
    w = np.exp(logits - logits.max())
    w /= w.sum()
    frac = (a[3:7] + 1.0) / 2.0
    return ActionParams(tuple(w.tolist()), tuple(frac.tolist()), float((a[7] + 1) / 2), float(2 * (a[8] + 1)))


def encode_params(p: ActionParams) -> np.ndarray:
    """Inverse of ``decode_action`` (class weights up to softmax shift)."""
    logits = np.log(np.maximum(np.asarray(p.class_weights), 1e-9)) / 2.0
    logits -= logits.max()
    logits = np.clip(logits - logits.mean(), -1, 1)
    return np.concatenate([logits, 2 * np.asarray(p.cap_frac) - 1, [2 * p.wait_frac - 1, p.urgency_exp / 2 - 1]])


class ProjectedPolicy:
    """Utilities from ``ActionParams``; batch from the knapsack projection."""

    name = "projected"

    def __init__(self, params: ActionParams | None = None, config: ProjectionConfig | None = None) -> None:
        self.params = params or ActionParams()
        self.config = config or ProjectionConfig()

    def reset(self, state: Simulator) -> None:
        pass

    def set_action(self, action: np.ndarray) -> None:
        self.params = decode_action(action)

    def decide(self, state: Simulator) -> Decision:
        recs = list(state.waiting.values())
        if state.config.step_mode:
            recs += state.running
        if not recs:
            return Decision()
        items = self.items(state, recs)
        chosen = project(items, self.resources(state))
        if chosen.size == 0:
            return self._fallback(recs)
        ids = tuple(recs[i].request.id for i in chosen.tolist())
        return self._maybe_wait(state, recs, chosen, items) or Decision(ids)

    # ------------------------------------------------------------- internals
    def resources(self, state: Simulator) -> Resources:
        cost, cfg = state.cost, self.config
        free = (cost.gpu_memory_gb - cost.weights_gb) * (1 - cfg.memory_safety_margin)
        return Resources(free, starvation_threshold_s=cfg.starvation_threshold_s)

    def caps(self, state: Simulator) -> np.ndarray:
        """Batch cap per modality index."""
        top = state.config.max_num_seqs
        limits = self.config.max_batch_size_per_modality
        return np.array([max(1, min(top, round(f * limits.get(m, top))))
                         for m, f in zip(MODALITIES, self.params.cap_frac)], dtype=np.int64)

    def items(self, state: Simulator, recs: list[RequestRecord]) -> Items:
        now = state.now
        keys: dict[tuple, int] = {}
        n = len(recs)
        cls = np.empty(n, dtype=np.int64)
        mod = np.empty(n, dtype=np.int64)
        arr = np.empty((n, 6))
        kid = np.empty(n, dtype=np.int64)
        for i, r in enumerate(recs):
            q = r.request
            cls[i], mod[i] = CLASS_INDEX[q.priority], MODALITY_INDEX[q.modality]
            kid[i] = keys.setdefault(r.key, len(keys))
            arr[i] = (r.remaining_s, r.deadline_s, q.arrival_s, r.mem_gb, r.tokens, r.status == "running")
        remaining, deadline, arrival, mem, tokens, running = arr.T
        util = self.utility(cls, remaining, deadline - now)
        if running.any():
            util = np.where(running > 0, util * self.config.running_bonus, util)
        return Items(util, mem, tokens, kid, self.caps(state)[mod], now - arrival)

    def utility(self, cls: np.ndarray, remaining: np.ndarray, time_left: np.ndarray) -> np.ndarray:
        w = np.asarray(self.params.class_weights)[cls]
        pressure = remaining / np.maximum(time_left, 1e-3)
        late = (time_left <= 0) | (pressure > 1.0)
        value = np.where(late, self.config.late_value, np.minimum(pressure, 1.0) ** self.params.urgency_exp)
        return w * value / np.maximum(remaining, 1e-3)

    def _maybe_wait(self, state: Simulator, recs: list[RequestRecord], chosen: np.ndarray,
                    items: Items) -> Decision | None:
        wait_s = self.params.wait_frac * self.config.batch_timeout_ms / 1e3
        if wait_s <= 0 or state.config.step_mode or chosen.size >= int(items.cap[chosen[0]]):
            return None
        newest = max(recs[i].request.arrival_s for i in chosen.tolist())
        until = newest + wait_s
        return Decision((), wait_until=until) if state.now < until else None

    @staticmethod
    def _fallback(recs: list[RequestRecord]) -> Decision:
        """Nothing fits within the safety margin: run the oldest alone (vLLM-Omni would too)."""
        oldest = min(recs, key=lambda r: r.request.arrival_s)
        return Decision((oldest.request.id,))


__all__ = ["ACTION_DIM", "ActionParams", "ProjectedPolicy", "ProjectionConfig", "decode_action",
           "encode_params"]
