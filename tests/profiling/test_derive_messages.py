"""Every refusal of ``profile derive``, ``profile: auto`` and the GPU table names its input (docs/errors.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlsched.errors import ConfigError
from rlsched.profiling.architecture import ARCH_DIR, read_architecture
from rlsched.profiling.derive import auto_profile, load_efficiencies
from rlsched.profiling.gpus import find_gpu, parse_gpu_spec

ROOT = Path(__file__).resolve().parents[2]


def _folder(tmp_path: Path, transformer: dict | None = None, index: dict | None = None) -> Path:
    folder = tmp_path / "m"
    (folder / "transformer").mkdir(parents=True, exist_ok=True)
    (folder / "model_index.json").write_text(json.dumps(index or {"_class_name": "WanPipeline"}))
    if transformer is not None:
        (folder / "transformer" / "config.json").write_text(json.dumps(transformer))
    return folder


WAN = json.loads((ARCH_DIR / "wan2.1-t2v-1.3b" / "transformer" / "config.json").read_text())


@pytest.mark.parametrize("transformer,index,message", [
    (None, None, "no transformer/config.json: the DiT's architecture is needed"),
    (WAN, {"_class_name": "StableDiffusionPipeline"}, "is not one rlsched can derive a profile for"),
    ({"_class_name": "UNet2DConditionModel"}, None, "is not a DiT rlsched can read"),
    ([1, 2], None, "must hold a JSON object"),
    ({**WAN, "num_layers": -3}, None, "num_layers: must be a whole number >= 0, not -3"),
    ({**WAN, "patch_size": [1, 2]}, None, "patch_size: must be [t, h, w] whole numbers, not [1, 2]"),
    ({**WAN, "num_layers": 0}, None, "attention width and layer count must be > 0"),
])
def test_a_config_it_cannot_read_is_refused_naming_the_file(tmp_path: Path, transformer: object, index: dict | None,
                                                            message: str) -> None:
    folder = _folder(tmp_path, None, index)
    if transformer is not None:
        (folder / "transformer" / "config.json").write_text(json.dumps(transformer))
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_architecture(folder)


def test_a_folder_without_an_index_and_a_name_it_does_not_ship(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("has no model_index.json (a diffusers model folder needs "
                                                    "model_index.json and transformer/config.json")):
        read_architecture(tmp_path)
    with pytest.raises(ConfigError, match="is neither a diffusers model folder nor a shipped architecture"):
        read_architecture("sdxl-turbo")


@pytest.mark.parametrize("spec,message", [
    ("tflops", "'tflops' is not KEY=NUMBER with KEY one of"),
    ("tflops=-1,bandwidth_gbs=1,memory_gb=1", "must be a number in (0, 1e6], not '-1'"),
    ("tflops=1", "missing ['bandwidth_gbs', 'memory_gb'] (tflops=...,bandwidth_gbs=...,memory_gb=...)"),
])
def test_a_gpu_by_numbers_it_cannot_read(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_gpu_spec(spec)
    with pytest.raises(ConfigError, match=re.escape("give its numbers instead: --gpu-spec tflops=...,bandwidth_gbs=..."
                                                    ",memory_gb=...")):
        find_gpu("Voodoo")


def test_profile_auto_says_what_it_lacks(tmp_path: Path) -> None:
    shutil.copytree(ARCH_DIR / "wan2.1-t2v-1.3b", tmp_path / "wan")
    with pytest.raises(ConfigError, match=re.escape("auto: cannot derive a profile: gpu: NVML reports no GPU here: set "
                                                    "extras.rlsched.gpu (a name such as L40S, or tflops=...,"
                                                    "bandwidth_gbs=...,memory_gb=...)")):
        auto_profile(str(tmp_path / "wan"))
    with pytest.raises(ConfigError, match=re.escape("model: the served model's folder is unknown")):
        auto_profile("", "H100")


def test_an_efficiency_file_that_is_not_one(tmp_path: Path) -> None:
    bad = tmp_path / "eff.yaml"
    bad.write_text("efficiencies: {eff_linear: 0.5, eff_lienar: 0.4}\n")
    with pytest.raises(ConfigError, match=re.escape("'efficiencies' must map some of")):
        load_efficiencies(bad)
    bad.write_text("efficiencies: {eff_linear: -0.5}\n")
    with pytest.raises(ConfigError, match=re.escape("efficiencies ['eff_linear'] must be finite numbers > 0")):
        load_efficiencies(bad)


def test_deploy_profile_auto_needs_the_served_model_and_a_gpu(tmp_path: Path) -> None:
    def deploy(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rlsched", "deploy", "--policy", "edf", "--profile", "auto",
                               *args, "--out", str(tmp_path / "d.yaml")], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)

    res = deploy("--gpu", "L40S")
    assert res.returncode == 2 and ("--profile auto derives the profile of the served model: name its folder so that "
                                    "deploy can check what the plugin will derive") in res.stderr
    res = deploy("--served-model", str(ARCH_DIR / "flux1-dev"))
    assert res.returncode == 2 and ("--profile auto: NVML reports no GPU here; name the serving GPU (--gpu L40S, or "
                                    "--gpu tflops=...,bandwidth_gbs=...,memory_gb=...)") in res.stderr


def test_cli_derive_without_model_or_gpu() -> None:
    res = subprocess.run([sys.executable, "-m", "rlsched", "profile", "derive", "--gpu", "H100"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2 and "derive needs --model and --gpu (or --gpu-spec); see --list-models, --list-gpus" \
        in res.stderr
    res = subprocess.run([sys.executable, "-m", "rlsched", "profile", "derive", "--model", "qwen-image", "--gpu", "L4"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2 and "parameters in BF16 with the prior's memory overhead take" in res.stderr
