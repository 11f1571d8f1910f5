"""``rlsched bench env``: environment steps per second (what bounds training speed)."""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np

from rlsched.bench import bench, median_time
from rlsched.envs import ENV_ID
from rlsched.policies.projected import ACTION_DIM

STEPS = 4000


@bench("env")
def env_speed(args: argparse.Namespace) -> dict[str, Any]:
    """Steps/s of ``gym.make(ENV_ID)`` on ``default`` with random actions, resets included, one core."""
    env = gym.make(ENV_ID, scenario="default")
    actions = np.random.default_rng(0).uniform(-1, 1, (STEPS, ACTION_DIM)).astype(np.float32)
    episodes = _run(env, actions[:200])  # warm-up: imports, caches
    counts: list[int] = []
    secs = median_time(lambda: counts.append(_run(env, actions)), args.repeats)
    return {"env": ENV_ID, "scenario": "default", "steps": STEPS, "seconds": round(secs, 4),
            "steps_per_s": round(STEPS / secs), "episodes_per_repeat": counts[-1] if counts else episodes}


def _run(env: gym.Env, actions: np.ndarray) -> int:
    """Step through ``actions`` (resetting at episode ends); returns the episodes started."""
    env.reset(seed=0)
    episodes = 1
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
            episodes += 1
    return episodes
