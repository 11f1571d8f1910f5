"""``rlsched/DiTRoute-v0``: the learned router's environment (paired reward against rlsched's router)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlsched.envs import ROUTE_ENV_ID
from rlsched.envs.route import OBS_SIZE, DiTRouteEnv
from rlsched.policies import make_policy
from rlsched.routing.routers import RoundRobin
from rlsched.sim.stage import Stage
from tests.sim.test_stage import outcome, replicas, workload

POOLS = ["qwen-image-8gpu", "qwen-image-hetero"]
STATIC = {p: "agents/tuned/default.json" for p in POOLS}


def test_always_rlscheds_choice_returns_exactly_zero_and_random_routing_loses() -> None:
    env = DiTRouteEnv(POOLS, STATIC, rate_scale=(1.3, 1.5), window_s=(900.0, 1200.0))
    obs, info = env.reset(seed=3)
    assert info["alive"] and obs.shape == (OBS_SIZE,) and env.observation_space.contains(obs)
    total, done = 0.0, False
    while not done:
        assert env.action_masks()[0]
        obs, r, done, _, step = env.step(np.int64(0))
        total += r
    assert total == pytest.approx(0.0, abs=1e-9) and step["deviations"] == 0 and step["shadow_credit"] > 0
    env.reset(seed=3)
    rng, total, done = np.random.default_rng(0), 0.0, False
    while not done:
        mask = env.action_masks()
        assert mask.sum() >= 2 and not mask[8:].any()
        _, r, done, _, step = env.step(np.int64(rng.choice(np.flatnonzero(mask))))
        total += r
    assert total == pytest.approx(step["agent_credit"] - step["shadow_credit"]) and total < 0


def test_the_environment_is_registered_and_needs_a_reset() -> None:
    env = gym.make(ROUTE_ENV_ID, pools=POOLS, static=STATIC)
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step(np.int64(0))
    with pytest.raises(Exception, match="no replica policy"):
        DiTRouteEnv(POOLS, {"qwen-image-8gpu": "agents/tuned/default.json"})


def test_gymnasiums_env_checker_passes() -> None:
    """The third env beside DiTBatch and DiTPick: spaces, seeding, reset/step signatures (Gymnasium's own)."""
    from gymnasium.utils.env_checker import check_env

    check_env(DiTRouteEnv(POOLS, STATIC), skip_render_check=True)


def test_routing_by_hand_is_run_with_a_router() -> None:
    """``Stage.routing`` sends each arrival's replica; driven by a router it is ``run``."""
    reqs = workload(150, seed=2)
    ran = Stage(reqs, replicas(3)).run([make_policy("edf") for _ in range(3)], RoundRobin())
    stage = Stage(reqs, replicas(3))
    steps, n = stage.routing([make_policy("edf") for _ in range(3)]), 0
    try:
        next(steps)
        while True:
            steps.send(n % 3)
            n += 1
    except StopIteration:
        pass
    assert n + 1 == len(reqs) and outcome(stage.records) == outcome(ran.records) and stage.routed == ran.routed
