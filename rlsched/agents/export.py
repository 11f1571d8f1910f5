"""Export a training run to a frozen, pickle-free checkpoint (safetensors + JSON)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rlsched.agents.reproducible import PROVENANCE, PROVENANCE_FILE
from rlsched.atomic import check_output_folder, replace_folder
from rlsched.errors import CheckpointError, ConfigError
from rlsched.learned.checkpoint import META, WEIGHTS, save_checkpoint
from rlsched.policies.projected import ACTION_DIM, ProjectionConfig

ACTOR_PREFIXES = ("mlp_extractor.policy_net.", "action_net.")


def actor_tensors(model_zip: Path) -> dict[str, np.ndarray]:
    """Actor weights from an SB3 zip's ``policy.pth``, read with ``weights_only=True`` (no pickle code)."""
    import torch

    try:
        with zipfile.ZipFile(model_zip) as zf:
            raw = zf.read("policy.pth")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{model_zip}: not an SB3 model zip ({exc})") from None
    state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in state.items() if k.startswith(ACTOR_PREFIXES)}


def layer_names(tensors: dict[str, np.ndarray]) -> list[str]:
    """Linear layers in forward order: policy_net.0, policy_net.2, …, action_net."""
    hidden = sorted({k.rsplit(".", 1)[0] for k in tensors if k.startswith(ACTOR_PREFIXES[0])},
                    key=lambda name: int(name.rsplit(".", 1)[1]))
    return [*hidden, "action_net"]


def export_run(run_dir: Path, out: Path, source: str = "best") -> Path:
    """Write ``out/policy.safetensors`` + ``out/policy.json`` from ``run_dir/<source>``."""
    from rlsched.learned.observation import OBS_DIM, SCHEMA_VERSION

    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} is a file; name the checkpoint folder to write")
    if not (run_dir / "config.yaml").is_file():
        raise CheckpointError(f"{run_dir}: not a run dir written by `rlsched train` (no config.yaml)")
    src = run_dir / source
    if source == "best" and not (src / "model.zip").is_file():
        src = run_dir / "last"
    if not (src / "model.zip").is_file():
        raise CheckpointError(f"{src}: no model.zip (--source: best, last or steps_N)")
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    agent = cfg["agent"]
    tensors = actor_tensors(src / "model.zip")
    layers = layer_names(tensors)
    if tensors[f"{layers[0]}.weight"].shape[1] != OBS_DIM:
        raise CheckpointError(f"{src}: network expects {tensors[f'{layers[0]}.weight'].shape[1]} inputs, "
                              f"this rlsched's observation has {OBS_DIM}")
    meta: dict[str, Any] = {
        "obs_schema": SCHEMA_VERSION, "obs_dim": OBS_DIM, "action_dim": ACTION_DIM,
        "layers": layers, "activation": agent["ppo"]["activation"],
        "obs_norm": _obs_norm(src / "obs_norm.npz"),
        "projection": dataclasses.asdict(ProjectionConfig(**agent["env"]["projection"])),
        "scenarios": agent["env"]["scenarios"], "training_config": cfg,
        "trained_timesteps": _timesteps(src), "run_timesteps": _timesteps(run_dir), "source": src.name,
        PROVENANCE: _provenance(run_dir),
    }
    return _save_atomic(out, tensors, meta)


def _provenance(run_dir: Path) -> dict[str, Any]:
    """This export's commit and command, and the run's own ``train`` entries (unhashed: the same
    run exported twice, or the same recipe trained twice, gives one content hash)."""
    from rlsched.agents.reproducible import provenance

    path = run_dir / PROVENANCE_FILE
    training = json.loads(path.read_text()) if path.is_file() else "unknown (run dir from before provenance)"
    return {**provenance(), "training": training}


def _save_atomic(out: Path, tensors: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """``save_checkpoint`` into a temporary folder beside ``out``, then swapped in whole (other
    files already in ``out`` are kept): a failed export leaves the previous checkpoint intact,
    and no reader sees new weights beside old metadata."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)
        save_checkpoint(tmp, tensors, meta)
        check_output_folder(out, "--out")
        if out.is_dir():
            for entry in out.iterdir():
                if entry.name not in (WEIGHTS, META) and not (tmp / entry.name).exists():
                    (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, tmp / entry.name)
        replace_folder(tmp, out, flag="--out")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _obs_norm(path: Path) -> dict[str, Any] | None:
    data = np.load(path, allow_pickle=False)
    if not bool(data["enabled"]):
        return None
    return {"mean": data["mean"].tolist(), "var": data["var"].tolist(), "clip": float(data["clip"]),
            "epsilon": float(data["epsilon"])}


def _timesteps(folder: Path) -> int | None:
    """Steps behind a checkpoint (``validation.json``) or a whole run (``train_time.json``)."""
    for name in ("validation.json", "train_time.json"):
        if (folder / name).is_file():
            return int(json.loads((folder / name).read_text())["timesteps"])
    return None
