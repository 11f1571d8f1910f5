"""The three Gymnasium ids check their arguments and their actions alike (issue 47): DiTRoute-v0 checked
none (a reversed or negative rate_scale, a negative burn-in, a bad workload seed, reset options ignored; an
action past the last slot an IndexError, a negative one a silent index from the end); DiTPick-v0 checked
its episode arguments only at the first reset, and no action; DiTBatch-v0 took an action of any shape."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from rlsched.envs import ENV_ID, PICK_ENV_ID, ROUTE_ENV_ID  # noqa: E402
from rlsched.errors import ConfigError, InvalidDecision  # noqa: E402

ARGS = {ENV_ID: {"scenario": "default", "window_s": (600.0, 900.0)},
        PICK_ENV_ID: {"scenario": "default", "static": {"default": "agents/tuned/default.json"},
                      "window_s": (900.0, 1200.0)},
        ROUTE_ENV_ID: {"pools": "qwen-image-8gpu", "static": {"qwen-image-8gpu": "agents/tuned/default.json"},
                       "window_s": (900.0, 1200.0)}}
IDS = list(ARGS)


def make(env_id: str, **kw: Any) -> Any:
    return gym.make(env_id, **{**ARGS[env_id], **kw}).unwrapped


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("kw, field", [
    ({"rate_scale": (1.5, 0.5)}, "env.rate_scale"),
    ({"rate_scale": -1.0}, "env.rate_scale"),
    ({"rate_scale": "fast"}, "env.rate_scale"),
    ({"window_s": (900.0, 0.0)}, "env.window_s"),
    ({"workload_seed": -1}, "env.workload_seed"),
    ({"workload_seed": True}, "env.workload_seed"),
    ({"workload_seed": 2**70}, "env.workload_seed"),
])
def test_every_env_refuses_the_same_bad_episode_argument_at_construction(env_id: str, kw: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{field}: "):
        make(env_id, **kw)


@pytest.mark.parametrize("env_id, kw, message", [
    (PICK_ENV_ID, {"burn_in_s": -1.0}, "pick.burn_in_s: must be a finite number >= 0, not -1.0"),
    (ROUTE_ENV_ID, {"burn_in_s": float("nan")}, "router.burn_in_s: must be a finite number >= 0, not nan"),
    (ENV_ID, {"late_penalty": -0.5}, "env.late_penalty: must be a finite number >= 0, not -0.5"),
    (ENV_ID, {"scenario": "no-such-scenario"}, "scenario not found"),
    (PICK_ENV_ID, {"scenario": "no-such-scenario", "static": {"no-such-scenario": "x.json"}}, "scenario not found"),
    (ROUTE_ENV_ID, {"pools": "no-such-pool", "static": {"no-such-pool": "x.json"}}, "scenario not found"),
    (PICK_ENV_ID, {"static": {"default": "nowhere.json"}}, "tuned action file not found"),
    (ROUTE_ENV_ID, {"static": {"qwen-image-8gpu": "nowhere.json"}}, "tuned action file not found"),
])
def test_the_rest_of_the_arguments_are_checked_at_construction(env_id: str, kw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make(env_id, **kw)


@pytest.mark.parametrize("env_id", [PICK_ENV_ID, ROUTE_ENV_ID])
def test_reset_options_are_checked_alike(env_id: str) -> None:
    env = make(env_id)
    with pytest.raises(ConfigError, match="env.rate_scale"):
        env.reset(seed=0, options={"rate_scale": (2.0, 1.0)})
    with pytest.raises(ConfigError, match="unknown keys"):
        env.reset(seed=0, options={"rate": 1.0})
    with pytest.raises(ConfigError, match="no tuned action file for"):
        env.reset(seed=0, options={"scenario": "bursty"})


def test_a_route_reset_refuses_a_mode() -> None:
    with pytest.raises(ConfigError, match="reset options: mode: DiTRoute-v0 runs each pool in its own mode"):
        make(ROUTE_ENV_ID).reset(seed=0, options={"mode": "step"})


@pytest.mark.parametrize("env_id, n", [(PICK_ENV_ID, None), (ROUTE_ENV_ID, None)])
@pytest.mark.parametrize("action", [-1, "last+1", 1.5, "0", None, True, [0, 1]])
def test_a_discrete_action_outside_its_space_is_refused(env_id: str, n: Any, action: Any) -> None:
    env = make(env_id)
    env.reset(seed=0)
    size = env.action_space.n
    bad = size if action == "last+1" else action
    with pytest.raises(InvalidDecision, match=f"{env_id}: action .* is not in its action space Discrete\\({size}\\)"):
        env.step(bad)
    obs, *_ = env.step(np.int64(0))  # the env is unharmed
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("action", [np.zeros(3), np.zeros((9, 1)), "fast", None, [0.0] * 10])
def test_a_box_action_of_the_wrong_shape_is_refused(action: Any) -> None:
    env = make(ENV_ID)
    env.reset(seed=0)
    with pytest.raises(InvalidDecision, match=r"rlsched/DiTBatch-v0: action .* is not in its action space "
                                              r"Box\(-1, 1, \(9,\)\) \(9 numbers\)"):
        env.step(action)
    obs, *_ = env.step(np.full(9, 7.0))  # within the shape, values are clipped (the docstring's rule)
    assert env.observation_space.contains(obs)
