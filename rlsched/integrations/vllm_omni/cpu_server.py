"""A real ``vllm serve MODEL_DIR --omni`` with the plugin on a machine without a GPU (``rlsched serve-cpu``, the
e2e tier, ``scripts/sim_vs_engine.py``); imports no vLLM: the server is a subprocess.

Three things stand in, everything else is vLLM-Omni's own (docs/e2e.md):

- ``EXECUTOR`` behind ``distributed_executor_backend`` (``rlsched deploy --cpu`` writes it): it sleeps the
  batch time the stage's cost profile gives (÷ ``time_scale``) and returns gray images;
- a tiny Qwen-Image-layout model folder (``build_tiny_model``: configs only, ~2 KB, no weights, no download);
- import-only ``torchvision`` / ``torchaudio`` (``STUBS``, first on the server's ``PYTHONPATH``).

The server runs in a process group of its own (``start_new_session``); ``stop_group`` ends the whole group
(SIGTERM, then SIGKILL after a grace period), so the API server, its stage processes and anything they spawned
go together.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from rlsched.errors import ConfigError, RlschedError

EXECUTOR = "rlsched.integrations.vllm_omni.cost_executor.CostProfileExecutor"
"""The ``distributed_executor_backend`` that stands in for the GPU worker (``harness.cost_executor``)."""
ENGINE_BACKEND = "rlsched.integrations.vllm_omni.RLDiffusionEngine"
STUBS = Path(__file__).resolve().parent / "cpu_stubs"
"""The folder holding the ``torchvision`` / ``torchaudio`` stand-ins (a package folder, shipped in the wheel)."""
START_TIMEOUT_S = 300.0
"""Start-up measured at 36-95 s on 2 cores (one replica .. two); a server not healthy by then is stuck."""
STOP_GRACE_S = 15.0

TINY_MODEL_VERSION = "1"
"""Bump when the layout changes: a cached folder is rewritten."""
TINY_MODEL_STAMP = ".rlsched-tiny-model"
TINY_MODEL_FILES: dict[str, dict[str, Any]] = {
    "model_index.json": {
        "_class_name": "QwenImagePipeline", "_diffusers_version": "0.36.0",
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"],
    },
    "scheduler/scheduler_config.json": {
        "_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 1.0,
        "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 0.9, "base_image_seq_len": 256,
        "max_image_seq_len": 8192, "shift_terminal": 0.02, "time_shift_type": "exponential",
    },
    "transformer/config.json": {
        "_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64, "out_channels": 16,
        "num_layers": 1, "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 32,
        "guidance_embeds": False, "axes_dims_rope": [4, 6, 6],
    },
    "vae/config.json": {
        "_class_name": "AutoencoderKLQwenImage", "base_dim": 8, "z_dim": 16, "dim_mult": [1, 2],
        "num_res_blocks": 1, "attn_scales": [], "temperal_downsample": [False, True],
        "temporal_downsample": [False, True, True], "dropout": 0.0,
    },
    "text_encoder/config.json": {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 512,
    },
}
"""``vllm serve DIR --omni`` resolves the pipeline from ``model_index.json`` (``QwenImagePipeline``); with
``EXECUTOR`` no worker loads weights, and the stage reads only ``model_index.json`` and ``vae/config.json`` (the
post-processor's scale factor). The other configs keep the folder in Qwen-Image's layout with tiny sizes."""


class ServerError(RlschedError, RuntimeError):
    """The CPU server exited, or never became healthy; the message ends with its log's last lines."""


def build_tiny_model(root: Path) -> Path:
    """``root`` holding the tiny model (written once; reused while ``TINY_MODEL_VERSION`` matches)."""
    stamp = root / TINY_MODEL_STAMP
    if stamp.exists() and stamp.read_text() == TINY_MODEL_VERSION:
        return root
    for rel, doc in TINY_MODEL_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
    stamp.write_text(TINY_MODEL_VERSION)
    return root


def default_model_dir() -> Path:
    """Where ``serve-cpu`` keeps the tiny model: ``$XDG_CACHE_HOME/rlsched/tiny-qwen-image`` (``~/.cache``). Its
    basename is the served model's name (every ``rlsched_*`` sample's ``model_name``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rlsched" / "tiny-qwen-image"


# ------------------------------------------------------------------------------------------- the config
def read_cpu_stage(path: Path) -> tuple[str, dict[str, Any]]:
    """(stage id, stage keys) of the one stage of a deploy YAML written by ``rlsched deploy --cpu``; a
    ``ConfigError`` naming the file (and the field) otherwise."""
    if not path.is_file():
        raise ConfigError("--config", f"{path}: no such file; write one with `rlsched deploy --cpu --policy edf "
                                      f"--out {path.name}`")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError("--config", f"{path}: cannot read it as YAML ({str(exc).splitlines()[0]})") from None
    stages = doc.get("stages") if isinstance(doc, dict) else None
    if not (isinstance(stages, list) and len(stages) == 1 and isinstance(stages[0], dict)):
        raise ConfigError(f"{path}: stages", "expected the one stage `rlsched deploy` writes (a list of one "
                                             "mapping)")
    stage = dict(stages[0])
    sid = stage.pop("stage_id", 0)
    if stage.get("engine_backend") != ENGINE_BACKEND:
        raise ConfigError(f"{path}: engine_backend", f"is {stage.get('engine_backend')!r}, not the plugin's "
                                                     f"{ENGINE_BACKEND}: not a config `rlsched deploy` wrote")
    if stage.get("distributed_executor_backend") != EXECUTOR:
        raise ConfigError(f"{path}: distributed_executor_backend",
                          f"is {stage.get('distributed_executor_backend')!r}: the config was not written for CPU; "
                          f"write it with `rlsched deploy --cpu ...` (sets {EXECUTOR})")
    if not isinstance(stage.get("extras"), dict) or not isinstance(stage["extras"].get("rlsched"), dict):
        raise ConfigError(f"{path}: extras.rlsched", "missing: the plugin's settings are not in the config")
    return str(sid), stage


def metrics_ports(stage: Mapping[str, Any]) -> list[int]:
    """The ports the stage's replicas may serve their plugin metrics on (none when ``metrics_port`` is 0)."""
    section = stage["extras"]["rlsched"]
    port = int(section.get("metrics_port", 0) or 0)
    return list(range(port, port + int(section.get("metrics_ports", 1) or 1))) if port > 0 else []


def check_port_free(port: int, where: str, host: str = "127.0.0.1") -> None:
    """A ``ConfigError`` naming ``where`` when ``port`` cannot be bound on ``host`` now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ConfigError(where, f"port {port} on {host} is in use or not permitted ({exc.strerror or exc}); "
                                     "choose another") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_executable(python: str = sys.executable) -> Path:
    """The ``vllm`` command beside ``python`` (the environment that runs vLLM-Omni)."""
    vllm = Path(python).with_name("vllm")
    if not vllm.exists():
        raise ConfigError("vllm", f"no `vllm` command beside {python}: serve-cpu runs vLLM-Omni 0.30 "
                                  "installed in this environment (from a checkout: make .venv-vllm/.e2e-installed, "
                                  "then .venv-vllm/bin/rlsched serve-cpu; docs/deploy.md)")
    return vllm


# ------------------------------------------------------------------------------------------- the server
def server_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: the stand-ins first on ``PYTHONPATH``, one thread per process, offline."""
    env = {**(os.environ if base is None else base), "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", **(extra or {})}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(STUBS), env.get("PYTHONPATH", "")) if p)
    return env


