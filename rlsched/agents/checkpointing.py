"""Periodic checkpoints of a run (SB3 zip + observation statistics) for resume and export."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from rlsched.atomic import atomic_open, replace_folder

LAST, BEST = "last", "best"
"""Sub-folders of the run dir: the newest checkpoint, and the best on the validation seeds."""


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
            replace_folder(folder, self.run_dir / LAST, copy=True)
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
            save_obs_norm(venv, tmp / "obs_norm.npz")
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


def save_obs_norm(venv: Any, path: Path) -> None:
    """Observation statistics as .npz (no pickle), for resume and export."""
    rms = venv.obs_rms
    with atomic_open(path, "wb") as fh:
        np.savez(fh, mean=rms.mean, var=rms.var, count=np.asarray(rms.count),
                 clip=np.asarray(venv.clip_obs), epsilon=np.asarray(venv.epsilon),
                 enabled=np.asarray(bool(venv.norm_obs)))


def load_obs_norm(venv: Any, path: Path) -> None:
    data = np.load(path, allow_pickle=False)
    venv.obs_rms.mean, venv.obs_rms.var, venv.obs_rms.count = data["mean"], data["var"], float(data["count"])
