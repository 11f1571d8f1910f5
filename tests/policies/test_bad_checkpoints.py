"""Issue 18, checkpoint side: a re-signed pick checkpoint with malformed metadata, and JSON metadata
or safetensors headers past the size and nesting bounds, are a ``CheckpointError`` naming the file
and field — never a ValueError, TypeError, IndexError or RecursionError from numpy or json. Each
test's docstring names the bug it pins (all failed before the fix)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlsched.errors import CheckpointError
from rlsched.learned import checkpoint as ck
from rlsched.learned.checkpoint import META, WEIGHTS, load_checkpoint, read_safetensors, save_checkpoint
from rlsched.learned.pick import load_scorer, pick_policy
from rlsched.resources import data_dir
from rlsched.sim import yamlio

PICK = data_dir("checkpoints") / "pick"
KNOB = data_dir("checkpoints") / "default"


def resigned(tmp_path: Path, shipped: Path = PICK, meta_edit: Callable[[dict], Any] | None = None,
             tensor_edit: Callable[[dict], Any] | None = None) -> Path:
    """A shipped checkpoint, edited, then saved with a fresh (valid) content hash."""
    meta = json.loads((shipped / META).read_text())
    tensors = {k: v.copy() for k, v in read_safetensors(shipped / WEIGHTS).items()}
    if meta_edit:
        meta_edit(meta)
    if tensor_edit:
        tensor_edit(tensors)
    return save_checkpoint(tmp_path / "ck", tensors, meta)


def _base(value: Any) -> Callable[[dict], None]:
    return lambda meta: meta.__setitem__("base_action", value)


@pytest.mark.parametrize("value", [
    ["fast"] * 9,                       # strings: numpy raised ValueError
    [0.1] * 8 + [[0.1, 0.2]],           # ragged: ValueError ("inhomogeneous shape")
    [[0.1] * 9],                        # nested, shape (1, 9)
    {"cap": 0.5},                       # an object: TypeError
    "0.1,0.2",                          # a string
    None,                               # missing
    [True] * 9,                         # booleans are not numbers
    [0.1] * 8,                          # too short
    [0.1] * 8 + [float("nan")],         # not finite
    [0.1] * 8 + [2.0],                  # outside the action space [-1, 1] (decode_action clipped it silently)
], ids=["strings", "ragged", "nested", "object", "string", "missing", "bools", "short", "nan", "out-of-range"])
def test_bad_base_action_is_a_checkpoint_error_naming_it(tmp_path: Path, value: Any) -> None:
    """Bug: a re-signed pick checkpoint whose ``base_action`` held strings or was ragged raised
    ValueError/TypeError from numpy in ``load_scorer`` instead of a CheckpointError naming the field."""
    folder = resigned(tmp_path, meta_edit=_base(value))
    with pytest.raises(CheckpointError, match=r"policy.json: base_action") as err:
        load_scorer(folder)
    assert str(folder) in str(err.value)


def test_the_shipped_base_action_loads_and_builds_the_policy(tmp_path: Path) -> None:
    """Regression guard: the shipped scorer still loads, and a re-signed in-range edit still serves."""
    assert load_scorer(PICK).meta["base_action"]
    folder = resigned(tmp_path, meta_edit=lambda m: m["base_action"].__setitem__(0, -1.0))
    assert pick_policy(folder).base is not None


def _save_raw(folder: Path, tensors: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Like ``save_checkpoint`` but keeps 0-d tensors 0-d (its writer makes every tensor >= 1-d)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        blobs.append(arr.tobytes())
        offset += arr.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    folder.mkdir(parents=True)
    (folder / WEIGHTS).write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    meta = {**meta, "format_version": ck.FORMAT_VERSION}
    meta["content_sha256"] = ck.content_hash((folder / WEIGHTS).read_bytes(), meta)
    (folder / META).write_text(json.dumps(meta))
    return folder


def test_a_scalar_hidden_weight_is_a_checkpoint_error(tmp_path: Path) -> None:
    """Bug: a 0-d ``hidden.1.weight`` raised IndexError (``shape[0]`` of a scalar) in ``load_scorer``."""
    tensors = {k: v.copy() for k, v in read_safetensors(PICK / WEIGHTS).items()}
    tensors["hidden.1.weight"] = np.zeros((), np.float32)
    folder = _save_raw(tmp_path / "ck", tensors, json.loads((PICK / META).read_text()))
    assert read_safetensors(folder / WEIGHTS)["hidden.1.weight"].shape == ()
    with pytest.raises(CheckpointError, match=r"policy.json: layers\[1\] \(hidden.1\): weight \(\) and bias"):
        load_scorer(folder)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.__setitem__("hidden.1.weight", np.zeros(32, np.float32)), r"layers\[1\] \(hidden.1\)"),
    (lambda t: t.pop("hidden.1.weight"), r"hidden.1.weight or hidden.1.bias missing"),
    (lambda t: t.__setitem__("proposal_bias", np.zeros((1, 1), np.float32)), r"proposal_bias must be one"),
])
def test_malformed_scorer_tensors_name_the_layer(tmp_path: Path, edit: Any, message: str) -> None:
    """Regression guard (already CheckpointErrors): other malformed scorer tensors name their layer."""
    folder = resigned(tmp_path, tensor_edit=edit)
    with pytest.raises(CheckpointError, match=message):
        load_scorer(folder)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("global_out", "32", "global_out must be an integer >= 1"),
    ("global_out", True, "global_out must be an integer >= 1"),
    ("global_out", 10**30, r"layers\[0\] gives 32 outputs, global_out is 10{30}"),
    ("global_dim", 36, "global_dim 36 != "),
    ("projection", None, "projection must be an object"),
    ("projection", {"memory_safety_margin": 1e308}, "projection.memory_safety_margin"),
    ("kind", ["pick"], "is not a candidate scorer"),
    ("pick_schema", {"v": 1}, "do not match this rlsched"),
])
def test_the_rest_of_the_scorer_metadata_is_checked_the_same_way(tmp_path: Path, key: str, value: Any,
                                                                 message: str) -> None:
    """Regression guard (these were already CheckpointErrors): every other metadata read of
    ``load_scorer`` names its field for wrong types and extremes too."""
    folder = resigned(tmp_path, meta_edit=lambda m: m.__setitem__(key, value))
    with pytest.raises(CheckpointError, match=message):
        load_scorer(folder)


# ------------------------------------------------------------------ bounded JSON


def _nested(depth: int) -> Any:
    out: Any = 0
    for _ in range(depth):
        out = [out]
    return out


@pytest.mark.parametrize("shipped, load", [(PICK, load_scorer), (KNOB, load_checkpoint)], ids=["pick", "knob"])
def test_policy_json_nested_past_the_bound_is_refused(tmp_path: Path, shipped: Path, load: Any) -> None:
    """Bug: ``policy.json`` was read with unbounded nesting (a re-signed 100-level value loaded)."""
    folder = resigned(tmp_path, shipped, meta_edit=lambda m: m.__setitem__("notes", _nested(100)))
    with pytest.raises(CheckpointError, match=r"policy.json: nested deeper than 64 levels"):
        load(folder)


def test_deeply_nested_policy_json_is_not_a_recursion_error(tmp_path: Path) -> None:
    """Bug: 100,000 nested brackets raised RecursionError from json, not a CheckpointError."""
    folder = resigned(tmp_path)
    (folder / META).write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(CheckpointError, match="nested deeper than 64 levels"):
        load_scorer(folder)


def test_policy_json_with_a_5000_digit_integer(tmp_path: Path) -> None:
    """Bug: a 5000-digit integer raised ValueError (Python's int-string limit) from json."""
    folder = resigned(tmp_path)
    (folder / META).write_text('{"x": ' + "9" * 5000 + "}")
    with pytest.raises(CheckpointError, match=r"policy.json: invalid JSON \(Exceeds the limit"):
        load_scorer(folder)


def test_policy_json_over_the_size_cap_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: ``policy.json`` of any size was read whole (16 MiB cap now)."""
    assert yamlio.MAX_JSON_BYTES == 16 << 20
    folder = resigned(tmp_path)
    monkeypatch.setattr(yamlio, "MAX_JSON_BYTES", 1024)
    with pytest.raises(CheckpointError, match=r"policy.json: larger than"):
        load_scorer(folder)


def _raw_safetensors(path: Path, header: bytes, body: bytes = b"") -> Path:
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + body)
    return path


def test_safetensors_header_nested_too_deep(tmp_path: Path) -> None:
    """Bug: a safetensors header of 100,000 nested brackets raised RecursionError from json."""
    path = _raw_safetensors(tmp_path / "x.safetensors", b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(CheckpointError, match=r"x.safetensors: not a valid safetensors file .*nested deeper"):
        read_safetensors(path)
    path = _raw_safetensors(tmp_path / "y.safetensors", b'{"a": ' + b"9" * 5000 + b"}")
    with pytest.raises(CheckpointError, match=r"y.safetensors: not a valid safetensors file .*invalid JSON"):
        read_safetensors(path)


def test_safetensors_header_over_the_format_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: a header length up to the file size (any size) was parsed; safetensors caps it at 100 MiB."""
    assert ck.MAX_HEADER_BYTES == 100 << 20
    monkeypatch.setattr(ck, "MAX_HEADER_BYTES", 64)
    path = _raw_safetensors(tmp_path / "x.safetensors", b'{"__metadata__": {"a": "' + b"b" * 100 + b'"}}')
    with pytest.raises(CheckpointError, match="header length .* over"):
        read_safetensors(path)


def test_a_tuned_action_file_is_read_with_bounded_nesting(tmp_path) -> None:
    """Caught: ``static:`` read tuned files with plain ``json.loads`` (deep nesting: RecursionError)."""
    from rlsched.errors import ConfigError
    from rlsched.policies.static import load_static

    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "bad.json").write_text("{ nope")
    with pytest.raises(ConfigError, match="deep.json: nested deeper than"):
        load_static(str(tmp_path / "deep.json"))
    with pytest.raises(ConfigError, match=r"bad.json: invalid JSON .*line 1"):
        load_static(str(tmp_path / "bad.json"))


