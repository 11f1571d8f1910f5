"""PPO training over vectorised DiT-batch environments, with TensorBoard and resume."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlsched.agents.checkpointing import BEST, LAST, PeriodicCheckpoint, load_obs_norm
from rlsched.agents.config import AgentConfig
from rlsched.agents.reproducible import PROVENANCE_FILE
from rlsched.atomic import write_atomic
from rlsched.errors import ConfigError


def make_env_fn(cfg: AgentConfig, rank: int, seed: int) -> Any:
    """A picklable thunk for (Subproc|Dummy)VecEnv."""
    return _EnvThunk(cfg, rank, seed)


class _EnvThunk:
    def __init__(self, cfg: AgentConfig, rank: int, seed: int) -> None:
        self.cfg, self.rank, self.seed = cfg, rank, seed

    def __call__(self) -> Any:
        import gymnasium as gym
        import torch
        from stable_baselines3.common.monitor import Monitor

        import rlsched.envs  # noqa: F401  (registers the env)
        from rlsched.policies.projected import ProjectionConfig

        torch.set_num_threads(1)
        e = self.cfg.env
        env = gym.make("rlsched/DiTBatch-v0", max_episode_steps=e.max_episode_steps, scenario=list(e.scenarios),
                       rate_scale=tuple(e.rate_scale_range), window_s=e.episode_s,
                       projection=ProjectionConfig(**e.projection))
        env = Monitor(env)
        env.reset(seed=self.seed + 7919 * self.rank)
        env.action_space.seed(self.seed + self.rank)
        return env


def build_vec_env(cfg: AgentConfig, seed: int) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    fns = [make_env_fn(cfg, i, seed) for i in range(cfg.n_envs)]
    venv = SubprocVecEnv(fns, start_method="forkserver") if cfg.subproc and cfg.n_envs > 1 else DummyVecEnv(fns)
    return VecNormalize(venv, norm_obs=cfg.normalize_obs, norm_reward=True, clip_obs=5.0, gamma=cfg.ppo.gamma)


def build_model(cfg: AgentConfig, env: Any, run_dir: Path, seed: int) -> Any:
    import torch
    from stable_baselines3 import PPO

    p = cfg.ppo
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[p.activation]  # PPOConfig allows these two
    model = PPO("MlpPolicy", env, learning_rate=p.learning_rate, n_steps=p.n_steps, batch_size=p.batch_size,
               n_epochs=p.n_epochs, gamma=p.gamma, gae_lambda=p.gae_lambda, clip_range=p.clip_range,
               ent_coef=p.ent_coef, vf_coef=p.vf_coef, max_grad_norm=p.max_grad_norm, seed=seed, device="cpu",
               policy_kwargs={"net_arch": list(p.net_arch), "activation_fn": act, "log_std_init": p.log_std_init},
               tensorboard_log=str(run_dir / "tb"), verbose=0)
    if p.init_action_from:
        with torch.no_grad():
            model.policy.action_net.get_parameter("bias").copy_(torch.as_tensor(initial_action(p.init_action_from)))
    return model


def initial_action(paths: tuple[str, ...]) -> np.ndarray:
    """Mean action of tuned ``static`` files (paths relative to the project root allowed)."""
    from rlsched.agents.pretrain import read_tuned_actions

    return np.mean(list(read_tuned_actions(paths).values()), axis=0).astype(np.float32)


def train(cfg: AgentConfig, run_dir: Path, seed: int = 0, resume: bool = False, progress: bool = True) -> Path:
    """Train (or resume) a run; returns the folder of the final checkpoint."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError("--run-dir", f"{run_dir} is a file; name a folder")
    if cfg.ppo.bc_steps_per_scenario and not resume:
        from rlsched.agents.pretrain import tuned_actions

        tuned_actions(cfg)  # a missing tuned action is said now, not after the environments start
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import CallbackList

    from rlsched.agents.callbacks import BaselineEval, HyperparamText, SchedulerMetrics
    from rlsched.agents.reproducible import seed_everything
    from rlsched.agents.validation import validation_eval

    seed_everything(seed)  # SB3 seeds again with the same seed; this covers what runs before it does
    run_dir.mkdir(parents=True, exist_ok=True)
    _record_provenance(run_dir, resume)
    start = time.perf_counter()  # train_time.json: behaviour cloning + PPO
    venv = build_vec_env(cfg, seed)
    last = run_dir / LAST
    if resume and (last / "model.zip").is_file():
        model = PPO.load(last / "model.zip", env=venv, device="cpu")  # our own run dir: trusted
        load_obs_norm(venv, last / "obs_norm.npz")
        done = model.num_timesteps
    else:
        if resume:
            raise ConfigError(str(run_dir), "--resume: no checkpoint in this run dir")
        model = build_model(cfg, venv, run_dir, seed)
        done = 0
        if cfg.ppo.bc_steps_per_scenario:
            from rlsched.agents.pretrain import clone

            mse = clone(model, venv, cfg, seed)
            write_atomic(run_dir / "pretrain.json", json.dumps({"behaviour_cloning_mse": mse}))
    write_atomic(run_dir / "config.yaml", yaml.safe_dump({"agent": cfg.to_dict(), "seed": seed}, sort_keys=False))
    evaluate = validation_eval(cfg)
    callbacks = CallbackList([
        HyperparamText(yaml.safe_dump(cfg.to_dict(), sort_keys=False)),
        SchedulerMetrics(),
        BaselineEval(cfg.eval_every, evaluate, cfg.eval_baselines, lambda: current_policy(model, venv, cfg),
                     on_best=lambda score: _save_best(model, venv, run_dir, score)),
        PeriodicCheckpoint(cfg.checkpoint_every, run_dir, venv),
    ])
    model.learn(total_timesteps=max(cfg.timesteps - done, 0), callback=callbacks, progress_bar=progress,
                reset_num_timesteps=not resume, tb_log_name="ppo")
    PeriodicCheckpoint.save(model, venv, last)
    write_atomic(run_dir / "train_time.json", json.dumps(
        {"seconds": time.perf_counter() - start, "timesteps": int(model.num_timesteps)}))
    venv.close()
    return last


