"""Checkpoints are validated at load: a re-signed bad checkpoint is a CheckpointError naming the field."""

import dataclasses
import json
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlsched.errors import CheckpointError
from rlsched.learned import checkpoint as ck
from rlsched.learned.checkpoint import META, WEIGHTS, load_checkpoint, read_safetensors, save_checkpoint
from rlsched.resources import data_dir

SHIPPED = data_dir("checkpoints") / "default"


def resigned(tmp_path: Path, meta_edit: Callable[[dict], Any] | None = None,
             tensor_edit: Callable[[dict], Any] | None = None) -> Path:
    """The shipped checkpoint, edited, then saved with a fresh (valid) content hash."""
    meta = json.loads((SHIPPED / META).read_text())
    tensors = {k: v.copy() for k, v in read_safetensors(SHIPPED / WEIGHTS).items()}
    if meta_edit:
        meta_edit(meta)
    if tensor_edit:
        tensor_edit(tensors)
    return save_checkpoint(tmp_path / "ck", tensors, meta)


def test_shipped_checkpoint_loads_and_acts() -> None:
    net = load_checkpoint(SHIPPED)
    assert np.isfinite(net(np.zeros(net.meta["obs_dim"]))).all()


def _set(d: dict, key: str, value: Any) -> None:
    d[key] = value


def _nan_at(t: dict, name: str) -> None:
    t[name][0, 0] = np.nan


@pytest.mark.parametrize(("meta_edit", "tensor_edit", "message"), [
    (None, lambda t: _nan_at(t, "action_net.weight"),
     r"layers\[2\] \(action_net\): action_net.weight has 1 non-finite"),
    (None, lambda t: t.__setitem__("mlp_extractor.policy_net.0.bias", np.full(64, np.inf, np.float32)),
     r"layers\[0\].*bias has 64 non-finite"),
    (None, lambda t: t.__setitem__("mlp_extractor.policy_net.2.weight", np.zeros((64, 32), np.float32)),
     r"layers\[1\] \(mlp_extractor.policy_net.2\): takes 32 inputs, layers\[0\] gives 64"),
    (None, lambda t: t.__setitem__("action_net.bias", np.zeros(5, np.float32)), r"layers\[2\].*do not form a layer"),
    (lambda m: _set(m, "activation", "sigmoid"), None, r"activation 'sigmoid' unknown"),
    (lambda m: m["projection"].__setitem__("memory_safety_margin", 5.0), None,
     r"projection.memory_safety_margin.* must be in \[0, 1\)"),
    (lambda m: m["projection"].__setitem__("batch_timeout_ms", float("nan")), None, r"projection.batch_timeout_ms"),
    (lambda m: m["projection"]["max_batch_size_per_modality"].__setitem__("video", 0), None,
     r"projection.max_batch_size_per_modality.video: 0 must be an integer >= 1"),
    (lambda m: m["projection"].__setitem__("bogus_knob", 1), None, r"projection: .*bogus_knob"),
    (lambda m: m["obs_norm"]["var"].__setitem__(3, -1.0), None, r"obs_norm.var\[3\] = -1 must be > 0"),
    (lambda m: m["obs_norm"]["var"].__setitem__(0, 0.0), None, r"obs_norm.var\[0\] = 0 must be > 0"),
    (lambda m: m["obs_norm"]["mean"].pop(), None, r"obs_norm.mean has 148 entries, the input layer takes obs_dim=149"),
    (lambda m: m["obs_norm"].__setitem__("clip", -1), None, r"obs_norm.clip"),
    (lambda m: _set(m, "obs_dim", 150), None, r"layers\[0\].*takes 149 inputs, obs_dim gives 150"),
    (lambda m: _set(m, "action_dim", "9"), None, r"action_dim must be an integer"),
    (lambda m: _set(m, "layers", "action_net"), None, r"layers must be a non-empty list"),
    (lambda m: m["layers"].pop(), None, r"layers\[1\] gives 64 outputs, action_dim is 9"),
])
def test_resigned_bad_checkpoints_are_refused_naming_the_field(tmp_path: Path, meta_edit, tensor_edit,
                                                               message: str) -> None:
    folder = resigned(tmp_path, meta_edit, tensor_edit)
    with pytest.raises(CheckpointError, match=message) as err:
        load_checkpoint(folder)
    assert str(folder) in str(err.value)


