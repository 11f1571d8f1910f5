"""Frozen policies on disk: safetensors weights + JSON metadata, read with numpy and ``safetensors`` only.

A checkpoint folder holds ``policy.safetensors`` (actor weights, float32) and
``policy.json`` (schema version, observation/action sizes, layer order, activation,
observation normalisation, scenarios, training config, and a SHA-256 content hash
over both). Nothing here imports torch or unpickles anything.

The content hash covers the weights and every metadata field except ``provenance`` (commit,
command, machine, time: ``rlsched.agents.reproducible.provenance``), so a recipe run twice at
one seed gives one hash. Older checkpoints kept ``exported_at`` at the top level, where it is
hashed; they still verify.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from rlsched.atomic import write_atomic
from rlsched.errors import CheckpointError, ConfigError
from rlsched.resources import data_dir
from rlsched.sim.yamlio import parse_json, read_json

FORMAT_VERSION = 1
WEIGHTS, META = "policy.safetensors", "policy.json"
_DTYPES = {"F32": np.float32, "F64": np.float64}
MAX_HEADER_BYTES = 100 << 20
"""Largest safetensors JSON header (the format's own limit)."""


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The tensors as little-endian float32, serialised by the ``safetensors`` package (byte for byte
    what the hand-written writer before it gave: the shipped checkpoints' hashes are unchanged)."""
    from safetensors.numpy import save

    write_atomic(path, save({name: np.ascontiguousarray(t, dtype="<f4") for name, t in tensors.items()}))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The file's tensors, as float32. Before ``safetensors`` parses anything, every tensor's dtype,
    shape and offsets are checked here against the file's length (in bounds, sized to the shape,
    disjoint), so a tampered file is a ``CheckpointError`` naming what is wrong, never garbage weights,
    and no size written in the file makes a reader allocate more than the file."""
    return _arrays(path, *read_weights(path))


MAX_WEIGHTS_BYTES = 256 << 20
"""Largest weights file read (a shipped policy is under 64 KiB): a larger one is refused before it is read."""
MAX_RANK = 8
"""Most dimensions a tensor may have (an actor MLP's are 1 or 2; numpy stops at 64)."""


@dataclass(frozen=True)
class _Spec:
    """A tensor's dtype and shape, and where its bytes lie in the file (offsets from the file's start)."""

    dtype: np.dtype
    shape: tuple[int, ...]
    start: int
    end: int


def read_weights(path: Path) -> tuple[bytes, dict[str, _Spec]]:
    """The weights file's bytes and its tensors' specs. The file's size, then its header (length,
    JSON, every tensor's dtype, shape and offsets) are checked against the file's length before the
    body is read, so no size written in the file makes the reader allocate more than the file."""
    size = path.stat().st_size
    if size > MAX_WEIGHTS_BYTES:
        raise CheckpointError(f"{path}: {size} bytes, over the {MAX_WEIGHTS_BYTES >> 20} MiB a policy's "
                              f"weights may take (not read)")
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: not a valid safetensors file (shorter than the 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise CheckpointError(f"{path}: not a valid safetensors file (header length {n} past the end of the file)")
        if n > MAX_HEADER_BYTES:
            raise CheckpointError(f"{path}: not a valid safetensors file (header length {n} over "
                                  f"{MAX_HEADER_BYTES >> 20} MiB)")
        header = parse_json(fh.read(n), f"{path}: not a valid safetensors file (header)", CheckpointError)
        if not isinstance(header, dict):
            raise CheckpointError(f"{path}: not a valid safetensors file (header is not a JSON object)")
        body = size - 8 - n
        specs = {name: _spec(f"{path}: tensor {name!r}", spec, body, 8 + n)
                 for name, spec in header.items() if name != "__metadata__"}
        _check_disjoint(path, [(s.start, s.end, name) for name, s in specs.items()])
        fh.seek(0)
        data = fh.read(size + 1)
    if len(data) != size:
        raise CheckpointError(f"{path}: changed while it was read ({size} bytes, then {len(data)})")
    return data, specs


def _spec(where: str, spec: Any, body: int, base: int) -> _Spec:
    if not isinstance(spec, dict) or spec.get("dtype") not in _DTYPES:
        raise CheckpointError(f"{where}: dtype must be one of {sorted(_DTYPES)}")
    shape, offsets = spec.get("shape"), spec.get("data_offsets")
    if not _counts(shape) or len(shape) > MAX_RANK or any(d > body for d in shape):
        raise CheckpointError(f"{where}: shape must be a list of at most {MAX_RANK} integers in [0, {body}] "
                              f"(the data section's bytes), not {_short(shape)}")
    if not _counts(offsets) or len(offsets) != 2 or not offsets[0] <= offsets[1] <= body:
        raise CheckpointError(f"{where}: data_offsets {_short(offsets)} outside the {body}-byte data section")
    dtype = np.dtype(_DTYPES[spec["dtype"]]).newbyteorder("<")
    start, end = offsets
    if end - start != math.prod(shape) * dtype.itemsize:
        raise CheckpointError(f"{where}: data_offsets span {end - start} bytes, shape {shape} needs "
                              f"{math.prod(shape) * dtype.itemsize}")
    return _Spec(dtype, tuple(shape), base + start, base + end)


def _arrays(path: Path, data: bytes, specs: dict[str, _Spec]) -> dict[str, np.ndarray]:
    """The checked file's tensors, read by ``safetensors`` (its own checks agree with ``read_weights``'s)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        tensors = load(data)
    except SafetensorError as exc:  # a rule read_weights does not check (e.g. a gap between tensors)
        raise CheckpointError(f"{path}: not a valid safetensors file ({exc})") from None
    return {name: tensors[name].astype(np.float32) for name in specs}


def _short(value: Any) -> str:
    """A value for a message, cut at 80 characters (a hostile header's list can be megabytes)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _counts(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def _check_disjoint(path: Path, spans: list[tuple[int, int, str]]) -> None:
    """Two tensors sharing bytes means one of them is not what was trained."""
    spans = sorted(s for s in spans if s[1] > s[0])
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise CheckpointError(f"{path}: tensors {a!r} and {b!r} overlap (data_offsets)")


UNHASHED = ("content_sha256", "provenance")
"""Metadata fields outside the content hash: the hash itself, and where and when the files were made."""


def content_hash(weights: bytes, meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k not in UNHASHED}
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
    _inv_std: np.ndarray = field(init=False, repr=False, compare=False)
    """1/std of the observation normaliser, set once from ``obs_var`` and ``obs_eps``."""
    _layers_t: tuple[tuple[np.ndarray, np.ndarray], ...] = field(init=False, repr=False, compare=False)
    """``layers`` with each weight transposed and contiguous (``x @ w.T`` without a copy per call)."""

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:  # never a silent fallback to another function
            raise CheckpointError(f"activation {self.activation!r} unknown (known: {', '.join(ACTIVATIONS)})")
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
        act = ACTIVATIONS[self.activation]
        for wt, b in self._layers_t[:-1]:
            x = act(x @ wt + b)
        wt, b = self._layers_t[-1]
        return np.minimum(np.maximum(x @ wt + b, -1.0), 1.0)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"tanh": np.tanh, "relu": _relu}
"""Hidden-layer activations the numpy forward pass implements (SB3's ``activation_fn`` names, lower case)."""


def save_checkpoint(folder: Path, tensors: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write weights + metadata (with content hash) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / WEIGHTS, tensors)
    meta = {**meta, "format_version": FORMAT_VERSION}
    meta["content_sha256"] = content_hash((folder / WEIGHTS).read_bytes(), meta)
    write_atomic(folder / META, json.dumps(meta, indent=1, sort_keys=True))
    return folder


def load_checkpoint(folder: str | Path, expect_schema: str | None = None) -> FrozenNetwork:
    """Load and verify a frozen policy; any problem is a ``CheckpointError`` naming file and field.

    The content hash only catches accidents (it is unkeyed and stored beside the
    data), so everything the forward pass and the projection rely on is checked
    here: shapes chain, values are finite, the activation is known, settings are
    in range. A bad checkpoint fails at load, not as a crash at the first decision.
    """
    folder, meta, tensors = read_checkpoint(folder)
    if expect_schema is not None and meta.get("obs_schema") != expect_schema:
        raise CheckpointError(f"{folder}: observation schema {meta.get('obs_schema')!r} does not match this "
                              f"rlsched ({expect_schema!r}); re-export or retrain")
    return _network(folder, tensors, meta)


def _read_meta(path: Path) -> dict[str, Any]:
    """``policy.json``: a JSON object of at most 16 MiB and 64 levels (``rlsched.sim.yamlio.read_json``)."""
    meta = read_json(path, CheckpointError)
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    return meta


def _network(folder: Path, t: dict[str, np.ndarray], meta: dict[str, Any]) -> FrozenNetwork:
    where = str(folder / META)
    obs_dim, action_dim = read_dim(where, meta, "obs_dim"), read_dim(where, meta, "action_dim")
    layers = read_layers(where, t, meta.get("layers"), obs_dim, action_dim)
    if meta.get("activation") not in ACTIVATIONS:
        raise CheckpointError(f"{where}: activation {meta.get('activation')!r} unknown "
                              f"(known: {', '.join(ACTIVATIONS)})")
    mean, var, clip, eps = _obs_norm(where, meta.get("obs_norm"), obs_dim)
    check_projection(where, meta.get("projection", {}))
    return FrozenNetwork(layers, meta["activation"], mean, var, clip, eps, meta)


def read_dim(where: str, meta: dict[str, Any], key: str) -> int:
    value = meta.get(key)
    if type(value) is not int or value < 1:
        raise CheckpointError(f"{where}: {key} must be an integer >= 1, not {value!r}")
    return value


def read_layers(where: str, t: dict[str, np.ndarray], names: Any, obs_dim: int, action_dim: int,
                in_name: str = "obs_dim", out_name: str = "action_dim") -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Each layer's weight/bias exist, are finite, and chain from obs_dim to action_dim (``in_name``
    and ``out_name``: what the metadata calls those two widths, for the messages)."""
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"{where}: layers must be a non-empty list of tensor names, not {names!r}")
    width, out = obs_dim, []
    for i, name in enumerate(names):
        w, b = t.get(f"{name}.weight"), t.get(f"{name}.bias")
        field = f"{where}: layers[{i}] ({name})"
        if w is None or b is None:
            raise CheckpointError(f"{field}: {name}.weight or {name}.bias missing from {WEIGHTS}")
        if w.ndim != 2 or b.shape != (w.shape[0],):
            raise CheckpointError(f"{field}: weight {w.shape} and bias {b.shape} do not form a layer")
        if w.shape[1] != width:
            source = in_name if i == 0 else f"layers[{i - 1}]"
            raise CheckpointError(f"{field}: takes {w.shape[1]} inputs, {source} gives {width}")
        for part, arr in (("weight", w), ("bias", b)):
            if not np.isfinite(arr).all():
                raise CheckpointError(f"{field}: {name}.{part} has {int((~np.isfinite(arr)).sum())} "
                                      "non-finite values (NaN or inf)")
        width = w.shape[0]
        out.append((w, b))
    if width != action_dim:
        raise CheckpointError(f"{where}: layers[{len(names) - 1}] gives {width} outputs, {out_name} is {action_dim}")
    return tuple(out)


def _obs_norm(where: str, norm: Any, obs_dim: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """VecNormalize statistics: mean/var of length obs_dim, finite, var > 0, clip > 0, epsilon >= 0."""
    if not norm:
        return np.zeros(obs_dim, np.float32), np.ones(obs_dim, np.float32), math.inf, 0.0
    if not isinstance(norm, dict):
        raise CheckpointError(f"{where}: obs_norm must be an object or null, not {type(norm).__name__}")
    mean = _vector(where, "obs_norm.mean", norm.get("mean"), obs_dim)
    var = _vector(where, "obs_norm.var", norm.get("var"), obs_dim)
    if (var <= 0).any():
        i = int(np.argmax(var <= 0))
        raise CheckpointError(f"{where}: obs_norm.var[{i}] = {var[i]:g} must be > 0")
    clip, eps = norm.get("clip"), norm.get("epsilon")
    if not _real(clip) or not 0 < clip < math.inf:
        raise CheckpointError(f"{where}: obs_norm.clip must be a finite number > 0, not {clip!r}")
    if not _real(eps) or not 0 <= eps < math.inf:
        raise CheckpointError(f"{where}: obs_norm.epsilon must be a finite number >= 0, not {eps!r}")
    return mean, var, float(clip), float(eps)


def _vector(where: str, key: str, value: Any, n: int) -> np.ndarray:
    if not isinstance(value, list) or not all(_real(v) for v in value):
        raise CheckpointError(f"{where}: {key} must be a list of numbers")
    arr = np.asarray(value, dtype=np.float64)
    if arr.size != n:
        raise CheckpointError(f"{where}: {key} has {arr.size} entries, the input layer takes obs_dim={n}")
    if not np.isfinite(arr).all():
        raise CheckpointError(f"{where}: {key}[{int(np.argmax(~np.isfinite(arr)))}] is not finite")
    return arr.astype(np.float32)


def _real(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_projection(where: str, settings: Any) -> None:
    """``settings`` build a ``ProjectionConfig``: its own range rules (every number finite and in
    range) are the rules, here as everywhere a projection is configured."""
    from rlsched.policies.projected import ProjectionConfig  # here: keeps this module numpy-only to import

    if not isinstance(settings, dict):
        raise CheckpointError(f"{where}: projection must be an object, not {type(settings).__name__}")
    try:
        ProjectionConfig(**settings)
    except ConfigError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise CheckpointError(f"{where}: projection: {exc}") from None


def checkpoint_path(arg: str, default: str) -> Path:
    """``arg`` (or ``default``) as given if it exists, else among the shipped checkpoints:
    ``checkpoints/NAME`` or a bare ``NAME``."""
    p = Path(arg or default)
    if p.exists() or p.is_absolute():
        return p
    parts = p.parts[1:] if p.parts[0] == "checkpoints" else p.parts
    return data_dir("checkpoints").joinpath(*parts)


def read_checkpoint(folder: str | Path) -> tuple[Path, dict[str, Any], dict[str, np.ndarray]]:
    """The one opening of every checkpoint kind: both files present, metadata a JSON object,
    the content hash and the format version checked; returns (folder, metadata, tensors)."""
    folder = Path(folder)
    if not (folder / META).is_file() or not (folder / WEIGHTS).is_file():
        raise CheckpointError(f"{folder}: expected {WEIGHTS} and {META}")
    meta = _read_meta(folder / META)
    weights, specs = read_weights(folder / WEIGHTS)
    if meta.get("content_sha256") != content_hash(weights, meta):
        raise CheckpointError(f"{folder}: content hash mismatch — the files were modified or mixed up")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{folder}: format version {meta.get('format_version')} != {FORMAT_VERSION}")
    return folder, meta, _arrays(folder / WEIGHTS, weights, specs)
