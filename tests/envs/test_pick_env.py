"""``DiTPick-v0``: masks, the paired reward against the shadow heuristic, the Gymnasium contract."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from rlsched.envs.pick import OBS_SIZE, DiTPickEnv  # noqa: E402

SCENARIOS = ["default", "bursty"]


def _env(**kw):  # type: ignore[no-untyped-def]
    return DiTPickEnv(SCENARIOS, {s: f"agents/tuned/{s}.json" for s in SCENARIOS}, window_s=(900.0, 1200.0), **kw)


def _episode(env: DiTPickEnv, seed: int, choose) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    obs, info = env.reset(seed=seed)
    total, done, info = 0.0, False, {}
    while not done:
        assert obs.shape == (OBS_SIZE,) and env.observation_space.contains(obs)
        mask = env.action_masks()
        assert mask[0] and mask.dtype == bool
        obs, reward, done, truncated, info = env.step(choose(mask))
        total += reward
    return total, info


def test_always_the_proposal_earns_exactly_the_shadow_heuristic_credit() -> None:
    env = _env()
    for seed in range(3):
        total, info = _episode(env, seed, lambda m: 0)
        assert total == pytest.approx(0.0, abs=1e-9)
        assert info["agent_credit"] == pytest.approx(info["shadow_credit"]) and info["deviations"] == 0
        assert info["decisions"] > 0


def test_the_return_is_the_difference_in_credit_whatever_the_agent_does() -> None:
    env = _env()
    rng = np.random.default_rng(0)
    differed = False
    for seed in range(4):
        total, info = _episode(env, seed, lambda m: int(rng.choice(np.flatnonzero(m))))
        assert total == pytest.approx(info["agent_credit"] - info["shadow_credit"], abs=1e-9)
        differed |= abs(total) > 1e-9
    assert differed  # random picks change the outcome: the reward is not constant


def test_gymnasium_env_checker_passes() -> None:
    from gymnasium.utils.env_checker import check_env

    check_env(_env(), skip_render_check=True)


def test_registered_with_gymnasium() -> None:
    import gymnasium as gym

    import rlsched.envs  # noqa: F401

    env = gym.make("rlsched/DiTPick-v0", scenarios=["default"], static={"default": "agents/tuned/default.json"},
                   window_s=(600.0, 900.0))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (OBS_SIZE,)
    assert env.unwrapped.action_masks()[0]
