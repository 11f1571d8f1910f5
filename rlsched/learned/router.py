"""Learned router (early binding): a network picks the replica an arriving request joins.

The candidates are the stage's replicas; candidate 0 of the scorer's convention, the
*proposal*, is rlsched's router's own choice (savable first, then the earliest predicted
finish: ``RlschedRouter``), flagged in the ``proposal`` field. A replica the request does
not fit on alone (memory at that replica's layout) is masked, so the network chooses among
feasible replicas only; the proposal is always allowed (it is what the engine would get
anyway). Each candidate is described by ``ROUTE_FIELDS``: whether the request still meets
its SLO there, its predicted finish and slack (in SLOs), the running batch's remaining time,
the work queued there that is due first, how many requests are due after it (what it
pushes back) and how many of those it makes late (class-weighted, run in deadline order),
its own standalone time at that replica's layout and that time over the fastest replica's
(layout fit: large shapes to wide replicas), the replica's GPUs, requests of its
compatibility key already there (batching affinity) and the queue length. Beside
them ``GLOBAL_FIELDS``: the request's class and SLO, the stage's backlog per replica, the
share of replicas where it is savable, and the offered load of the recent arrivals at three
horizons (1, 5 and 20 minutes: bursts and trends of the arrival process).

The same shared per-candidate network as ``pick`` scores every replica
(permutation-equivariant; ``rlsched.learned.scorer.FrozenScorer``), the proposal's score gets
the checkpoint's margin, and the highest score wins. A network that learned nothing beyond
"pick the proposal" is rlsched's router itself.

Spec: ``POLICY@router[:CHECKPOINT]`` (default ``checkpoints/router``). Early binding only:
late binding (``POLICY@central``) has no router; its central policy decides.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.errors import CheckpointError
from rlsched.learned.checkpoint import META, checkpoint_path, read_checkpoint
from rlsched.learned.scorer import FrozenScorer, read_scorer
from rlsched.policies.base import PolicySpec, no_options
from rlsched.routing.routers import Prediction, RlschedRouter
from rlsched.sim.request import CLASS_INDEX, Request
from rlsched.sim.view import StageView

ROUTE_FIELDS = ("valid", "proposal", "meets", "slack", "finish", "busy", "due", "pushed_back", "made_late",
                "own_work", "fit", "gpus", "affinity", "queue")
RF = len(ROUTE_FIELDS)
HISTORY_S = (60.0, 300.0, 1200.0)
"""Horizons of the offered-load features (seconds)."""
GLOBAL_FIELDS = ("realtime", "batch", "background", "slo", "min_work", "backlog", "savable_share",
                 *(f"load_{int(h)}s" for h in HISTORY_S))
RG = len(GLOBAL_FIELDS)
ROUTE_SCHEMA = "dit-route-obs/3"
"""Bump whenever a feature changes (checkpoints record it). /3: the proposal and ``due`` count only the
savable work due first (``QueueWork.due_first``); /2 counted every request due first."""
SAVABLE_FIRST = {"dit-route-obs/2": False, ROUTE_SCHEMA: True}
"""The schemas served, each with its proposer's queue model (``RlschedRouter(savable_first)``): a checkpoint
is served with the features it was trained on."""
SERVED = " and ".join(SAVABLE_FIRST)
MAX_REPLICAS = 8
"""Candidate slots in the training labels (stages with more replicas are served, not labelled)."""
SCALE_S = 30.0
DEFAULT_CHECKPOINT = "checkpoints/router"


class RouteFeatures:
    """The features of every replica at each arrival, beside the proposal of the rlsched router it holds
    (``proposer``). Not a router: the learned router routes with it, the label generator and the route
    environment record with it."""

    def __init__(self, savable_first: bool = True) -> None:
        self.proposer = RlschedRouter(savable_first)

    def reset(self, stage: StageView) -> None:
        """Before a run's first arrival: the proposer's per-replica work and the load history afresh."""
        self.proposer.reset(stage)
        self._history: list[deque[tuple[float, float]]] = [deque() for _ in HISTORY_S]
        """Per horizon h: (arrival time, fastest standalone work) of the arrivals of the last h s."""
        self._sums = [0.0] * len(HISTORY_S)
        self._gpus = [float(getattr(getattr(sim.cost, "layout", None), "gpus", 1)) for sim in stage.replicas]

    def describe(self, request: Request, stage: StageView) -> tuple[int, np.ndarray, np.ndarray]:
        """At ``request``'s arrival: (the proposal's replica, global features (RG,), candidate features (R, RF))."""
        proposer = self.proposer
        proposer.sync(stage)
        preds = proposer.predict(request, stage)
        proposal = proposer.choose(request, preds)
        return proposal, *self._features(request, stage, preds, proposal)

    def _features(self, request: Request, stage: StageView, preds: list[Prediction],
                  proposal: int) -> tuple[np.ndarray, np.ndarray]:
        now, slo = stage.now, max(request.slo_s, 1e-9)
        deadline = request.arrival_s + request.slo_s
        fastest = min(p.record.work_s for p in preds)
        rows = []
        for i, (p, sim, work) in enumerate(zip(preds, stage.replicas, self.proposer.work)):
            key = p.record.key
            same = work.keys.get(key, 0) + sum(r.key == key for r in sim.running)
            rows.append((i == proposal or p.fits, i == proposal, p.finish_s <= deadline,
                         min(max((deadline - p.finish_s) / slo, -3.0), 3.0), min((p.finish_s - now) / slo, 5.0),
                         min(p.busy_s / SCALE_S, 10.0), min(p.due_s / SCALE_S, 10.0),
                         min(work.due_after(deadline) / 8.0, 4.0),
                         min(work.made_late(deadline, now + p.busy_s, p.record.work_s) / 4.0, 4.0),
                         min(p.record.work_s / SCALE_S, 10.0),
                         math.log(max(p.record.work_s, 1e-9) / max(fastest, 1e-9)), self._gpus[i] / 8.0,
                         min(same, 4) / 4.0, min((len(sim.waiting) + len(sim.running)) / 8.0, 4.0)))
        cand = np.array(rows, np.float32)
        backlog = sum(p.busy_s for p in preds) + sum(max(w.work_s, 0.0) for w in self.proposer.work)
        loads = []
        for j, (h, seen) in enumerate(zip(HISTORY_S, self._history)):
            seen.append((now, fastest))
            self._sums[j] += fastest
            while seen[0][0] <= now - h:
                self._sums[j] -= seen.popleft()[1]
            loads.append(min(max(self._sums[j], 0.0) / (min(h, max(now, 1.0)) * len(preds)), 4.0))
        glob = np.zeros(RG, np.float32)
        glob[CLASS_INDEX[request.tier]] = 1.0
        glob[3:] = (math.log(slo / SCALE_S), min(fastest / slo, 4.0), min(backlog / (SCALE_S * len(preds)), 10.0),
                    float(cand[:, 2].mean()), *loads)
        return glob, cand


class LearnedRouter:
    """Routes each arrival to the replica the frozen scorer ranks highest (module docstring); it holds
    the features (and through them rlsched's router, whose choice is the proposal)."""

    def __init__(self, scorer: Any, name: str = "router") -> None:
        self.scorer, self.name = scorer, name
        schema = getattr(scorer, "meta", {}).get("route_schema", ROUTE_SCHEMA)
        self.features = RouteFeatures(SAVABLE_FIRST[schema])

    def reset(self, stage: StageView) -> None:
        self.features.reset(stage)

    def describe(self, request: Request, stage: StageView) -> tuple[int, np.ndarray, np.ndarray]:
        return self.features.describe(request, stage)

    def route(self, request: Request, stage: StageView) -> int:
        proposal, glob, cand = self.describe(request, stage)
        scores = np.where(cand[:, 0] > 0, self.scorer(glob, cand), -np.inf)
        best = int(np.argmax(scores))
        return best if np.isfinite(scores[best]) else proposal


def load_router(folder: str | Path) -> FrozenScorer:
    """A frozen router checkpoint (``kind: router``), every shape and value checked at load."""
    folder, meta, t = read_checkpoint(folder)
    where = str(folder / META)
    if meta.get("kind") != "router":
        raise CheckpointError(f"{where}: kind {meta.get('kind')!r} is not a learned router ('router')")
    if meta.get("route_schema") not in SAVABLE_FIRST:
        raise CheckpointError(f"{where}: features {meta.get('route_schema')!r} do not match this rlsched "
                              f"(it serves {SERVED}); retrain")
    return read_scorer(where, meta, t, RG, RF, "replica")


def learned_router(spec: PolicySpec) -> LearnedRouter:
    """``router[:CHECKPOINT]``: the shipped learned router, or the one at CHECKPOINT."""
    no_options(spec)
    return LearnedRouter(load_router(checkpoint_path(spec.arg, DEFAULT_CHECKPOINT)), str(spec))


__all__ = ["DEFAULT_CHECKPOINT", "GLOBAL_FIELDS", "HISTORY_S", "LearnedRouter", "MAX_REPLICAS", "RF", "RG",
           "ROUTE_FIELDS", "ROUTE_SCHEMA", "SAVABLE_FIRST", "RouteFeatures", "learned_router", "load_router"]
