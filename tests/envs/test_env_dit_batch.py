"""``rlsched/DiTBatch-v0``: API checkers, determinism, bounds, reward alignment, options."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest

from rlsched.envs import ENV_ID, MAX_EPISODE_STEPS
from rlsched.envs.dit_batch import DiTBatchEnv
from rlsched.errors import ConfigError
from rlsched.evaluation.seeds import TRAIN_SEEDS
from rlsched.learned.observation import OBS_DIM
from rlsched.policies.projected import ACTION_DIM
from rlsched.sim import load_scenario, scenario_names
from rlsched.sim.metrics import summarize

ONE_GPU = [n for n in scenario_names() if not load_scenario(n).replicas]
"""Scenarios of one GPU (the multi-replica ones run as stages: tests/sim/test_scenario_replicas.py)."""

SHORT = {"window_s": 900.0}


def rollout(env: gym.Env, seed: int, steps: int, action_seed: int = 0,
            options: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Observations and rewards of ``steps`` random-action steps (resetting at episode ends)."""
    rng = np.random.default_rng(action_seed)
    obs, _ = env.reset(seed=seed, options=options)
    observations, rewards = [obs], []
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(rng.uniform(-1, 1, ACTION_DIM).astype(np.float32))
        observations.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            observations.append(env.reset()[0])
    return np.array(observations), np.array(rewards)


def run_episode(env: gym.Env, seed: int, action: np.ndarray | None = None,
                options: dict | None = None) -> tuple[float, int, dict]:
    rng = np.random.default_rng(seed)
    env.reset(seed=seed, options=options)
    total, steps, done, info = 0.0, 0, False, {}
    while not done:
        a = action if action is not None else rng.uniform(-1, 1, ACTION_DIM)
        _, reward, terminated, truncated, info = env.step(a)
        total, steps, done = total + reward, steps + 1, terminated or truncated
    return total, steps, info


def test_passes_gymnasium_checker() -> None:
    from gymnasium.utils.env_checker import check_env
    check_env(gym.make(ENV_ID, **SHORT).unwrapped, skip_render_check=True)


def test_passes_sb3_checker() -> None:
    from stable_baselines3.common.env_checker import check_env
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SB3 warns about spaces it cannot learn from well
        check_env(DiTBatchEnv(**SHORT))


def test_registered_with_time_limit() -> None:
    env = gym.make(ENV_ID)
    assert env.spec.entry_point == "rlsched.envs.dit_batch:DiTBatchEnv"
    assert env.spec.max_episode_steps == MAX_EPISODE_STEPS
    assert env.observation_space.shape == (OBS_DIM,) and env.action_space.shape == (ACTION_DIM,)


def test_same_seed_same_trajectory() -> None:
    kwargs = {"scenario": ["default", "omni-mix"], "mode": ["request", "step"], **SHORT}
    obs_a, rew_a = rollout(gym.make(ENV_ID, **kwargs), seed=7, steps=300)
    obs_b, rew_b = rollout(gym.make(ENV_ID, **kwargs), seed=7, steps=300)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(rew_a, rew_b)
    obs_c, _ = rollout(gym.make(ENV_ID, **kwargs), seed=8, steps=300)
    assert obs_c.shape != obs_a.shape or not np.array_equal(obs_a, obs_c)


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("scenario", ONE_GPU)
def test_observations_finite_and_in_bounds(scenario: str, mode: str) -> None:
    env = gym.make(ENV_ID, scenario=scenario, mode=mode, rate_scale=(1.0, 2.0), window_s=(600.0, 3600.0))
    obs, rewards = rollout(env, seed=3, steps=150)
    assert np.isfinite(obs).all() and obs.min() >= -5.0 and obs.max() <= 5.0
    assert all(env.observation_space.contains(o) for o in obs)
    assert np.isfinite(rewards).all() and (np.abs(rewards) <= 1.0).all()


def test_return_is_the_evaluation_metric_without_penalty() -> None:
    env = gym.make(ENV_ID, late_penalty=0.0, window_s=3600.0, rate_scale=1.5)
    total, _, info = run_episode(env, seed=1)
    assert total == pytest.approx(summarize(env.unwrapped.sim)["weighted_slo_attainment"], abs=1e-12)
    assert info["weighted_slo_attainment"] == pytest.approx(total, abs=1e-12)


def test_late_penalty_lowers_the_return_once_per_request() -> None:
    kwargs = {"window_s": 3600.0, "rate_scale": 2.0}
    plain, _, _ = run_episode(gym.make(ENV_ID, late_penalty=0.0, **kwargs), seed=2)
    env = gym.make(ENV_ID, late_penalty=1.0, **kwargs)
    shaped, _, _ = run_episode(env, seed=2)
    missed = 1.0 - plain  # weighted share of requests that missed
    assert plain - missed - 1e-9 <= shaped < plain


def test_auto_resolve_changes_steps_not_outcomes() -> None:
    action = np.full(ACTION_DIM, 0.3, dtype=np.float32)
    outcomes = []
    for auto in (True, False):
        env = gym.make(ENV_ID, mode="step", auto_resolve=auto, window_s=1200.0, max_episode_steps=100_000)
        total, steps, _ = run_episode(env, seed=4, action=action)
        outcomes.append((total, steps, summarize(env.unwrapped.sim)["weighted_slo_attainment"]))
    (total_a, steps_a, metric_a), (total_b, steps_b, metric_b) = outcomes
    assert steps_a < steps_b
    assert total_a == pytest.approx(total_b, abs=1e-12) and metric_a == metric_b


def test_options_select_the_episode() -> None:
    env = gym.make(ENV_ID, **SHORT)
    _, info = env.reset(seed=0, options={"scenario": "omni-mix", "mode": "step", "rate_scale": 0.7})
    assert (info["scenario"], info["mode"], info["rate_scale"]) == ("omni-mix", "step", 0.7)
    assert info["workload_seed"] in TRAIN_SEEDS
    start, end = info["window_s"]
    assert end - start == 900.0
    _, info = env.reset(options={"workload_seed": 1234})
    assert info["workload_seed"] == 1234 and info["scenario"] == "default"
    _, _, _, _, info = env.step(env.action_space.sample())
    assert {"batch_size", "class_weights", "slo_attainment", "weighted_slo_attainment", "auto_resolved"} <= set(info)


def test_bad_options_raise_typed_errors() -> None:
    env = gym.make(ENV_ID)
    with pytest.raises(ConfigError, match="unknown keys"):
        env.reset(options={"scenarios": "default"})
    with pytest.raises(ConfigError, match="rate_scale"):
        env.reset(options={"rate_scale": (2.0, 1.0)})
    with pytest.raises(ConfigError, match="mode"):
        DiTBatchEnv(mode="turbo")
    with pytest.raises(ConfigError, match="scenario not found"):
        env.reset(options={"scenario": "no-such-scenario"})
