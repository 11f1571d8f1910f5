"""TensorBoard callbacks: scheduler scalars from env infos and baseline-relative eval curves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import TensorBoardOutputFormat

from rlsched.sim.request import PRIORITY_CLASSES


class SchedulerMetrics(BaseCallback):
    """``sched/*`` scalars, averaged over each rollout from the envs' info dicts.

    ``sched/slo_attainment/<class>`` and ``sched/goodput`` (weighted attainment so far)
    come from the last info of each finished episode; ``sched/batch_size`` and
    ``sched/weight/<class>`` from every step; ``sched/queue_wait_p99`` over the queueing
    delays of the requests the agent started during the rollout.
    """

    def _on_rollout_start(self) -> None:
        self._sizes: list[int] = []
        self._weights: list[tuple[float, ...]] = []
        self._waits: list[float] = []
        self._episodes: list[dict[str, Any]] = []

    def _on_step(self) -> bool:
        for info, done in zip(self.locals["infos"], self.locals["dones"]):
            self._sizes.append(info.get("batch_size", 0))
            self._weights.append(tuple(info.get("class_weights", ())))
            self._waits.extend(info.get("queue_wait_s", ()))
            if done:
                self._episodes.append(info)
        return True

    def _on_rollout_end(self) -> None:
        sizes = [s for s in self._sizes if s > 0]
        if sizes:
            self.logger.record("sched/batch_size", float(np.mean(sizes)))
        if self._waits:
            self.logger.record("sched/queue_wait_p99", float(np.percentile(self._waits, 99)))
        if self._weights and self._weights[0]:
            mean_w = np.mean(np.asarray(self._weights), axis=0)
            for cls, w in zip(PRIORITY_CLASSES, mean_w):
                self.logger.record(f"sched/weight/{cls}", float(w))
        if self._episodes:
            self.logger.record("sched/goodput", float(np.mean([e["weighted_slo_attainment"] for e in self._episodes])))
            for cls in PRIORITY_CLASSES:
                vals = [e["slo_attainment"][cls] for e in self._episodes if cls in e.get("slo_attainment", {})]
                if vals:
                    self.logger.record(f"sched/slo_attainment/{cls}", float(np.mean(vals)))


class BaselineEval(BaseCallback):
    """Every ``every`` steps: the current policy and the baselines on the same validation workloads.

    ``on_best(score)`` runs whenever the policy's mean validation score is the best so far
    (the trainer saves a ``best/`` checkpoint: validation seeds, never evaluation seeds).

    ``evaluate(policy_spec_or_object) -> {scenario: weighted attainment}``; baselines are
    evaluated once (they do not change) and re-logged at every point so the curves align.
    """

    def __init__(self, every: int, evaluate: Callable[[Any], dict[str, float]], baselines: tuple[str, ...],
                 current: Callable[[], Any], on_best: Callable[[float], None] | None = None) -> None:
        super().__init__()
        self.every, self.evaluate, self.current = every, evaluate, current
        self.baselines, self.on_best = baselines, on_best
        self._base: dict[str, dict[str, float]] = {}
        self._next = every
        self.best = -np.inf

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next += self.every
            self.log_point()
        return True

    def log_point(self) -> None:
        if not self._base:
            self._base = {b: self.evaluate(b) for b in self.baselines}
        scores = {"policy": self.evaluate(self.current()), **self._base}
        for who, per_scenario in scores.items():
            for sc, value in per_scenario.items():
                self.logger.record(f"eval/{sc}/{who}", value)
            self.logger.record(f"eval/mean/{who}", float(np.mean(list(per_scenario.values()))))
        self.logger.dump(self.num_timesteps)
        mean = float(np.mean(list(scores["policy"].values())))
        if mean > self.best:
            self.best = mean
            if self.on_best:
                self.on_best(mean)


class HyperparamText(BaseCallback):
    """Writes the run's full config once as TensorBoard text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def _on_training_start(self) -> None:
        for fmt in self.logger.output_formats:
            if isinstance(fmt, TensorBoardOutputFormat):
                fmt.writer.add_text("config", f"```\n{self.text}\n```", 0)
                fmt.writer.flush()

    def _on_step(self) -> bool:
        return True
