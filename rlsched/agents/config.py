"""Agent presets (``agents/*.yaml``): environment, PPO hyperparameters, evaluation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsched.atomic import input_file
from rlsched.errors import ConfigError
from rlsched.resources import data_dir, shipped_path
from rlsched.sim.yamlio import read_yaml

AGENTS_DIR = data_dir("agents")


@dataclass(frozen=True)
class EnvConfig:
    """What each training episode looks like."""

    scenarios: tuple[str, ...] = ("default",)
    """Scenarios sampled per episode (one policy serves them all)."""
    rate_scale_range: tuple[float, float] = (0.5, 1.5)
    """Load sampled uniformly per episode."""
    episode_s: float | None = None
    """Arrival window per episode in simulated seconds (None: the env's default)."""
    max_episode_steps: int = 512
    """Decisions per episode (TimeLimit)."""
    projection: dict[str, Any] = field(default_factory=dict)
    """Overrides of ``ProjectionConfig`` (e.g. starvation_threshold_s)."""


@dataclass(frozen=True)
class PPOConfig:
    """stable-baselines3 PPO hyperparameters."""

    learning_rate: float = 3e-4
    n_steps: int = 512
    """Rollout length per environment."""
    batch_size: int = 256
    n_epochs: int = 5
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    net_arch: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    """``tanh`` or ``relu`` (the exported network supports both)."""
    log_std_init: float = -0.5
    init_action_from: tuple[str, ...] = ()
    """Tuned ``static`` files (``rlsched tune``); the mean of their actions initialises the
    action head's bias, so training starts from the tuned heuristic and learns
    state-dependent corrections. Empty: SB3's default (action ≈ 0)."""
    bc_steps_per_scenario: int = 0
    """> 0: behaviour-clone each scenario's tuned action (files in ``init_action_from``
    named after the scenarios) on this many demonstration steps per scenario first."""
    bc_epochs: int = 10


@dataclass(frozen=True)
class AgentConfig:
    """One training run, serialised beside its results."""

    name: str = "ppo"
    env: EnvConfig = field(default_factory=EnvConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    n_envs: int = 2
    """Environments stepped together per rollout."""
    subproc: bool = False
    """Run environments in worker processes (SubprocVecEnv, forkserver). On 2 cores the
    in-process DummyVecEnv is faster: env steps take ~0.25 ms, less than the IPC."""
    timesteps: int = 200_000
    normalize_obs: bool = True
    """Running observation normalisation (exported with the policy)."""
    checkpoint_every: int = 20_000
    eval_every: int = 20_000
    """Steps between eval/ points (policy and baselines on the validation seeds)."""
    eval_seeds: tuple[int, ...] = (900, 901)
    """Validation seeds for curves during training: not training seeds, not evaluation seeds."""
    eval_rate_scale: float = 1.0
    eval_baselines: tuple[str, ...] = ("fifo", "edf")
    eval_duration_s: float | None = 7200.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_agent_config(path: str | Path, **overrides: Any) -> AgentConfig:
    """Load ``agents/NAME.yaml`` (or a path); ``overrides`` replace top-level fields."""
    p = Path(path)
    p = AGENTS_DIR / f"{path}.yaml" if not p.suffix else shipped_path(p)  # agents/x.yaml from any folder
    input_file(p, "agent preset", str(path))
    data = read_yaml(p) or {}
    return agent_config_from_dict(data, str(p), **overrides)


def agent_config_from_dict(data: dict[str, Any], where: str, **overrides: Any) -> AgentConfig:
    kind = data.pop("kind", "knob")  # what `rlsched learn` reads to choose this recipe (agents/recipe.py)
    if kind != "knob":
        raise ConfigError(where, f"kind {kind!r}: a PPO agent preset is the knob policy's (kind: knob)")
    try:
        env = EnvConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.pop("env", {}).items()})
        ppo = PPOConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.pop("ppo", {}).items()})
        top = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        top.update({k: v for k, v in overrides.items() if v is not None})
        if "scenarios" in top:
            env = dataclasses.replace(env, scenarios=tuple(top.pop("scenarios")))
        return AgentConfig(env=env, ppo=ppo, **top)
    except TypeError as exc:
        raise ConfigError(where, str(exc)) from None
