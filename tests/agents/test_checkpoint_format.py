"""The pickle-free checkpoint format on its own (no torch needed)."""

from pathlib import Path

import numpy as np
import pytest

from rlsched.errors import CheckpointError
from rlsched.policies.checkpoint import read_safetensors, write_safetensors


def test_safetensors_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tensors = {"a.weight": rng.normal(size=(3, 5)).astype(np.float32), "b": np.arange(4, dtype=np.float32)}
    write_safetensors(tmp_path / "x.safetensors", tensors)
    back = read_safetensors(tmp_path / "x.safetensors")
    assert set(back) == set(tensors)
    for k in tensors:
        np.testing.assert_array_equal(back[k], tensors[k])


def test_readable_by_the_safetensors_library(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    tensors = {"w": np.ones((2, 2), np.float32)}
    write_safetensors(tmp_path / "x.safetensors", tensors)
    np.testing.assert_array_equal(st.load_file(str(tmp_path / "x.safetensors"))["w"], tensors["w"])


def test_garbage_is_a_checkpoint_error(tmp_path: Path) -> None:
    (tmp_path / "x.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(CheckpointError):
        read_safetensors(tmp_path / "x.safetensors")


def test_learned_policy_reads_the_states_telemetry_sample() -> None:
    from types import SimpleNamespace

    from rlsched.policies.learned import LearnedPolicy
    from rlsched.telemetry.base import TelemetrySample

    seen = []

    def act(obs: np.ndarray) -> np.ndarray:
        seen.append(obs)
        return np.zeros(9)

    policy = LearnedPolicy(act)
    sample = TelemetrySample(100.0, 141.0, 0.5, 0.25)
    state = SimpleNamespace(telemetry=sample)
    assert policy.sample_telemetry(state) is sample  # the plugin's view carries its latest NVML sample
    assert policy.sample_telemetry(SimpleNamespace(telemetry=None)) is None
    assert policy.sample_telemetry(SimpleNamespace()) is None
