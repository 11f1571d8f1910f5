"""Training writes TensorBoard scalars, resumes, and exports a frozen policy equal to SB3's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from rlsched.agents.config import agent_config_from_dict  # noqa: E402
from rlsched.agents.export import export_run  # noqa: E402
from rlsched.agents.train import train  # noqa: E402
from rlsched.errors import CheckpointError  # noqa: E402
from rlsched.learned.checkpoint import META, WEIGHTS, load_checkpoint  # noqa: E402
from rlsched.learned.observation import OBS_DIM, SCHEMA_VERSION  # noqa: E402
from rlsched.policies import make_policy  # noqa: E402

TINY = {
    "env": {"scenarios": ["default", "omni-mix"], "rate_scale_range": [0.8, 1.2], "episode_s": 900.0,
            "max_episode_steps": 24, "projection": {"starvation_threshold_s": 300.0}},
    "ppo": {"n_steps": 64, "batch_size": 64, "n_epochs": 1, "net_arch": [16, 16]},
    "n_envs": 1, "timesteps": 128, "checkpoint_every": 64, "eval_every": 64, "eval_seeds": [900],
    "eval_baselines": ["fifo"], "eval_duration_s": 900.0,
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    train(agent_config_from_dict(json.loads(json.dumps(TINY)), "test"), out, seed=0, progress=False)
    return out


def test_tensorboard_has_scheduler_and_eval_scalars(run_dir: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((run_dir / "tb").glob("ppo_*"))), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"sched/batch_size", "sched/goodput", "sched/weight/realtime", "sched/queue_wait_p99",
            "eval/mean/policy", "eval/mean/fifo", "eval/default/policy", "rollout/ep_rew_mean",
            "train/value_loss"} <= tags
    assert any(t.startswith("sched/slo_attainment/") for t in tags)
    weights = [events.Scalars(f"sched/weight/{c}")[-1].value for c in ("realtime", "batch", "background")]
    assert sum(weights) == pytest.approx(1.0, abs=1e-4)
    goodput = events.Scalars("sched/goodput")[-1].value
    assert 0.0 <= goodput <= 1.0
    assert any(t.startswith("config") for t in events.Tags()["tensors"])  # hyperparameters as text


def test_best_checkpoint_is_kept_by_validation_score(run_dir: Path) -> None:
    best = json.loads((run_dir / "best" / "validation.json").read_text())
    assert 0.0 <= best["weighted_slo_attainment"] <= 1.0 and best["timesteps"] >= 64
    assert (run_dir / "best" / "model.zip").is_file() and (run_dir / "best" / "obs_norm.npz").is_file()


def test_resume_continues_the_step_count(run_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    cfg = agent_config_from_dict(json.loads(json.dumps({**TINY, "timesteps": 192})), "test")
    train(cfg, copy, seed=0, resume=True, progress=False)
    assert json.loads((copy / "train_time.json").read_text())["timesteps"] >= 192


def test_export_matches_sb3_actions(run_dir: Path, tmp_path: Path) -> None:
    from stable_baselines3 import PPO

    out = export_run(run_dir, tmp_path / "ckpt", source="last")
    net = load_checkpoint(out, expect_schema=SCHEMA_VERSION)
    model = PPO.load(run_dir / "last" / "model.zip", device="cpu")
    stats = np.load(run_dir / "last" / "obs_norm.npz")
    rng = np.random.default_rng(0)
    for _ in range(50):
        obs = rng.uniform(-5, 5, OBS_DIM).astype(np.float32)
        norm = np.clip((obs - stats["mean"]) / np.sqrt(stats["var"] + stats["epsilon"]), -stats["clip"], stats["clip"])
        sb3, _ = model.predict(norm.astype(np.float32)[None, :], deterministic=True)
        np.testing.assert_allclose(net(obs), sb3[0], atol=1e-5)


def test_tampered_or_foreign_checkpoint_is_refused(run_dir: Path, tmp_path: Path) -> None:
    out = export_run(run_dir, tmp_path / "ckpt")
    raw = bytearray((out / WEIGHTS).read_bytes())
    raw[-3] ^= 0xFF
    (out / WEIGHTS).write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="hash"):
        load_checkpoint(out)
    out = export_run(run_dir, tmp_path / "ckpt2")
    with pytest.raises(CheckpointError, match="schema"):
        load_checkpoint(out, expect_schema="dit-batch-obs/999")
    meta = json.loads((out / META).read_text())
    meta["obs_dim"] = 3
    (out / META).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError):
        load_checkpoint(out)
    with pytest.raises(CheckpointError, match="expected"):
        load_checkpoint(tmp_path / "missing")


def test_rl_policy_serves_in_the_simulator(run_dir: Path, tmp_path: Path) -> None:
    from rlsched.evaluation import RunSpec, prepare
    from tests.outcomes import FinishLog, check_outcomes

    out = export_run(run_dir, tmp_path / "ckpt")
    policy = make_policy(f"rl:{out}")
    assert policy.name.startswith("rl:")
    sim = prepare(RunSpec("omni-mix", f"rl:{out}", seed=1000, duration_s=1800))
    log = FinishLog(sim)
    m = check_outcomes(sim.run(policy), log)  # one on_finish per request, counts agree
    assert m["requests_unfinished"] == 0 and len(log.calls) == m["requests_total"] > 0
