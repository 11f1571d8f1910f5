"""Learned policies: observation → action → ``ProjectedPolicy`` → Decision.

``LearnedPolicy`` wraps any ``act(obs) -> action`` (a live SB3 model during
training, the frozen numpy network when serving) and reproduces exactly what the
environment does around the agent: the same observation encoder and history, the
same telemetry, and the same auto-resolution of decision points the action cannot
change. ``rl:PATH`` builds one from a frozen checkpoint (numpy only).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.envs.observation import SCHEMA_VERSION, ObservationEncoder
from rlsched.errors import PolicyOutputError
from rlsched.policies.base import register
from rlsched.policies.checkpoint import load_checkpoint
from rlsched.policies.projected import ProjectedPolicy, ProjectionConfig, with_overrides
from rlsched.resources import data_dir
from rlsched.sim.request import CLASS_INDEX, RequestRecord
from rlsched.sim.simulator import Decision, Simulator
from rlsched.telemetry.base import TelemetrySample

Act = Callable[[np.ndarray], np.ndarray]


def trivial_candidate(state: Any, max_wait_s: float) -> RequestRecord | None:
    """The single candidate when every action would start it alone now, else None.

    One candidate (waiting, or running in step mode) and no chance to wait for a
    fuller batch: step mode, ``max_num_seqs == 1``, or it waited past the longest
    admission wait.
    """
    step_mode = state.config.step_mode
    if len(state.waiting) + (len(state.running) if step_mode else 0) != 1:
        return None
    rec = next(iter(state.waiting.values())) if state.waiting else state.running[0]
    if step_mode or state.config.max_num_seqs == 1 or state.now >= rec.request.arrival_s + max_wait_s:
        return rec
    return None


class ObservingPolicy:
    """What a learned policy needs around its network, the same in training and serving: an
    ``ObservationEncoder`` over ``projected``'s candidates whose history follows the state's
    arrival/finish hooks, and GPU telemetry sampled at every decision (``sample_telemetry``),
    as the plugin folds it at every schedule()."""

    def __init__(self, projected: ProjectedPolicy, telemetry: Any = None) -> None:
        self.encoder = ObservationEncoder(projected)
        self.telemetry = telemetry
        """A ``Telemetry``; None in a simulator means ``SimTelemetry`` of that simulator."""
        self._telemetry = telemetry

    def _observe_from(self, state: Simulator) -> None:
        """Start the history at ``state.now`` and follow the state's hooks (call from ``reset``)."""
        from rlsched.telemetry.sim import SimTelemetry

        self.encoder.reset(state.now)
        # In a simulator: simulated telemetry, as in training. Elsewhere (the plugin's queue
        # view) the state carries its latest NVML ``TelemetrySample`` itself.
        self._telemetry = self.telemetry or (SimTelemetry(state) if isinstance(state, Simulator) else None)
        if hasattr(state, "on_arrival"):
            state.on_arrival.append(self.note_arrival)
            state.on_finish.append(self.note_finish)

    def note_arrival(self, rec: RequestRecord) -> None:
        self.encoder.note_arrival(rec, CLASS_INDEX[rec.request.priority])

    def note_finish(self, rec: RequestRecord) -> None:
        self.encoder.note_finish(CLASS_INDEX[rec.request.priority], rec.slo_met)

    def sample_telemetry(self, state: Any) -> TelemetrySample | None:
        if self._telemetry is not None:
            return self._telemetry.read()
        sample = getattr(state, "telemetry", None)
        return sample if isinstance(sample, TelemetrySample) else None


class LearnedPolicy(ObservingPolicy):
    """A policy network driving the projection; see the module docstring."""

    name = "rl"

    def __init__(self, act: Act, projection: ProjectionConfig | None = None, telemetry: Any = None) -> None:
        self.act = act
        self.projected = ProjectedPolicy(config=projection)
        super().__init__(self.projected, telemetry)
        self._max_wait_s = self.projected.config.batch_timeout_ms / 1e3

    def reset(self, state: Simulator) -> None:
        self.projected.reset(state)
        self._observe_from(state)

    def decide(self, state: Simulator) -> Decision:
        sample = self.sample_telemetry(state)  # at every decision, as the plugin folds telemetry at every schedule()
        only = trivial_candidate(state, self._max_wait_s)
        if only is not None:
            return Decision((only.request.id,))
        obs = self.encoder.encode(state, sample)
        action = self.act(obs)
        if not np.isfinite(action).all():  # the projection would read NaN as a neutral action: refuse instead
            raise PolicyOutputError(f"{self.name}: network output is not finite ({np.asarray(action).tolist()})")
        self.projected.set_action(action)
        return self.projected.decide(state)


def rl_policy(path: str | Path, overrides: str = "") -> LearnedPolicy:
    """The frozen policy in ``path`` (``checkpoints/NAME``): numpy forward, no torch, no pickle.
    ``overrides`` (``;name=value;...``) change the checkpoint's projection settings."""
    net = load_checkpoint(path or "checkpoints/default", expect_schema=SCHEMA_VERSION)
    _, projection = with_overrides(overrides, ProjectionConfig(**net.meta.get("projection", {})))
    policy = LearnedPolicy(net, projection)
    policy.name = f"rl:{path}{overrides}"
    return policy


def _rl(spec: str) -> LearnedPolicy:
    path, sep, rest = spec.partition(";")
    return rl_policy(_resolve(path), sep + rest)


register("rl")(_rl)


def _resolve(arg: str) -> Path:
    """``arg`` as given if it exists, else ``checkpoints/NAME`` among the shipped checkpoints
    (inside the installed package, or the repository's folder in a checkout)."""
    p = Path(arg or "checkpoints/default")
    if p.exists() or p.is_absolute():
        return p
    parts = p.parts[1:] if p.parts[0] == "checkpoints" else p.parts
    return data_dir("checkpoints").joinpath(*parts)
