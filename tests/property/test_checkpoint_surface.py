"""Checkpoint files, property-tested (issue 34): safetensors files with hostile headers (a header
length past the file or far past it, tensors of up to 65 dimensions, a dimension of 2**70, zero
dimensions beside huge ones, offsets reversed, past the data section or overlapping, dtypes and
values of the wrong kind) read through ``read_safetensors`` and, rehashed so the content hash
passes, through ``read_checkpoint`` and ``load_checkpoint``. Each is refused with a
``CheckpointError`` that names the file, or read into exactly the tensors its header declares."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlsched.errors import CheckpointError
from rlsched.learned.checkpoint import (
    META,
    WEIGHTS,
    content_hash,
    load_checkpoint,
    read_checkpoint,
    read_safetensors,
    save_checkpoint,
)

DIM = st.one_of(st.integers(0, 4), st.sampled_from([2**31, 2**63, 2**64, 2**70, 10**30, -1]),
                st.sampled_from([True, 1.0, "2", None, [2]]))
SHAPE = st.one_of(st.lists(DIM, max_size=3), st.lists(st.integers(0, 1), min_size=9, max_size=65),
                  st.lists(st.just(0), min_size=1, max_size=3).map(lambda s: [*s, 2**70]),
                  st.sampled_from([None, "2x2", 3, {}]))
OFFSET = st.one_of(st.integers(0, 64), st.sampled_from([-1, 2**64, 2**70, 1.5, True, None]))
@st.composite
def tensors(draw: st.DrawFn) -> dict[str, Any]:
    """A header entry; half the time its offsets span exactly what its shape needs (so only the
    shape's own checks can refuse it: rank, dimensions, their product)."""
    entry = draw(st.fixed_dictionaries({"dtype": st.sampled_from(["F32", "F64", "I8", "BF16", "", 4]), "shape": SHAPE,
                                        "data_offsets": st.one_of(st.lists(OFFSET, min_size=2, max_size=2),
                                                                  st.lists(OFFSET, max_size=3))}))
    shape = entry["shape"]
    if draw(st.booleans()) and isinstance(shape, list) and all(type(d) is int for d in shape):
        start = draw(st.integers(0, 8))
        entry["data_offsets"] = [start, start + math.prod(shape) * (8 if entry["dtype"] == "F64" else 4)]
    return entry


TENSOR = tensors()
HEADER = st.one_of(st.dictionaries(st.sampled_from(["a", "b", "c", "__metadata__"]), TENSOR, max_size=3),
                   st.sampled_from([[], "x", 1, None]))
LENGTH = st.one_of(st.none(), st.sampled_from([0, 1, 7, 2**32, 2**63, 2**64 - 1]))
"""The 8-byte header length: None for the true one, else a hostile value."""


def safetensors(header: Any, length: int | None, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + body


def check_read(tensors: dict[str, np.ndarray], header: Any) -> None:
    """What was read is what the header declares: its tensors, each of its shape and finite size."""
    declared = {k: v for k, v in header.items() if k != "__metadata__"}
    assert set(tensors) == set(declared)
    for name, arr in tensors.items():
        assert list(arr.shape) == declared[name]["shape"] and arr.dtype == np.float32


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(HEADER, LENGTH, st.binary(max_size=64))
def test_a_hostile_safetensors_header_is_refused_naming_the_file_or_read_as_declared(
        tmp_path: Path, header: Any, length: int | None, body: bytes) -> None:
    path = tmp_path / WEIGHTS
    path.write_bytes(safetensors(header, length, body))
    try:
        tensors = read_safetensors(path)
    except CheckpointError as exc:
        assert str(exc).startswith(str(path)), exc
        event("refused")
        return
    check_read(tensors, header)
    event("read")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["a", "b"]), TENSOR, min_size=1, max_size=2), st.binary(max_size=48),
       st.sampled_from(["read", "load"]))
def test_a_rehashed_hostile_checkpoint_is_refused_naming_its_folder(
        tmp_path: Path, header: dict[str, Any], body: bytes, how: str) -> None:
    """The content hash recomputed over the tampered weights (it is unkeyed: anyone can), so the
    header's own checks, not the hash, must refuse it."""
    folder = save_checkpoint(tmp_path / "ck", {"a": np.zeros((2, 2), np.float32)}, {"note": "x"})
    (folder / WEIGHTS).write_bytes(safetensors(header, None, body))
    meta = json.loads((folder / META).read_text())
    meta["content_sha256"] = content_hash((folder / WEIGHTS).read_bytes(), meta)
    (folder / META).write_text(json.dumps(meta))
    try:
        if how == "read":
            check_read(read_checkpoint(folder)[2], header)
            event("read")
        else:
            load_checkpoint(folder)
            raise AssertionError("a network from a header that holds no actor layers")
    except CheckpointError as exc:
        assert str(folder) in str(exc), exc
        event("refused")


def test_the_shapes_the_issue_names_are_refused() -> None:
    """Deterministic: 65 dimensions, a dimension of 2**70, zeros beside 2**70, and a header length
    past the file (each once ended in a numpy or MemoryError traceback)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / WEIGHTS
        for header, length in [({"a": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}}, None),
                               ({"a": {"dtype": "F32", "shape": [2**70], "data_offsets": [0, 4]}}, None),
                               ({"a": {"dtype": "F32", "shape": [0, 2**70], "data_offsets": [0, 0]}}, None),
                               ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, 2**63)]:
            path.write_bytes(safetensors(header, length, b"\0" * 4))
            try:
                read_safetensors(path)
            except CheckpointError as exc:
                assert str(path) in str(exc)
            else:
                raise AssertionError(f"read {header} (length {length})")
