"""Learned policy over candidate batches: the network picks which feasible batch starts now.

At a decision point the strengthened heuristic (``static``, a tuned ``ProjectedPolicy``)
proposes a batch; ``candidate_batches`` adds the other batches a scheduler could start
now — the proposal with a doubled cap and cut to its most valuable request, the batch of
the earliest-deadline and of the shortest savable request's key, the best batch of the
next most valuable keys — every one a knapsack solution of the same projection, so every
candidate is feasible (memory, batch cap, compatibility key). ``CandidateView`` describes
each candidate by ``CAND_FIELDS`` (size, wave time, value of the members that meet their
SLO if it starts now, members it makes late, collateral: waiting requests that go late
while it runs, ...) beside the queue-level features of the knob policy's observation.

A shared per-candidate network scores each candidate (permutation-equivariant: the
order of the candidates does not matter, only their features), invalid slots are masked,
and the highest score starts. The proposal is always candidate 0 and always valid, so a
policy that learned nothing beyond "pick 0" is the heuristic itself.

Request mode only: in step mode (every denoise step is a decision) the policy runs the
heuristic's proposal. ``pick:CHECKPOINT;static=TUNED.json`` serves a frozen scorer over
that tuned heuristic; without ``static=`` the checkpoint's own base action is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.errors import CheckpointError, ConfigError, PolicyOutputError
from rlsched.learned.checkpoint import (
    META,
    check_projection,
    checkpoint_path,
    read_checkpoint,
)
from rlsched.learned.observation import GLOBAL_DIM, SCHEMA_VERSION
from rlsched.learned.observing import ObservingPolicy
from rlsched.learned.scorer import FrozenScorer, Scorer, read_scorer
from rlsched.policies.base import PolicySpec
from rlsched.policies.candidates import candidate_batches
from rlsched.policies.projected import ACTION_DIM, ProjectedPolicy, ProjectionConfig, decode_action
from rlsched.policies.static import load_static
from rlsched.projection.few import np_maximum
from rlsched.sim.metrics import CLASS_WEIGHTS
from rlsched.sim.request import CLASS_INDEX, RequestRecord
from rlsched.sim.simulator import Decision
from rlsched.sim.telemetry import TelemetrySample
from rlsched.sim.view import QueueView

K = 8
"""Candidate batches per decision (slot 0: the heuristic's proposal)."""
CAND_FIELDS = ("valid", "proposal", "size", "wave", "efficiency", "value_met", "made_late", "lost",
               "min_slack", "collateral", "key_queue", "starving", "realtime_share", "wait")
F = len(CAND_FIELDS)
PICK_SCHEMA = "dit-pick-obs/1"
"""Bump whenever a candidate or global feature changes (checkpoints record it)."""
SCALE_S = 30.0
_W = np.array([CLASS_WEIGHTS[c] for c in sorted(CLASS_INDEX, key=CLASS_INDEX.__getitem__)]) / max(
    CLASS_WEIGHTS.values())
"""Class weights scaled to realtime = 1."""


def wave_s(state: QueueView, batch: list[RequestRecord]) -> float:
    """Request mode: seconds the engine needs for ``batch`` as one wave (``CostModel.batch_duration``
    with the state's engine overheads, as the simulator runs it)."""
    cfg = state.config
    return state.cost.batch_duration(batch, False, cfg.engine_overhead_ms, cfg.engine_overhead_ms_per_mpx)


@dataclass
class CandidateView:
    """The candidates at one decision point and their features."""

    batches: list[tuple[int, ...]]
    features: np.ndarray
    """(K, F) float32; rows past ``len(batches)`` are zeros (invalid)."""

    @property
    def mask(self) -> np.ndarray:
        return self.features[:, 0] > 0.5


def describe(base: ProjectedPolicy, state: QueueView, proposal: tuple[int, ...]) -> CandidateView:
    """Candidates (``proposal`` first) and their ``CAND_FIELDS``; ``proposal`` may not be empty."""
    batches = candidate_batches(base, state, proposal, doubled=True)[:K]
    waiting, now = state.waiting, state.now
    pool = [r for r in base.candidates(state)[0] if r.request.id in waiting]
    rows = base.table.gather(pool)  # request mode: remaining = standalone work
    pool_slack = rows.deadline_s - now - rows.work_s
    pool_w = _W[rows.cls]
    open_slack = np.where(pool_slack >= 0, pool_slack, np.inf)
    row_of = {rid: i for i, rid in enumerate(rows.request_id.tolist())}
    per_key: dict[Any, int] = {}
    for rec, n, _ in base.queue_summary(state):
        per_key[rec.key] = per_key.get(rec.key, 0) + n
    cfg = base.config
    threshold, multiple = cfg.starvation_threshold_s, cfg.starvation_slo_multiple
    weight = _W.tolist()
    out = np.zeros((K, F), dtype=np.float32)
    for j, batch in enumerate(batches):
        # Python floats over a candidate's few members: numpy's per-call cost (~1 µs a call, ~20
        # calls a candidate) was most of the features' time. Sums run in member order.
        recs = [waiting[i] for i in batch]
        wave = wave_s(state, recs)
        met = late = lost = work = 0.0
        slack, oldest, meets, starving, realtime = math.inf, math.inf, False, False, 0
        for r in recs:
            q = r.request
            w, time_left, remaining = weight[CLASS_INDEX[q.tier]], r.deadline_s - now, r.remaining_s
            if time_left >= wave:
                met, meets = met + w, True
                slack = min(slack, time_left - wave)
            elif remaining <= time_left:
                late += w
            if remaining > time_left:
                lost += w
            own = np_maximum(threshold, multiple * (time_left + now - q.arrival_s))
            starving |= (now - q.arrival_s) > own
            oldest = min(oldest, q.arrival_s)
            work += remaining
            realtime += q.tier == "realtime"
        inside = np.zeros(len(pool), dtype=bool)  # = np.isin(rows.request_id, batch), without its sort
        inside[[row_of[i] for i in batch if i in row_of]] = True
        collateral = float(pool_w[~inside & (open_slack < wave)].sum())
        out[j] = (1.0, j == 0, math.log1p(len(recs)), math.log1p(wave / SCALE_S), work / max(wave, 1e-9),
                  math.log1p(met), math.log1p(late), math.log1p(lost),
                  math.asinh(slack / max(wave, 1e-9)) if meets else -5.0,
                  math.log1p(collateral), math.log1p(per_key.get(recs[0].key, 0)), float(starving),
                  realtime / len(recs), math.log1p(max(now - oldest, 0.0) / SCALE_S))
    np.clip(out, -5.0, 5.0, out=out)
    return CandidateView(batches, out)


# ------------------------------------------------------------------ the checkpoint
def load_scorer(folder: str | Path) -> FrozenScorer:
    """A frozen scorer checkpoint (``kind: pick``), every shape and value checked at load."""
    folder, meta, t = read_checkpoint(folder)
    where = str(folder / META)
    if meta.get("kind") != "pick":
        raise CheckpointError(f"{where}: kind {meta.get('kind')!r} is not a candidate scorer ('pick')")
    if meta.get("pick_schema") != PICK_SCHEMA or meta.get("obs_schema") != SCHEMA_VERSION:
        raise CheckpointError(f"{where}: features {meta.get('pick_schema')!r}/{meta.get('obs_schema')!r} do not "
                              f"match this rlsched ({PICK_SCHEMA!r}/{SCHEMA_VERSION!r}); retrain")
    scorer = read_scorer(where, meta, t, GLOBAL_DIM, F, "candidate")
    _base_action(where, meta.get("base_action"))
    check_projection(where, meta.get("projection", {}))
    return scorer


def _base_action(where: str, value: Any) -> np.ndarray:
    """``base_action``: a flat list of ``ACTION_DIM`` finite numbers in the action space [-1, 1]
    (strings, nested or ragged lists are refused here, never a ValueError from numpy)."""
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise CheckpointError(f"{where}: base_action must be a list of {ACTION_DIM} numbers, not "
                              f"{_short(value)}")
    action = np.asarray(value, dtype=np.float64)
    if action.shape != (ACTION_DIM,) or not np.isfinite(action).all():
        raise CheckpointError(f"{where}: base_action must hold {ACTION_DIM} finite numbers, not {_short(value)}")
    if (np.abs(action) > 1).any():
        i = int(np.argmax(np.abs(action) > 1))
        raise CheckpointError(f"{where}: base_action[{i}] = {action[i]:g} is outside the action space [-1, 1]")
    return action


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ------------------------------------------------------------------ the policy
class PickPolicy(ObservingPolicy):
    """Scores the candidates of ``base`` (a tuned ``ProjectedPolicy``) and starts the best one."""

    name = "pick"

    def __init__(self, scorer: Scorer, base: ProjectedPolicy, telemetry: Any = None) -> None:
        super().__init__(base, telemetry)
        self.scorer, self.base = scorer, base
        self._sample: TelemetrySample | None = None
        self.view: CandidateView | None = None
        """The candidates of the last decision (for tests and the environment)."""
        self.picked = self.decisions = 0

    def reset(self, state: QueueView) -> None:
        self.base.reset(state)
        self._observe_from(state)

    def global_features(self, state: QueueView) -> np.ndarray:
        """The knob policy's queue-level observation entries (counts, work, slack, history, and the
        telemetry sampled by the last ``propose``)."""
        return self.encoder.encode(state, self._sample, with_slots=False)[:GLOBAL_DIM]

    def propose(self, state: QueueView) -> tuple[Decision, CandidateView | None]:
        """The heuristic's decision and, when there is a choice, the candidates (None: no choice).
        Telemetry is sampled at every call, choice or not, as the plugin folds it at every
        schedule(): the simulator and the engine then see the same utilisation averages."""
        self._sample = self.sample_telemetry()
        decision = self.base.decide(state)
        self.view = None
        if state.config.step_mode or not decision.batch:
            return decision, None
        view = describe(self.base, state, tuple(decision.batch))
        if len(view.batches) < 2:
            return decision, None
        self.view = view
        return decision, view

    def choose(self, decision: Decision, view: CandidateView, j: int) -> Decision:
        """Candidate ``j`` of ``view`` as the decision (0: the heuristic's own)."""
        self.decisions += 1
        if j == 0:
            return decision
        self.picked += 1
        return Decision(view.batches[j], reject=decision.reject, reason=decision.reason)

    def decide(self, state: QueueView) -> Decision:
        decision, view = self.propose(state)
        if view is None:
            return decision
        scores = np.asarray(self.scorer(self.global_features(state), view.features), dtype=np.float64)
        if scores.shape != (K,) or not np.isfinite(scores).all():
            raise PolicyOutputError(f"{self.name}: scores are not {K} finite numbers ({scores.tolist()})")
        return self.choose(decision, view, int(np.argmax(np.where(view.mask, scores, -np.inf))))


def pick_policy(path: str | Path, static: str | None = None) -> PickPolicy:
    scorer = load_scorer(path)
    config = ProjectionConfig(**scorer.meta.get("projection", {}))
    if static:
        base = load_static(static)
        if base.config != config:
            raise ConfigError(f"pick:{path}", "the static file's projection settings differ from the checkpoint's")
    else:
        base = ProjectedPolicy(decode_action(np.asarray(scorer.meta["base_action"])), config)
    policy = PickPolicy(scorer, base)
    policy.name = f"pick:{path}" + (f";static={static}" if static else "")
    return policy


def pick_from_spec(spec: PolicySpec) -> PickPolicy:
    """``pick[:CHECKPOINT][;static=TUNED.json]`` (default ``checkpoints/pick``)."""
    unknown = sorted(set(spec.options) - {"static"})
    if unknown:
        raise ConfigError(f"policy option {unknown[0]!r}", "pick takes only static=TUNED.json")
    return pick_policy(checkpoint_path(spec.arg, "checkpoints/pick"), spec.options.get("static"))


__all__ = ["CAND_FIELDS", "F", "K", "PICK_SCHEMA", "CandidateView", "FrozenScorer", "PickPolicy", "describe",
           "load_scorer", "pick_policy", "read_scorer"]
