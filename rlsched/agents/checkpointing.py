"""Periodic checkpoints of a run (SB3 zip + observation statistics) for resume and export."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from rlsched.agents import train as _train
from rlsched.atomic import replace_folder  # noqa: F401 (its home was here: rlsched.atomic holds every writer)


class PeriodicCheckpoint(BaseCallback):
    """Every ``every`` steps: ``run_dir/steps_N/`` and a refreshed ``run_dir/last/``.

    The count continues across ``--resume``: a run resumed at step 8192 with ``every`` 8192
    saves next at 16384 (it used to save at every step until its counter caught up)."""

    def __init__(self, every: int, run_dir: Path, venv: Any) -> None:
        super().__init__()
        self.every, self.run_dir, self.venv = every, run_dir, venv
        self._next = every

    def _on_training_start(self) -> None:
        # num_timesteps is the model's own count here, so a resumed run starts past it
        self._next = next_multiple(self.num_timesteps, self.every)

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next = next_multiple(self.num_timesteps, self.every)
            folder = self.save(self.model, self.venv, self.run_dir / f"steps_{self.num_timesteps}")
            replace_folder(folder, self.run_dir / _train.LAST, copy=True)
        return True

    @staticmethod
    def save(model: Any, venv: Any, folder: Path, files: dict[str, str] | None = None) -> Path:
        """Write the checkpoint (and ``files``: name -> text) into a temporary folder beside
        ``folder``, then swap it in: a crash mid-save leaves the previous checkpoint whole."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0o700 is not what mkdir gives
            model.save(tmp / "model.zip")
            _train.save_obs_norm(venv, tmp / "obs_norm.npz")
            for name, text in (files or {}).items():
                (tmp / name).write_text(text)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_folder(tmp, folder)
        return folder


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def next_multiple(done: int, every: int) -> int:
    """The first multiple of ``every`` above ``done``."""
    return (done // every + 1) * every
