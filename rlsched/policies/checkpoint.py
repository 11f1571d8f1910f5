"""Frozen policies on disk: safetensors weights + JSON metadata, read with numpy only.

A checkpoint folder holds ``policy.safetensors`` (actor weights, float32) and
``policy.json`` (schema version, observation/action sizes, layer order, activation,
observation normalisation, scenarios, training config, and a SHA-256 content hash
over both). Nothing here imports torch or unpickles anything.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.errors import CheckpointError

FORMAT_VERSION = 1
WEIGHTS, META = "policy.safetensors", "policy.json"
_DTYPES = {"F32": np.float32, "F64": np.float64}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Minimal safetensors writer (little-endian float32), sorted keys."""
    header: dict[str, Any] = {}
    blobs, offset = [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        blobs.append(arr.tobytes())
        offset += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Minimal safetensors reader: validates offsets, returns float arrays."""
    data = path.read_bytes()
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        body = memoryview(data)[8 + n:]
        out = {}
        for name, spec in header.items():
            if name == "__metadata__":
                continue
            start, end = spec["data_offsets"]
            dtype = np.dtype(_DTYPES[spec["dtype"]]).newbyteorder("<")
            arr = np.frombuffer(body[start:end], dtype=dtype).reshape(spec["shape"])
            out[name] = arr.astype(np.float32)
        return out
    except (struct.error, json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{path}: not a valid safetensors file ({exc})") from None


def content_hash(weights: bytes, meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "content_sha256"}
    h = hashlib.sha256(weights)
    h.update(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class FrozenNetwork:
    """The actor MLP of a PPO policy: obs → (normalise) → hidden layers → action mean."""

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    activation: str
    obs_mean: np.ndarray
    obs_var: np.ndarray
    obs_clip: float
    obs_eps: float
    meta: dict[str, Any]

    def __post_init__(self) -> None:
        # Hot path (one call per scheduling decision): precompute 1/std and transposed weights.
        object.__setattr__(self, "_inv_std", (1.0 / np.sqrt(self.obs_var + self.obs_eps)).astype(np.float32))
        object.__setattr__(self, "_layers_t", tuple((np.ascontiguousarray(w.T), b) for w, b in self.layers))

    def normalise(self, obs: np.ndarray) -> np.ndarray:
        """What SB3's VecNormalize feeds the network: clip((obs − mean)/sqrt(var + eps), ±clip)."""
        z = (obs - self.obs_mean) * self._inv_std
        return np.minimum(np.maximum(z, -self.obs_clip), self.obs_clip)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic action (the Gaussian mean), clipped to [-1, 1]."""
        x = self.normalise(np.asarray(obs, dtype=np.float32))
        act = np.tanh if self.activation == "tanh" else _relu
        for wt, b in self._layers_t[:-1]:
            x = act(x @ wt + b)
        wt, b = self._layers_t[-1]
        return np.minimum(np.maximum(x @ wt + b, -1.0), 1.0)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def save_checkpoint(folder: Path, tensors: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write weights + metadata (with content hash) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / WEIGHTS, tensors)
    meta = {**meta, "format_version": FORMAT_VERSION}
    meta["content_sha256"] = content_hash((folder / WEIGHTS).read_bytes(), meta)
    (folder / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
    return folder


def load_checkpoint(folder: str | Path, expect_schema: str | None = None) -> FrozenNetwork:
    """Load and verify a frozen policy; any problem is a ``CheckpointError``."""
    folder = Path(folder)
    if not (folder / META).is_file() or not (folder / WEIGHTS).is_file():
        raise CheckpointError(f"{folder}: expected {WEIGHTS} and {META}")
    try:
        meta = json.loads((folder / META).read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{folder / META}: invalid JSON ({exc})") from None
    weights = (folder / WEIGHTS).read_bytes()
    if meta.get("content_sha256") != content_hash(weights, meta):
        raise CheckpointError(f"{folder}: content hash mismatch — the files were modified or mixed up")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{folder}: format version {meta.get('format_version')} != {FORMAT_VERSION}")
    if expect_schema is not None and meta.get("obs_schema") != expect_schema:
        raise CheckpointError(f"{folder}: observation schema {meta.get('obs_schema')!r} does not match this "
                              f"rlsched ({expect_schema!r}); re-export or retrain")
    return _network(folder, read_safetensors(folder / WEIGHTS), meta)


def _network(folder: Path, t: dict[str, np.ndarray], meta: dict[str, Any]) -> FrozenNetwork:
    try:
        layers = tuple((t[f"{name}.weight"], t[f"{name}.bias"]) for name in meta["layers"])
        norm = meta["obs_norm"]
        mean = np.asarray(norm["mean"], dtype=np.float32) if norm else np.zeros(meta["obs_dim"], np.float32)
        var = np.asarray(norm["var"], dtype=np.float32) if norm else np.ones(meta["obs_dim"], np.float32)
        net = FrozenNetwork(layers, meta["activation"], mean, var, float(norm["clip"]) if norm else np.inf,
                            float(norm["epsilon"]) if norm else 0.0, meta)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{folder}: metadata incomplete ({exc})") from None
    if layers[0][0].shape[1] != meta["obs_dim"] or layers[-1][0].shape[0] != meta["action_dim"]:
        raise CheckpointError(f"{folder}: layer shapes do not match obs_dim/action_dim")
    return net
