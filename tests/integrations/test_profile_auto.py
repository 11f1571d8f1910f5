"""``profile: auto``: the plugin derives the served model's profile at start-up (issue 46)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.cpu_server import build_tiny_model
from rlsched.integrations.vllm_omni.profiles import stage_profile
from rlsched.profiling.architecture import ARCH_DIR

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return build_tiny_model(tmp_path / "tiny-qwen")


def test_auto_derives_the_served_folder_on_the_named_gpu_and_logs_from_what(tiny: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rlsched.integrations.vllm_omni.profiles"):
        cost = stage_profile(PluginConfig(profile="auto", gpu="L40S"), str(tiny))
    assert cost.gpu == "L40S" and cost.gpu_memory_gb == 48 and list(cost.models) == ["tiny-qwen"]
    (line,) = [r.getMessage() for r in caplog.records]
    assert "QwenImagePipeline" in line and str(tiny) in line and "L40S (the gpu setting" in line


def test_auto_reads_a_gpu_given_by_its_numbers(tiny: Path) -> None:
    cost = stage_profile(PluginConfig(profile="auto", gpu="tflops=100,bandwidth_gbs=500,memory_gb=24"), str(tiny))
    assert cost.gpu_memory_gb == 24 and cost.peak_tflops == 100


def test_a_named_profile_is_loaded_as_before() -> None:
    assert stage_profile(PluginConfig(profile="flux1-dev-h100"), "/anything").name == "flux1-dev-h100"


def test_auto_without_a_gpu_or_a_readable_model_refuses_naming_the_setting(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"extras.rlsched.profile: auto: .*gpu"):
        stage_profile(PluginConfig(profile="auto"), str(tiny))  # no NVML on this machine
    with pytest.raises(ConfigError, match=r"extras.rlsched.profile: auto: .*model_index.json"):
        stage_profile(PluginConfig(profile="auto", gpu="H100"), str(tmp_path))
    with pytest.raises(ConfigError, match=r"extras.rlsched.profile: auto: .*unknown"):
        stage_profile(PluginConfig(profile="auto", gpu="H100"), None)


def test_a_gpu_setting_it_cannot_read_is_refused_at_config_time() -> None:
    with pytest.raises(ConfigError, match=r"extras.rlsched.gpu: .*Voodoo"):
        PluginConfig(gpu="NVIDIA Voodoo 5")
    with pytest.raises(ConfigError, match=r"extras.rlsched.gpu: .*memory_gb"):
        PluginConfig(gpu="tflops=1,bandwidth_gbs=1")


def test_deploy_profile_auto_checks_what_the_plugin_will_derive_and_writes_the_gpu(tiny: Path, tmp_path: Path) -> None:
    out = tmp_path / "deploy.yaml"
    res = subprocess.run([sys.executable, "-m", "rlsched", "deploy", "--policy", "edf", "--profile", "auto", "--gpu",
                          "L40S", "--served-model", str(tiny), "--out", str(out)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    extras = yaml.safe_load(out.read_text())["stages"][0]["extras"]["rlsched"]
    assert extras["profile"] == "auto" and extras["gpu"] == "L40S"
    res = subprocess.run([sys.executable, "-m", "rlsched", "deploy", "--policy", "edf", "--profile", "auto",
                          "--gpu", "L40S", "--out", str(out)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 2 and "--served-model" in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "rlsched", "deploy", "--policy", "edf", "--profile", "auto",
                          "--gpu", "L4", "--served-model", str(ARCH_DIR / "qwen-image"), "--out", str(out)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2 and "do not fit" in res.stderr and "Traceback" not in res.stderr  # 58 GB on 24