def serve_command(vllm: Path, model_dir: Path, port: int, overrides: Mapping[str, Any],
                  host: str = "127.0.0.1") -> list[str]:
    return [str(vllm), "serve", str(model_dir), "--omni", "--host", host, "--port", str(port),
            "--stage-overrides", json.dumps(overrides, separators=(",", ":"))]


def start(cmd: list[str], env: Mapping[str, str], cwd: Path, log: IO[bytes] | int | None) -> subprocess.Popen[bytes]:
    """The server in a process group of its own (the terminal's Ctrl-C reaches only its parent)."""
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                            start_new_session=True)


def wait_healthy(proc: subprocess.Popen[bytes], url: str, timeout_s: float = START_TIMEOUT_S,
                 log_tail: Any = lambda: "") -> None:
    """Until ``url``/health answers 200; ``ServerError`` if the server exits or is not healthy in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"vllm serve exited ({proc.returncode}) before it was healthy\n{log_tail()}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        time.sleep(1.0)
    raise ServerError(f"vllm serve not healthy after {timeout_s:.0f} s\n{log_tail()}")


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """Kill ``proc``'s process group: SIGTERM, then SIGKILL after ``grace_s``; bounded time."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and group_alive(proc.pid):
            proc.poll()
            time.sleep(0.2)
        if not group_alive(proc.pid):
            break
    proc.poll()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid))  # a zombie leader counts until reaped: look for live members


def group_members(pgid: int) -> list[int]:
    """Live processes of a group (tests assert none is left)."""
    return [pid for pid in _pids() if _pgid(pid) == pgid and _state(pid) != "Z"]


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return -1


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"
