"""Periodic checkpoints of a run (SB3 zip + observation statistics) for resume and export."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from rlsched.agents import train as _train


class PeriodicCheckpoint(BaseCallback):
    """Every ``every`` steps: ``run_dir/steps_N/`` and a refreshed ``run_dir/last/``."""

    def __init__(self, every: int, run_dir: Path, venv: Any) -> None:
        super().__init__()
        self.every, self.run_dir, self.venv = every, run_dir, venv
        self._next = every

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next += self.every
            folder = self.save(self.model, self.venv, self.run_dir / f"steps_{self.num_timesteps}")
            last = self.run_dir / _train.LAST
            shutil.rmtree(last, ignore_errors=True)
            shutil.copytree(folder, last)
        return True

    @staticmethod
    def save(model: Any, venv: Any, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        model.save(folder / "model.zip")
        _train.save_obs_norm(venv, folder / "obs_norm.npz")
        return folder