def test_policy_json_that_is_a_list(tmp_path: Path) -> None:
    folder = resigned(tmp_path)
    (folder / META).write_text("[1, 2]")
    with pytest.raises(CheckpointError, match=r"policy.json: expected a JSON object, got list"):
        load_checkpoint(folder)


def _raw_safetensors(path: Path, header: dict, body: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    return path


@pytest.mark.parametrize(("header", "message"), [
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, r"tensors 'a' and 'b' overlap"),
    ({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}}, r"tensor 'a': data_offsets \[0, 32\] outside"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, r"span 16 bytes, shape \[3\] needs 12"),
    ({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, r"shape must be a list of at most 8 integers"),
    ({"a": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}}, r"at most 8 integers in \[0, 16\]"),
    ({"a": {"dtype": "F32", "shape": [2**70, 0], "data_offsets": [0, 0]}}, r"at most 8 integers in \[0, 16\]"),
    ({"a": {"dtype": "F32", "shape": [2**70], "data_offsets": [0, 16]}}, r"at most 8 integers in \[0, 16\]"),
    ({"a": {"dtype": "I8", "shape": [16], "data_offsets": [0, 16]}}, r"dtype must be one of"),
    ({"a": [1, 2]}, r"dtype must be one of"),
])
def test_tensor_offsets_in_bounds_sized_and_disjoint(tmp_path: Path, header: dict, message: str) -> None:
    path = _raw_safetensors(tmp_path / "x.safetensors", header, bytes(16))
    with pytest.raises(CheckpointError, match=message):
        read_safetensors(path)


def test_header_length_past_the_end(tmp_path: Path) -> None:
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(CheckpointError, match="past the end"):
        read_safetensors(tmp_path / "x.safetensors")


def test_a_weights_file_over_the_bound_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.safetensors"
    ck.write_safetensors(path, {"w": np.ones((4, 4), np.float32)})
    monkeypatch.setattr(ck, "MAX_WEIGHTS_BYTES", path.stat().st_size - 1)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("the body was read"))
    with pytest.raises(CheckpointError, match=r"bytes, over the 0 MiB a policy's weights may take \(not read\)"):
        read_safetensors(path)


def test_the_header_is_checked_before_the_body_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A header that promises more than the file holds fails on the header alone: no read past it."""
    path = _raw_safetensors(tmp_path / "x.safetensors", {"a": {"dtype": "F32", "shape": [8],
                                                               "data_offsets": [0, 32]}}, bytes(16))
    reads: list[int] = []
    real_open = Path.open

    class Spy:
        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def __enter__(self) -> "Spy":
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

        def read(self, n: int = -1) -> bytes:
            reads.append(n)
            return self.fh.read(n)

        def seek(self, at: int) -> int:
            return self.fh.seek(at)

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: Spy(real_open(self, *a, **k)))
    with pytest.raises(CheckpointError, match="outside the 16-byte data section"):
        read_safetensors(path)
    assert len(reads) == 2  # the length, then the header: never the file whole


def test_settings_added_to_projection_config_later_are_range_checked_generically(monkeypatch) -> None:
    from rlsched.policies import projected

    @dataclasses.dataclass(frozen=True)
    class Later(projected.ProjectionConfig):
        new_knob: float = 1.0

    monkeypatch.setattr(projected, "ProjectionConfig", Later)
    ck.check_projection("p.json", {"new_knob": 3.0, "memory_safety_margin": 0.1})
    with pytest.raises(CheckpointError, match=r"p.json: projection.new_knob: inf must be finite"):
        ck.check_projection("p.json", {"new_knob": float("inf")})


_BLOCK = textwrap.dedent("""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "stable_baselines3"):
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, Block())
    import numpy as np  # numpy itself imports the pickle module, so pickle's loaders are disabled instead
    import pickle, _pickle

    def refuse(*args, **kwargs):
        raise RuntimeError("unpickling attempted")

    for mod in (pickle, _pickle):
        mod.load = mod.loads = mod.Unpickler = refuse
