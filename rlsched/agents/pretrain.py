"""Behaviour cloning of the per-scenario tuned ``static`` actions before PPO.

One learned policy serves every scenario, but the tuned heuristic is tuned *per
scenario*. Cloning first teaches the network the tuned action of whichever scenario
its observation looks like (the observation carries the mode, the modality mix and
the load), so PPO starts at least as good as the per-scenario heuristic instead of
at their mean. Demonstrations are rollouts of the tuned actions in the training
environment (training seeds only); the loss is the MSE between the actor's mean
action and the demonstrated one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.agents.config import AgentConfig
from rlsched.atomic import input_file
from rlsched.errors import ConfigError
from rlsched.resources import shipped_path


def read_tuned_actions(paths: tuple[str, ...]) -> dict[str, np.ndarray]:
    """File stem → action of tuned ``static`` files (paths relative to the project root allowed)."""
    out = {}
    for name in paths:
        path = input_file(shipped_path(name), "init_action_from: tuned file", name, " (run `rlsched tune`)")
        out[Path(name).stem] = np.asarray(json.loads(path.read_text())["action"], dtype=np.float32)
    return out


def tuned_actions(cfg: AgentConfig) -> dict[str, np.ndarray]:
    """Scenario name → tuned action, from ``ppo.init_action_from`` (files named after scenarios)."""
    out = read_tuned_actions(cfg.ppo.init_action_from)
    missing = [sc for sc in cfg.env.scenarios if Path(sc).stem not in out]
    if missing:
        raise ConfigError("ppo.init_action_from", f"behaviour cloning needs a tuned action for {missing}: "
                          "make one with rlsched tune --scenario SCENARIO --out agents/tuned/NAME.json (NAME: "
                          "the scenario's file stem) and list it here, or set ppo.bc_steps_per_scenario: 0")
    return out


def demonstrations(cfg: AgentConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(observations, actions) from rolling out each scenario's tuned action."""
    import gymnasium as gym

    import rlsched.envs  # noqa: F401
    from rlsched.policies.projected import ProjectionConfig

    actions = tuned_actions(cfg)
    obs_out, act_out = [], []
    for i, sc in enumerate(cfg.env.scenarios):
        env = gym.make("rlsched/DiTBatch-v0", max_episode_steps=cfg.env.max_episode_steps, scenario=sc,
                       rate_scale=tuple(cfg.env.rate_scale_range), window_s=cfg.env.episode_s,
                       projection=ProjectionConfig(**cfg.env.projection))
        target = actions[Path(sc).stem]
        obs, _ = env.reset(seed=seed + 104729 * (i + 1))
        for _ in range(cfg.ppo.bc_steps_per_scenario):
            obs_out.append(obs)
            act_out.append(target)
            obs, _, terminated, truncated, _ = env.step(target)
            if terminated or truncated:
                obs, _ = env.reset()
        env.close()
    return np.asarray(obs_out, dtype=np.float32), np.asarray(act_out, dtype=np.float32)


def clone(model: Any, venv: Any, cfg: AgentConfig, seed: int) -> float:
    """Fit the actor's mean action to the demonstrations; returns the final MSE."""
    import torch

    obs, act = demonstrations(cfg, seed)
    if cfg.normalize_obs:
        venv.obs_rms.update(obs)  # the statistics PPO starts from, and exports
        obs = venv.normalize_obs(obs)
    x, y = torch.as_tensor(obs), torch.as_tensor(act)
    policy = model.policy
    optim = torch.optim.Adam(policy.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(seed)
    loss = torch.tensor(0.0)
    for _ in range(cfg.ppo.bc_epochs):
        for idx in torch.randperm(len(x), generator=gen).split(256):
            latent_pi, _ = policy.mlp_extractor(policy.extract_features(x[idx], policy.pi_features_extractor))
            loss = torch.nn.functional.mse_loss(policy.action_net(latent_pi), y[idx])
            optim.zero_grad()
            loss.backward()
            optim.step()
    return float(loss.detach())
