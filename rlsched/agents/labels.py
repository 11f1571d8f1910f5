"""Teacher labels for the candidate policy: the value of starting each candidate batch.

At a visited decision point every candidate is tried on a fork of the simulator and the
strengthened heuristic finishes the fork; the candidate's label is the class-weighted
number of SLOs met in that fork (``CLASS_WEIGHTS``: realtime 3, batch 2, background 1).

*Realizable* labels (``future_s`` = 0) count only the requests already queued or running —
what a scheduler knows, but blind to the requests its choice delays next. *Hindsight*
labels (``future_s`` > 0) also feed the fork the real arrivals of the next ``future_s``
seconds and count them: one Monte-Carlo sample of Q(state, candidate) under the heuristic,
so their average over similar states is the one-step policy improvement a network that sees
only the present can learn (the single-sample argmax, the hindsight teacher, is a ceiling no
online policy reaches). States are visited by the heuristic or, in DAgger rounds, by the
learned policy itself; each task is one seeded workload on training seeds, so labels are
reproducible whichever worker computes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.errors import ConfigError
from rlsched.learned.observation import GLOBAL_DIM
from rlsched.learned.pick import F, K, PickPolicy
from rlsched.learned.scorer import Scorer
from rlsched.policies.candidates import fits
from rlsched.policies.lookahead import rollout_value
from rlsched.policies.static import load_static
from rlsched.run import VALIDATION_SEED_BASE, RunSpec, prepare

LABEL_HORIZON_S = 600.0
"""Default hindsight horizon of the labels: arrivals of the next 10 minutes."""


@dataclass(frozen=True)
class LabelTask:
    """One labelled episode: a seeded workload, who drives it, and how labels look ahead."""

    scenario: str
    seed: int
    rate_scale: float
    static: str
    """Tuned action file of the heuristic (proposal, rollouts)."""
    future_s: float = LABEL_HORIZON_S
    every: int = 2
    """Label one decision point in ``every`` (neighbouring states are near copies)."""
    duration_s: float | None = None
    scorer: Any = None
    """A ``Scorer`` (DAgger: the learned policy visits the states) or None (the heuristic does)."""

    def __post_init__(self) -> None:
        if not 0 <= self.seed < VALIDATION_SEED_BASE:
            raise ConfigError("label.seeds", f"labels use training seeds [0, {VALIDATION_SEED_BASE}), not {self.seed}")


def _always_proposal(g: np.ndarray, cand: np.ndarray) -> np.ndarray:
    return -np.arange(K, dtype=np.float64)


def label_episode(task: LabelTask) -> dict[str, np.ndarray]:
    """Arrays ``glob`` (N, G), ``cand`` (N, K, F), ``q`` (N, K; NaN where invalid) of one episode."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sim = prepare(RunSpec(task.scenario, "label", task.seed, task.rate_scale, task.duration_s))
    base = load_static(task.static)
    policy = PickPolicy(task.scorer or _always_proposal, base)
    policy.reset(sim)
    glob, cand, qs = [], [], []
    seen = 0
    while sim.advance_to_next_decision():
        decision = policy.decide(sim)
        view = policy.view
        if view is not None and len(view.batches) > 1:
            seen += 1
            if seen % task.every == 0:
                q = np.full(K, np.nan)
                for j, batch in enumerate(view.batches):
                    if fits(sim, batch):
                        q[j] = rollout_value(sim, batch, base, task.future_s)
                glob.append(policy.global_features(sim))
                cand.append(view.features.copy())
                qs.append(q)
        sim.apply(decision)
    return {"glob": np.asarray(glob, np.float32).reshape(-1, GLOBAL_DIM),
            "cand": np.asarray(cand, np.float32).reshape(-1, K, F), "q": np.asarray(qs).reshape(-1, K)}


def save_labels(path: Path, parts: list[dict[str, np.ndarray]], meta: dict[str, Any],
                flag: str | None = None) -> Path:
    """Concatenate per-episode arrays into one ``.npz`` (no pickle) with its provenance, written
    whole or not at all (``rlsched.atomic``; ``flag`` names the path in an error)."""
    import json

    from rlsched.atomic import atomic_open

    path.parent.mkdir(parents=True, exist_ok=True)
    glob, cand, q = (np.concatenate([p[k] for p in parts]) for k in ("glob", "cand", "q"))
    with atomic_open(path, "wb", flag) as fh:
        np.savez_compressed(fh, glob=glob, cand=cand, q=q, meta=np.asarray(json.dumps(meta)))
    return path


def load_labels(paths: list[Path]) -> dict[str, np.ndarray]:
    parts = []
    for p in paths:
        with np.load(p, allow_pickle=False) as data:
            parts.append({k: data[k] for k in ("glob", "cand", "q")})
    return {k: np.concatenate([p[k] for p in parts]) for k in ("glob", "cand", "q")}


__all__ = ["LABEL_HORIZON_S", "LabelTask", "Scorer", "label_episode", "load_labels", "save_labels"]


def label_tasks(scenarios: list[str], static: str, episodes: int, seed0: int, rate_scale: tuple[float, float],
                future_s: float, every: int, duration_s: float | None, scorer: Any = None) -> list[LabelTask]:
    """``episodes`` per scenario on consecutive training seeds from ``seed0``, loads spread evenly
    over ``rate_scale`` (stratified rather than drawn: every load band gets labels)."""
    loads = np.linspace(*rate_scale, episodes) if episodes > 1 else np.array([np.mean(rate_scale)])
    return [LabelTask(sc, seed0 + i, float(loads[i]), static.format(scenario=sc), future_s, every, duration_s, scorer)
            for sc in scenarios for i in range(episodes)]


def generate(tasks: list[Any], workers: int = 1, progress: bool = True, ray: str | None = None,
             label: Any = label_episode, what: str = "labelling") -> list[dict[str, np.ndarray]]:
    """Label every task with ``label`` (default: the candidate policy's episodes; the learned router
    passes its own) on local processes, or Ray tasks with ``ray``, with a progress bar over
    finished episodes."""
    from rlsched.parallel import progress_bar, run_tasks

    parts = []
    with progress_bar(disable=not progress) as bar:
        job = bar.add_task(what, total=len(tasks))
        for part in run_tasks(label, tasks, workers, ray):
            parts.append(part)
            bar.advance(job)
    return parts
