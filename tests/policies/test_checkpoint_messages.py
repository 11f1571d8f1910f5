"""Each checkpoint message of docs/errors.md, triggered by a copy of the shipped knob policy
(``checkpoints/default``) with one thing wrong, rehashed where the hash would otherwise refuse it
first, and naming the file (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlsched.errors import CheckpointError
from rlsched.learned.checkpoint import (
    META,
    WEIGHTS,
    FrozenNetwork,
    content_hash,
    load_checkpoint,
    read_checkpoint,
    read_safetensors,
    read_weights,
    write_safetensors,
)
from rlsched.resources import data_dir

SHIPPED = data_dir("checkpoints") / "default"


def copy(tmp_path: Path, edit: Any = None) -> Path:
    """The shipped checkpoint, its metadata edited by ``edit(meta)`` and rehashed."""
    folder = tmp_path / "ck"
    shutil.copytree(SHIPPED, folder)
    if edit is not None:
        meta = json.loads((folder / META).read_text())
        edit(meta)
        meta["content_sha256"] = content_hash((folder / WEIGHTS).read_bytes(), meta)
        (folder / META).write_text(json.dumps(meta))
    return folder


def _set(key: str, value: Any) -> Any:
    return lambda meta: meta.__setitem__(key, value)


def _norm(key: str, value: Any) -> Any:
    return lambda meta: meta["obs_norm"].__setitem__(key, value)


@pytest.mark.parametrize("edit, message", [
    (_set("obs_schema", "other/1"), "does not match this rlsched"),
    (_set("activation", "gelu"), "activation 'gelu' unknown (known"),
    (_set("layers", []), "layers must be a non-empty list of tensor names, not []"),
    (_set("layers", ["nosuch"]), "nosuch.weight or nosuch.bias missing from policy.safetensors"),
    (_set("obs_norm", [1]), "obs_norm must be an object or null, not list"),
    (_norm("clip", 0), "obs_norm.clip must be a finite number > 0, not 0"),
    (_norm("epsilon", -1), "obs_norm.epsilon must be a finite number >= 0, not -1"),
    (_norm("mean", "x"), "must be a list of numbers"),
    (_set("projection", [1]), "projection must be an object, not list"),
])
def test_bad_metadata_names_the_field(tmp_path: Path, edit: Any, message: str) -> None:
    folder = copy(tmp_path, edit)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(folder, expect_schema="dit-batch-obs/2")
    assert str(folder) in str(err.value) and message in str(err.value), err.value


def test_tampered_weights_fail_the_content_hash(tmp_path: Path) -> None:
    folder = copy(tmp_path)
    raw = bytearray((folder / WEIGHTS).read_bytes())
    raw[-1] ^= 1
    (folder / WEIGHTS).write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="content hash mismatch — the files were modified or mixed up"):
        read_checkpoint(folder)


def test_non_finite_weights_are_refused(tmp_path: Path) -> None:
    folder = copy(tmp_path)
    tensors = read_safetensors(folder / WEIGHTS)
    name = next(n for n in tensors if n.endswith(".bias"))
    tensors[name] = np.full_like(tensors[name], np.nan)
    write_safetensors(folder / WEIGHTS, tensors)
    meta = json.loads((folder / META).read_text())
    meta["content_sha256"] = content_hash((folder / WEIGHTS).read_bytes(), meta)
    (folder / META).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"non-finite values \(NaN or inf\)"):
        load_checkpoint(folder)


def _weights(tmp_path: Path, raw: bytes) -> Path:
    path = tmp_path / WEIGHTS
    path.write_bytes(raw)
    return path


def _file(header: Any, body: bytes = b"", length: int | None = None) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + body


@pytest.mark.parametrize("raw, message", [
    (b"\x01\x02", "not a valid safetensors file (shorter than the 8-byte header length)"),
    (_file({}, length=10**6), "not a valid safetensors file (header length 1000000 past the end of the file)"),
    (_file([1]), "not a valid safetensors file (header is not a JSON object)"),
    (_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 8),
     "data_offsets span 4 bytes, shape [2] needs 8"),
    (_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, b"\0" * 8),
     "tensors 'a' and 'b' overlap (data_offsets)"),
])
def test_a_malformed_weights_file_names_what_is_wrong(tmp_path: Path, raw: bytes, message: str) -> None:
    path = _weights(tmp_path, raw)
    with pytest.raises(CheckpointError) as err:
        read_weights(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value), err.value


def test_a_header_over_the_format_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlsched.learned.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "MAX_HEADER_BYTES", 16)
    path = _weights(tmp_path, _file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4))
    with pytest.raises(CheckpointError, match="not a valid safetensors file \\(header length"):
        read_weights(path)


def test_a_network_built_in_code_checks_its_activation() -> None:
    with pytest.raises(CheckpointError, match=r"activation 'gelu' unknown \(known"):
        FrozenNetwork((), "gelu", np.zeros(1), np.ones(1), 1.0, 0.0, {})
