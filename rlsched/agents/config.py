"""Agent presets (``agents/*.yaml``): environment, PPO hyperparameters, evaluation.

Pydantic models on the recipes' ``Strict`` base (unknown keys refused, frozen), read by
``agent_config_from_dict``: an invalid field is a ``ConfigError`` naming the file and the field
(``ppo.n_steps``), and a number is never a string or a boolean (``n_steps: "512"``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    PlainValidator,
    StrictBool,
    ValidationError,
    field_validator,
)

from rlsched import bounds
from rlsched.agents.paths import preset_paths_beside
from rlsched.atomic import input_file
from rlsched.errors import ConfigError
from rlsched.resources import data_dir, shipped_path
from rlsched.sim.schema import Strict, schema_error
from rlsched.sim.yamlio import read_yaml

AGENTS_DIR = data_dir("agents")
M = TypeVar("M", bound=BaseModel)


def _a_number(value: Any) -> Any:
    # pydantic reads "512" and true as numbers; a preset's number is written as one
    if isinstance(value, (bool, str)):
        raise ValueError("must be a number")
    return value


Int = Annotated[int, BeforeValidator(_a_number)]


def _finite_number(value: Any) -> Any:
    _a_number(value)
    if not isinstance(value, (int, float)):
        raise ValueError("must be a number")
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def rate_scales(value: tuple[float, ...]) -> tuple[float, ...]:
    """Rate scales a preset runs at: at least one, each in ``bounds.SCALE`` (a negative rate ran minutes of
    labelling before the simulator refused it)."""
    if not value or not all(bounds.SCALE.holds(v) for v in value):
        raise ValueError(f"must list rate scales, each {bounds.SCALE.describe()}, not {list(value)}")
    return value


def load_range(value: tuple[float, float]) -> tuple[float, float]:
    """A load range ``[low, high]``: rate scales with ``low <= high`` (a reversed one was drawn from, or
    failed, only once the work had started)."""
    if rate_scales(value)[0] > value[1]:
        raise ValueError(f"must be [low, high] with low <= high, not {list(value)}")
    return value


def read_preset(path: str | Path) -> dict[str, Any]:
    """A preset's parsed YAML: a mapping of fields (empty: every default); a list or a scalar is refused
    naming the file (``.get`` on it was an ``AttributeError`` traceback)."""
    data = read_yaml(Path(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), f"a preset is a mapping of fields (name: value), not a {type(data).__name__}")
    return data


def check_inputs(where: str, scenarios: dict[str, Sequence[str]], tuned: dict[str, str]) -> None:
    """Every scenario (``scenarios``: field -> names) and tuned action file (``tuned``: field -> path) a
    recipe will read, read now: a typo or a missing file fails before any work, naming the preset and the
    field, not after minutes or hours of labelling."""
    from rlsched.policies.static import load_static
    from rlsched.sim import load_scenario

    for field, names in scenarios.items():
        for name in names:
            _named(f"{where}: {field}", load_scenario, name)
    for field, path in tuned.items():
        _named(f"{where}: {field}", load_static, path)


def _named(where: str, read: Callable[[str], Any], name: str) -> None:
    try:
        read(name)
    except ConfigError as exc:
        raise ConfigError(where, str(exc)) from None


Float = Annotated[float, PlainValidator(_finite_number)]
"""A finite number, kept as written (7200 stays an int): the preset is recorded in the checkpoint's
content hash, so validating it must not turn 7200 into 7200.0 (the shipped knob policy's hash would change)."""
STEP_COUNTS = {"timesteps": " (--timesteps)", "n_envs": " (--n-envs)", "checkpoint_every": "", "eval_every": ""}
"""``AgentConfig``'s step counts (each an integer >= 1) and the flag that sets each."""
ACTIVATIONS = ("tanh", "relu")


class EnvConfig(Strict):
    """What each training episode looks like."""

    scenarios: tuple[str, ...] = ("default",)
    """Scenarios sampled per episode (one policy serves them all)."""
    rate_scale_range: Annotated[tuple[Float, Float], AfterValidator(load_range)] = (0.5, 1.5)
    """Load sampled uniformly per episode."""
    episode_s: Float | None = None
    """Arrival window per episode in simulated seconds (None: the env's default)."""
    max_episode_steps: Int = Field(default=512, ge=1)
    """Decisions per episode (TimeLimit)."""
    projection: dict[str, Any] = Field(default_factory=dict)
    """Overrides of ``ProjectionConfig`` (e.g. starvation_threshold_s)."""


class PPOConfig(Strict):
    """stable-baselines3 PPO hyperparameters."""

    learning_rate: Float = 3e-4
    n_steps: Int = Field(default=512, ge=1)
    """Rollout length per environment."""
    batch_size: Int = Field(default=256, ge=1)
    n_epochs: Int = Field(default=5, ge=1)
    gamma: Float = 0.99
    gae_lambda: Float = 0.95
    clip_range: Float = 0.2
    ent_coef: Float = 0.0
    vf_coef: Float = 0.5
    max_grad_norm: Float = 0.5
    net_arch: tuple[Int, ...] = (64, 64)
    activation: str = "tanh"
    """``tanh`` or ``relu`` (the exported network supports both)."""
    log_std_init: Float = -0.5
    init_action_from: tuple[str, ...] = ()
    """Tuned ``static`` files (``rlsched tune``); the mean of their actions initialises the
    action head's bias, so training starts from the tuned heuristic and learns
    state-dependent corrections. Empty: SB3's default (action ≈ 0)."""
    bc_steps_per_scenario: Int = Field(default=0, ge=0)
    """> 0: behaviour-clone each scenario's tuned action (files in ``init_action_from``
    named after the scenarios) on this many demonstration steps per scenario first."""
    bc_epochs: Int = Field(default=10, ge=0)

    @field_validator("activation", mode="before")
    @classmethod
    def _an_activation(cls, value: Any) -> str:
        if value not in ACTIVATIONS:
            raise ConfigError("ppo.activation", f"must be tanh or relu, not {value!r}")
        return value


class AgentConfig(Strict):
    """One training run, serialised beside its results."""

    name: str = "ppo"
    env: EnvConfig = Field(default_factory=EnvConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    n_envs: int = 2
    """Environments stepped together per rollout."""
    subproc: StrictBool = False
    """Run environments in worker processes (SubprocVecEnv, forkserver). On 2 cores the
    in-process DummyVecEnv is faster: env steps take ~0.25 ms, less than the IPC."""
    timesteps: int = 200_000
    normalize_obs: StrictBool = True
    """Running observation normalisation (exported with the policy)."""
    checkpoint_every: int = 20_000
    eval_every: int = 20_000
    """Steps between eval/ points (policy and baselines on the validation seeds)."""
    eval_seeds: tuple[Int, ...] = (900, 901)
    """Validation seeds for curves during training: not training seeds, not evaluation seeds."""
    eval_rate_scale: Annotated[Float, AfterValidator(lambda v: rate_scales((v,))[0])] = 1.0
    eval_baselines: tuple[str, ...] = ("fifo", "edf")
    eval_duration_s: Float | None = 7200.0

    @field_validator(*STEP_COUNTS, mode="before")
    @classmethod
    def _steps(cls, value: Any, info: Any) -> int:
        """The step counts a run relies on: ``timesteps: -5`` used to "train" nothing and leave an
        untrained network to export, ``checkpoint_every: 0`` to fail at the first step."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            name = info.field_name
            raise ConfigError(f"agent.{name}{STEP_COUNTS[name]}", f"must be an integer >= 1, not {value!r}")
        return value

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def check_inputs(self, where: str) -> None:
        """Every scenario, tuned file and baseline this run reads, read before any work (``recipe.check_inputs``)."""
        from rlsched.policies import make_policy

        check_inputs(where, {"env.scenarios": self.env.scenarios},
                     {f"ppo.init_action_from[{i}]": f for i, f in enumerate(self.ppo.init_action_from)})
        for name in self.eval_baselines:
            try:
                make_policy(name)
            except ConfigError as exc:
                raise ConfigError(f"{where}: eval_baselines", str(exc)) from None


def load_agent_config(path: str | Path, **overrides: Any) -> AgentConfig:
    """Load ``agents/NAME.yaml`` (or a path); ``overrides`` replace top-level fields."""
    p = Path(path)
    p = AGENTS_DIR / f"{path}.yaml" if not p.suffix else shipped_path(p)  # agents/x.yaml from any folder
    input_file(p, "agent preset", str(path))
    data = preset_paths_beside(read_preset(p), p.parent)
    return agent_config_from_dict(data, str(p), **overrides)


def agent_config_from_dict(data: dict[str, Any], where: str, **overrides: Any) -> AgentConfig:
    """``data`` (a preset's mapping) with ``overrides`` that are not None; a top-level ``scenarios``
    (``--scenario``) replaces ``env.scenarios``."""
    kind = data.pop("kind", "knob")  # what `rlsched learn` reads to choose this recipe (agents/recipe.py)
    if kind != "knob":
        raise ConfigError(where, f"kind {kind!r}: a PPO agent preset is the knob policy's (kind: knob)")
    top = {**data, **{k: v for k, v in overrides.items() if v is not None}}
    env = top.get("env", {})
    if "scenarios" in top and isinstance(env, Mapping):
        top["env"] = {**env, "scenarios": top.pop("scenarios")}
    return validated(AgentConfig, top, where)


def validated(model: type[M], data: Mapping[str, Any], where: str) -> M:
    """``model`` from ``data``; an invalid field is a ``ConfigError`` naming ``where`` and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise schema_error(exc, where) from None
