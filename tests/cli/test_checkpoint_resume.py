"""``train --resume`` continues the checkpoint count, and checkpoints are written whole (issue 18)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from rlsched.agents.checkpointing import PeriodicCheckpoint, replace_folder  # noqa: E402


class _Model:
    """What PeriodicCheckpoint touches of an SB3 model."""

    def __init__(self, steps: int) -> None:
        self.num_timesteps, self.logger, self.fail = steps, None, False

    def get_env(self) -> None:
        return None

    def save(self, path: Path) -> None:
        if self.fail:
            Path(path).write_bytes(b"half")
            raise OSError(28, "No space left on device")
        Path(path).write_bytes(f"model at {self.num_timesteps}".encode())


def _venv() -> SimpleNamespace:
    rms = SimpleNamespace(mean=np.zeros(3), var=np.ones(3), count=1.0)
    return SimpleNamespace(obs_rms=rms, clip_obs=5.0, epsilon=1e-8, norm_obs=True)


def _train(cb: PeriodicCheckpoint, model: _Model, until: int, n_envs: int = 2) -> None:
    cb.init_callback(model)
    cb.on_training_start({}, {})
    while model.num_timesteps < until:
        model.num_timesteps += n_envs
        cb.on_step()


def test_a_resumed_run_numbers_checkpoints_from_where_it_stopped(tmp_path: Path) -> None:
    """Bug: after steps_8192, a resumed run saved steps_8194, steps_8196, ... (every step) until its
    counter, restarted at ``every``, caught up with the model's step count."""
    every = 8192
    _train(PeriodicCheckpoint(every, tmp_path, _venv()), _Model(0), every)
    assert sorted(p.name for p in tmp_path.glob("steps_*")) == ["steps_8192"]
    _train(PeriodicCheckpoint(every, tmp_path, _venv()), _Model(every), 3 * every)  # --resume
    assert sorted(p.name for p in tmp_path.glob("steps_*")) == ["steps_16384", "steps_24576", "steps_8192"]
    assert (tmp_path / "last" / "model.zip").read_bytes() == b"model at 24576"


def test_a_resume_between_multiples_saves_once_per_multiple(tmp_path: Path) -> None:
    _train(PeriodicCheckpoint(100, tmp_path, _venv()), _Model(250), 420, n_envs=4)
    # one checkpoint per multiple of 100 crossed, named by the step it was taken at
    assert sorted(p.name for p in tmp_path.glob("steps_*")) == ["steps_302", "steps_402"]


def test_a_failed_save_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    """Bug: model.zip was written in place: a crash mid-save left a truncated zip in ``last``/``best``."""
    model = _Model(8)
    PeriodicCheckpoint.save(model, _venv(), tmp_path / "best", {"validation.json": "{}"})
    model.num_timesteps, model.fail = 16, True
    with pytest.raises(OSError):
        PeriodicCheckpoint.save(model, _venv(), tmp_path / "best", {"validation.json": "{}"})
    assert (tmp_path / "best" / "model.zip").read_bytes() == b"model at 8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == ["model.zip", "obs_norm.npz", "validation.json"]


def test_replace_folder_swaps_a_whole_folder(tmp_path: Path) -> None:
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "a").write_text("new")
    (tmp_path / "dst").mkdir()
    (tmp_path / "dst" / "old-only").write_text("old")
    replace_folder(tmp_path / "new", tmp_path / "dst", copy=True)
    assert [p.name for p in (tmp_path / "dst").iterdir()] == ["a"] and (tmp_path / "new" / "a").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "new"]


def test_train_then_resume_saves_each_multiple_once(tmp_path: Path) -> None:
    """The same bug through ``train(resume=True)`` on a tiny PPO run: steps_64, steps_128, then
    resumed to 256: steps_192, steps_256 (it saved at every step after 128 until its count caught up)."""
    import json

    from rlsched.agents.config import agent_config_from_dict
    from rlsched.agents.train import train

    tiny = {"env": {"scenarios": ["default"], "rate_scale_range": [1.0, 1.0], "episode_s": 600.0,
                    "max_episode_steps": 16},
            "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 1, "net_arch": [8]},
            "n_envs": 1, "checkpoint_every": 64, "eval_every": 10**9, "eval_seeds": [900],
            "eval_baselines": ["fifo"], "eval_duration_s": 600.0}
    train(agent_config_from_dict(json.loads(json.dumps({**tiny, "timesteps": 128})), "t"), tmp_path, progress=False)
    train(agent_config_from_dict(json.loads(json.dumps({**tiny, "timesteps": 256})), "t"), tmp_path, resume=True,
          progress=False)
    assert sorted((p.name for p in tmp_path.glob("steps_*")), key=lambda n: int(n[6:])) == [
        "steps_64", "steps_128", "steps_192", "steps_256"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