""")
"""Imports torch and stable_baselines3 fail, unpickling raises; what follows runs under that."""

BLOCKED = _BLOCK + textwrap.dedent("""
    from rlsched.learned.knob import rl_policy
    from rlsched.resources import data_dir
    policy = rl_policy(data_dir("checkpoints") / "default")
    action = policy.act(np.zeros(policy.act.meta["obs_dim"], np.float32))
    assert np.isfinite(action).all()
    assert not {"torch", "stable_baselines3"} & set(sys.modules)
    print("ok")
""")


def test_shipped_checkpoint_loads_without_torch_sb3_or_unpickling() -> None:
    res = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


PICK_BLOCKED = _BLOCK + textwrap.dedent("""
    from rlsched.evaluation import RunSpec, prepare
    from rlsched.policies import make_policy
    policy = make_policy("pick:checkpoints/pick;static=agents/tuned/default.json")
    sim = prepare(RunSpec("default", "pick", 11, 1.5, 1200.0))
    policy.reset(sim)
    while sim.advance_to_next_decision() and not policy.decisions:
        sim.apply(policy.decide(sim))  # the first decision with a choice runs the numpy scorer
    assert policy.decisions == 1 and policy.view is not None and policy.view.mask.sum() > 1
    assert not {"torch", "stable_baselines3"} & set(sys.modules)
    print("ok")
""")


def test_shipped_candidate_scorer_loads_and_decides_without_torch_sb3_or_unpickling() -> None:
    """Caught: the pick loader or policy importing torch/SB3 or unpickling anything (the plugin
    serves it in a vLLM process with neither installed, and a pickle runs code)."""
    res = subprocess.run([sys.executable, "-c", PICK_BLOCKED], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


# ---------------------------------------------------------------- the content hash, numpy only
SHIPPED_PICK = data_dir("checkpoints") / "pick"


def _load_knob(folder: Path) -> Any:
    return load_checkpoint(folder)


def _load_pick(folder: Path) -> Any:
    from rlsched.learned.pick import load_scorer

    return load_scorer(folder)


def _shift_obs_mean(meta: dict) -> None:
    meta["obs_norm"]["mean"][0] += 0.5


def _shift_base_action(meta: dict) -> None:
    meta["base_action"][0] += 0.25


KINDS = pytest.mark.parametrize(("shipped", "load", "edit"), [
    (SHIPPED, _load_knob, _shift_obs_mean), (SHIPPED_PICK, _load_pick, _shift_base_action)],
    ids=["default", "pick"])


def _copy(shipped: Path, tmp_path: Path, load: Callable[[Path], Any]) -> Path:
    import shutil

    folder = Path(shutil.copytree(shipped, tmp_path / shipped.name))
    load(folder)  # the untouched copy loads: a refusal below is the edit's doing
    return folder


@KINDS
def test_a_flipped_weight_byte_is_refused_by_the_content_hash(tmp_path: Path, shipped: Path, load, edit) -> None:
    """Caught: the content-hash check removed from ``read_checkpoint`` (learned/checkpoint.py):
    one flipped bit in a weight's mantissa still parses as a valid, finite safetensors file, so
    only the hash can tell."""
    folder = _copy(shipped, tmp_path, load)
    raw = bytearray((folder / WEIGHTS).read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    raw[8 + n] ^= 0x01  # lowest mantissa bit of the first float of the data section
    (folder / WEIGHTS).write_bytes(bytes(raw))
    assert np.isfinite(np.concatenate([t.ravel() for t in read_safetensors(folder / WEIGHTS).values()])).all()
    with pytest.raises(CheckpointError, match="hash"):
        load(folder)


@KINDS
def test_an_edited_policy_json_is_refused_by_the_content_hash(tmp_path: Path, shipped: Path, load, edit) -> None:
    """Caught: the same removed check: a valid edit of the metadata (observation statistics, the
    base action) without re-signing is refused, not served."""
    folder = _copy(shipped, tmp_path, load)
    meta = json.loads((folder / META).read_text())
    edit(meta)
    (folder / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
    with pytest.raises(CheckpointError, match="hash"):
        load(folder)
    meta["content_sha256"] = ck.content_hash((folder / WEIGHTS).read_bytes(), meta)
    (folder / META).write_text(json.dumps(meta))
    load(folder)  # re-signed, the same edit is a valid checkpoint: the hash was the only objection
