"""What an episode runs: scenario, mode, load and arrival window, drawn from the env's generator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlsched.envs.checks import workload_seed
from rlsched.errors import ConfigError
from rlsched.run.seeds import TRAIN_SEEDS
from rlsched.sim import Request, Scenario, load_scenario
from rlsched.sim.cost import CostModel
from rlsched.sim.serving import MODES

_EMPTY_RETRIES = 20


@dataclass(frozen=True)
class EpisodeOptions:
    """The distribution episodes are drawn from (constructor arguments, or ``reset`` options)."""

    scenarios: tuple[str, ...] = ("default",)
    """Scenario names or paths; one is drawn uniformly per episode."""
    modes: tuple[str | None, ...] = (None,)
    """Execution modes drawn uniformly per episode; None: the scenario's own."""
    rate_scale: tuple[float, float] = (0.5, 1.5)
    """Arrival-rate multiplier, uniform in [low, high]."""
    window_s: tuple[float, float] | None = None
    """Arrival-window length, uniform in [low, high] seconds, placed at a uniform start
    inside the scenario; None: the whole scenario."""
    workload_seed: int | None = None
    """Fixed workload seed (e.g. >= 1000 to evaluate); None: drawn from TRAIN_SEEDS (0-899)."""

    def __post_init__(self) -> None:
        if not self.scenarios:
            raise ConfigError("env.scenario", "needs at least one scenario")
        bad = [m for m in self.modes if m is not None and m not in MODES]
        if bad or not self.modes:
            raise ConfigError("env.mode", f"modes must be among {MODES} (or None), not {list(self.modes)}")
        _check_range("env.rate_scale", self.rate_scale)
        if self.window_s is not None:
            _check_range("env.window_s", self.window_s)
        workload_seed("env.workload_seed", self.workload_seed)

    @classmethod
    def build(cls, scenario: str | Sequence[str] = "default", mode: str | Sequence[str | None] | None = None,
              rate_scale: float | Sequence[float] = (0.5, 1.5), window_s: float | Sequence[float] | None = None,
              workload_seed: int | None = None) -> EpisodeOptions:
        """From user-friendly forms: a name or a list, a number or a ``(low, high)`` range."""
        return cls(names(scenario), _modes(mode), _range("env.rate_scale", rate_scale),
                   None if window_s is None else _range("env.window_s", window_s), workload_seed)

    def merged(self, options: dict[str, Any] | None) -> EpisodeOptions:
        """These options with ``reset(options=...)`` overrides applied."""
        if not options:
            return self
        unknown = sorted(set(options) - {"scenario", "mode", "rate_scale", "window_s", "workload_seed"})
        if unknown:
            raise ConfigError("reset options", f"unknown keys {unknown}")
        current = {"scenario": self.scenarios, "mode": self.modes, "rate_scale": self.rate_scale,
                   "window_s": self.window_s, "workload_seed": self.workload_seed}
        return EpisodeOptions.build(**{**current, **options})


@dataclass(frozen=True)
class Episode:
    """One drawn episode and its workload."""

    scenario: Scenario
    cost: CostModel
    requests: list[Request]
    workload_seed: int
    rate_scale: float
    start_s: float
    """Arrivals before this time are dropped (the window starts with an empty GPU)."""
    end_s: float
    key: str = ""
    """The scenario as the sampler was given it (a shipped name or a file path; ``scenario.name`` is the
    YAML's own name, which a file's need not match)."""


class EpisodeSampler:
    """Draws episodes; scenarios and cost profiles are loaded once and cached."""

    def __init__(self) -> None:
        self._scenarios: dict[str, tuple[Scenario, CostModel]] = {}

    def load(self, name: str) -> tuple[Scenario, CostModel]:
        if name not in self._scenarios:
            sc = load_scenario(name)
            sc.require_one_gpu("the environment")
            self._scenarios[name] = (sc, sc.cost())
        return self._scenarios[name]

    def sample(self, opts: EpisodeOptions, rng: np.random.Generator) -> Episode:
        """A non-empty episode; retries with new draws when a window holds no arrival."""
        for _ in range(_EMPTY_RETRIES):
            episode = self._draw(opts, rng)
            if episode.requests:
                return episode
        raise ConfigError("env", f"no arrivals in {_EMPTY_RETRIES} drawn windows of {list(opts.scenarios)}")

    def _draw(self, opts: EpisodeOptions, rng: np.random.Generator) -> Episode:
        key = opts.scenarios[int(rng.integers(len(opts.scenarios)))]
        sc, cost = self.load(key)
        mode = opts.modes[int(rng.integers(len(opts.modes)))]
        if mode is not None and mode != sc.serving.mode:
            sc = sc.with_serving(mode=mode)
        scale = float(rng.uniform(*opts.rate_scale))
        window = sc.duration_s if opts.window_s is None else min(float(rng.uniform(*opts.window_s)), sc.duration_s)
        start = float(rng.uniform(0.0, sc.duration_s - window))
        seed = opts.workload_seed if opts.workload_seed is not None else int(rng.integers(TRAIN_SEEDS.stop))
        reqs = sc.requests(seed, scale, duration_s=start + window, cost=cost)
        if start > 0:
            reqs = [r for r in reqs if r.arrival_s >= start]
        return Episode(sc, cost, reqs, seed, scale, start, start + window, key)


def names(value: str | Sequence[str]) -> tuple[str, ...]:
    """One scenario (or pool) name or several, as the envs take them: always a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


def _modes(value: str | Sequence[str | None] | None) -> tuple[str | None, ...]:
    return (value,) if value is None or isinstance(value, str) else tuple(value)


def _range(field: str, value: float | Sequence[float]) -> tuple[float, float]:
    if isinstance(value, (int, float)):
        return float(value), float(value)
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(field, f"expected a number or (low, high), not {value!r}") from None
    return low, high


def _check_range(field: str, value: tuple[float, float]) -> None:
    low, high = value
    if not 0 < low <= high < float("inf"):
        raise ConfigError(field, f"needs 0 < low <= high < inf, not {value!r}")
