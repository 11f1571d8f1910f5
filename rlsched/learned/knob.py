"""The knob policy (``rl``): observation → action → ``ProjectedPolicy`` → Decision.

``LearnedPolicy`` wraps any ``act(obs) -> action`` (a live SB3 model during
training, the frozen numpy network when serving) and reproduces exactly what the
environment does around the agent: the same observation encoder and history, the
same telemetry, and the same auto-resolution of decision points the action cannot
change. ``rl:PATH`` builds one from a frozen checkpoint (numpy only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.errors import PolicyOutputError
from rlsched.learned.checkpoint import checkpoint_path, load_checkpoint
from rlsched.learned.observation import SCHEMA_VERSION
from rlsched.learned.observing import ObservingPolicy, trivial_candidate
from rlsched.policies.base import PolicySpec
from rlsched.policies.projected import ProjectedPolicy, ProjectionConfig, with_overrides
from rlsched.sim.simulator import Decision
from rlsched.sim.view import QueueView

Act = Callable[[np.ndarray], np.ndarray]


class LearnedPolicy(ObservingPolicy):
    """A policy network driving the projection; see the module docstring."""

    name = "rl"

    def __init__(self, act: Act, projection: ProjectionConfig | None = None, telemetry: Any = None) -> None:
        self.act = act
        self.projected = ProjectedPolicy(config=projection)
        super().__init__(self.projected, telemetry)
        self._max_wait_s = self.projected.config.batch_timeout_ms / 1e3

    def reset(self, state: QueueView) -> None:
        self.projected.reset(state)
        self._observe_from(state)

    def decide(self, state: QueueView) -> Decision:
        sample = self.sample_telemetry()  # at every decision, as the plugin folds telemetry at every schedule()
        only = trivial_candidate(state, self._max_wait_s)
        if only is not None:
            return Decision((only.request.id,))
        obs = self.encoder.encode(state, sample)
        action = self.act(obs)
        if not np.isfinite(action).all():  # the projection would read NaN as a neutral action: refuse instead
            raise PolicyOutputError(f"{self.name}: network output is not finite ({np.asarray(action).tolist()})")
        self.projected.set_action(action)
        return self.projected.decide(state)


def rl_policy(path: str | Path, overrides: Mapping[str, str] | None = None) -> LearnedPolicy:
    """The frozen policy in ``path`` (``checkpoints/NAME``): numpy forward, no torch, no pickle.
    ``overrides`` (a spec's ``;name=value`` options) change the checkpoint's projection settings."""
    net = load_checkpoint(path or "checkpoints/default", expect_schema=SCHEMA_VERSION)
    projection = with_overrides(overrides or {}, ProjectionConfig(**net.meta.get("projection", {})))
    policy = LearnedPolicy(net, projection)
    policy.name = str(PolicySpec("rl", str(path), dict(overrides or {})))
    return policy


def knob_policy(spec: PolicySpec) -> LearnedPolicy:
    """``rl[:CHECKPOINT][;SETTING=VALUE]...`` (default ``checkpoints/default``)."""
    return rl_policy(checkpoint_path(spec.arg, "checkpoints/default"), spec.options)


__all__ = ["LearnedPolicy", "knob_policy", "rl_policy"]
