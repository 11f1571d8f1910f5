"""The pickle-free checkpoint format on its own (no torch needed)."""

from pathlib import Path

import numpy as np
import pytest

from rlsched.errors import CheckpointError
from rlsched.learned.checkpoint import read_safetensors, write_safetensors


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
    """A learned policy reads the telemetry its ``QueueView`` hands out: the plugin's latest NVML sample."""
    from rlsched.integrations.vllm_omni.config import PluginConfig
    from rlsched.integrations.vllm_omni.state import PluginState
    from rlsched.learned.knob import LearnedPolicy
    from rlsched.sim import ServingConfig, load_profile
    from rlsched.sim.telemetry import TelemetrySample

    policy = LearnedPolicy(lambda obs: np.zeros(9))
    state = PluginState(load_profile("qwen-image-h200"), ServingConfig("request", 4), PluginConfig(telemetry=False))
    policy.reset(state)
    assert not policy.sample_telemetry().known  # nothing read yet: unknown, not a guess
    state.telemetry = sample = TelemetrySample(100.0, 141.0, 0.5, 0.25)
    assert policy.sample_telemetry() is sample