def _record_provenance(run_dir: Path, resume: bool) -> None:
    from rlsched.agents.reproducible import provenance

    path = run_dir / PROVENANCE_FILE
    entries = json.loads(path.read_text()) if resume and path.is_file() else []
    write_atomic(path, json.dumps([*entries, provenance()], indent=1))


def _save_best(model: Any, venv: Any, run_dir: Path, score: float) -> None:

    # validation.json travels with the weights: a crash never leaves one without the other
    PeriodicCheckpoint.save(model, venv, run_dir / BEST, {"validation.json": json.dumps(
        {"timesteps": int(model.num_timesteps), "weighted_slo_attainment": score})})


def current_policy(model: Any, venv: Any, cfg: AgentConfig) -> Any:
    """The model as a SchedulingPolicy (deterministic actions), for evaluation during training."""
    from rlsched.learned.knob import LearnedPolicy
    from rlsched.policies.projected import ProjectionConfig

    def act(obs: np.ndarray) -> np.ndarray:
        norm = venv.normalize_obs(obs[None, :]) if cfg.normalize_obs else obs[None, :]
        action, _ = model.predict(norm, deterministic=True)
        return action[0]

    return LearnedPolicy(act, ProjectionConfig(**cfg.env.projection))


def load_knob_config(path: str | Path, workers: int | None = None, ray: Any = None) -> AgentConfig:
    """``rlsched learn``'s loader for a knob preset (``kind: knob``, e.g. agents/ppo.yaml); the knob recipe
    steps its environments in this process (``n_envs``), so ``--workers`` and ``--ray`` mean nothing to it."""
    from rlsched.agents.config import load_agent_config

    if workers is not None or ray is not None:
        raise ConfigError("--workers/--ray", f"{path}: the knob recipe steps its environments itself (n_envs)")
    return load_agent_config(path)


def learn_knob(cfg: AgentConfig, run_dir: Path, out: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """The knob policy end to end, as ``rlsched learn`` runs every recipe: ``train`` (behaviour cloning, PPO,
    the best checkpoint on the validation seeds), then ``export`` of that best to ``out``."""
    start = time.perf_counter()
    train(cfg, run_dir, seed=0, progress=progress)
    best = run_dir / BEST / "validation.json"
    report = {"chosen": BEST if best.is_file() else LAST,
              "validation": json.loads(best.read_text()) if best.is_file() else {},
              "checkpoint": None}
    if out is not None:
        from rlsched.agents.export import export_run

        report["checkpoint"] = str(export_run(run_dir, out))
    report["total_s"] = time.perf_counter() - start
    write_atomic(run_dir / "learn.json", json.dumps(report, indent=1))
    return report