@pytest.mark.parametrize(("offsets", "why"), [([8, 16], "invalid offset"), ([0, 8], "not fully covered")])
def test_what_only_safetensors_checks_is_a_checkpoint_error(tmp_path: Path, offsets: list[int], why: str) -> None:
    """A gap before a tensor, or bytes after the last: the safetensors package refuses them (the
    checks of ``read_weights`` pass), and its refusal is a CheckpointError naming the file."""
    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": offsets}}).encode()
    path = _raw_safetensors(tmp_path / "g.safetensors", header, np.arange(4, dtype="<f4").tobytes())
    with pytest.raises(CheckpointError, match=rf"g.safetensors: not a valid safetensors file \(.*{why}"):
        read_safetensors(path)


def test_the_writer_is_the_safetensors_package_and_the_shipped_bytes_are_unchanged(tmp_path: Path) -> None:
    from safetensors.numpy import load

    for name in ("default", "pick", "router"):
        shipped = data_dir("checkpoints") / name / WEIGHTS
        tensors = read_safetensors(shipped)
        ck.write_safetensors(tmp_path / f"{name}.safetensors", tensors)
        assert (tmp_path / f"{name}.safetensors").read_bytes() == shipped.read_bytes()
        assert set(load(shipped.read_bytes())) == set(tensors)
