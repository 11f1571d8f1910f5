"""Behaviour cloning teaches one network each scenario's tuned action."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from rlsched.agents.config import agent_config_from_dict  # noqa: E402
from rlsched.agents.pretrain import clone, demonstrations, tuned_actions  # noqa: E402
from rlsched.agents.train import build_model, build_vec_env  # noqa: E402
from rlsched.errors import ConfigError  # noqa: E402

CFG = {
    "env": {"scenarios": ["default", "video-mix"], "max_episode_steps": 64,
            "projection": {"starvation_threshold_s": 300.0, "starvation_slo_multiple": 2.0}},
    "ppo": {"n_steps": 64, "batch_size": 64, "net_arch": [32, 32],
            "init_action_from": ["agents/tuned/default.json", "agents/tuned/video-mix.json"],
            "bc_steps_per_scenario": 300, "bc_epochs": 30},
    "n_envs": 1,
}


def test_clone_fits_each_scenarios_action(tmp_path) -> None:
    cfg = agent_config_from_dict(dict(CFG, env=dict(CFG["env"]), ppo=dict(CFG["ppo"])), "test")
    venv = build_vec_env(cfg, seed=0)
    model = build_model(cfg, venv, tmp_path, seed=0)
    clone(model, venv, cfg, seed=0)
    obs, act = demonstrations(cfg, seed=1)  # fresh rollouts of the same actions
    pred, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
    targets = tuned_actions(cfg)
    assert not np.allclose(targets["default"], targets["video-mix"], atol=0.1)
    assert float(np.mean((pred - act) ** 2)) < 0.05  # the network tells the scenarios apart


def test_clone_needs_a_tuned_action_per_scenario() -> None:
    bad = dict(CFG, ppo=dict(CFG["ppo"], init_action_from=["agents/tuned/default.json"]))
    with pytest.raises(ConfigError, match="video-mix"):
        tuned_actions(agent_config_from_dict(dict(bad, env=dict(CFG["env"])), "test"))
