"""``rlsched profile predict``: the library's figures as JSON or text, and a typed error naming
the flag for every bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlsched.cli import main
from rlsched.sim import Request, load_profile

ROOT = Path(__file__).resolve().parents[2]


def _json(capsys, *argv: str) -> dict:
    assert main(["profile", "predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_keys_and_values_are_the_cost_models(capsys) -> None:
    out = _json(capsys, "qwen-image-h800-sdpa", "--height", "2048", "--width", "2048", "--steps", "50", "--cfg",
                "--sp", "4")
    assert {"latency_s", "peak_gb_per_gpu", "step_s", "sp", "sp_degree", "gpu_memory_gb", "fits_in_memory"} <= set(out)
    cost = load_profile("qwen-image-h800-sdpa")
    req = Request(0, 0.0, "qwen-image", "image", 2048, 2048, 1, 50, True, "batch", math.inf)
    assert out["latency_s"] == cost.standalone_sp_s(req, 4)
    assert out["peak_gb_per_gpu"] == cost.batch_memory_gb_sp([cost.record(req)], 4)
    assert out["sp"] == "ulysses4" and out["sp_degree"] == 4 and out["fits_in_memory"] is True
    assert out["latency_s"] == pytest.approx(39.6, rel=0.10)  # the published Ulysses-4 row


def test_degree_one_is_the_single_gpu_standalone_time(capsys) -> None:
    for name, model in (("qwen-image-h200", "qwen-image"), ("wan21-t2v-14b-h100", "wan2.1-t2v-14b")):
        cost = load_profile(name)
        m = cost.model(model)
        req = Request(0, 0.0, model, m.modality, 480, 832, 81 if m.modality == "video" else 1, 30, True, "batch",
                      math.inf)
        out = _json(capsys, name, "--height", "480", "--width", "832", "--frames", str(req.num_frames), "--steps",
                    "30", "--cfg")
        assert out["latency_s"] == cost.standalone_s(req)
        assert out["peak_gb_per_gpu"] == cost.batch_memory_gb([cost.record(req)])


def test_batch_layouts_and_the_model_flag(capsys) -> None:
    one = _json(capsys, "flux1-dev-h100", "--height", "1024", "--width", "1024", "--steps", "28", "--sp", "u2r2")
    four = _json(capsys, "flux1-dev-h100", "--height", "1024", "--width", "1024", "--steps", "28", "--sp", "u2r2",
                 "--batch", "4")
    assert one["sp"] == "ulysses2xring2" and four["latency_s"] > one["latency_s"]
    assert four["peak_gb_per_gpu"] > one["peak_gb_per_gpu"]
    ring = _json(capsys, "qwen-image-a100-vllm-omni", "--height", "1024", "--width", "1024", "--steps", "50",
                 "--cfg", "--sp", "2")
    assert ring["sp"] == "ring2"  # an integer degree means the profile's sp.method
    omni = _json(capsys, "omni-h200", "--model", "qwen-image", "--height", "512", "--width", "512", "--steps", "20")
    assert omni["model"] == "qwen-image"


def test_text_output_starts_with_the_latency(capsys) -> None:
    assert main(["profile", "predict", "qwen-image-h20-gfdit", "--height", "1536", "--width", "1536", "--steps",
                 "1", "--sp", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[0] == "latency_s" and float(lines[1].split()[1]) > 0
    assert lines[3].startswith("peak_gb_per_gpu")


@pytest.mark.parametrize(("argv", "flag"), [
    (["qwen-image-h200", "--height", "0", "--width", "512", "--steps", "20"], "--height"),
    (["qwen-image-h200", "--height", "512", "--width", "wide", "--steps", "20"], "--width"),
    (["qwen-image-h200", "--height", "512", "--width", "512", "--steps", "-3"], "--steps"),
    (["qwen-image-h200", "--height", "512", "--width", "512", "--steps", "20", "--frames", "1.5"], "--frames"),
    (["qwen-image-h200", "--height", "512", "--width", "512", "--steps", "20", "--batch", "0"], "--batch"),
    (["qwen-image-h200", "--height", "99999999", "--width", "512", "--steps", "20"], "--height"),
    (["qwen-image-h200", "--height", "512", "--width", "512", "--steps", "20", "--sp", "2"], "--sp"),
    (["qwen-image-h20-gfdit", "--height", "512", "--width", "512", "--steps", "20", "--sp", "0"], "--sp"),
    (["qwen-image-h20-gfdit", "--height", "512", "--width", "512", "--steps", "20", "--sp", "tp2"], "--sp"),
    (["qwen-image-h20-gfdit", "--height", "512", "--width", "512", "--steps", "20", "--sp", "ring2"], "--sp"),
    (["qwen-image-h20-gfdit", "--height", "512", "--width", "512", "--steps", "20", "--sp", "u8192"], "--sp"),
    (["omni-h200", "--height", "512", "--width", "512", "--steps", "20"], "--model"),
    (["flux1-dev-h100", "--model", "sdxl", "--height", "512", "--width", "512", "--steps", "20"], "--model"),
    (["no-such-profile", "--height", "512", "--width", "512", "--steps", "20"], "PROFILE"),
])
def test_bad_input_is_a_config_error_naming_the_flag(capsys, argv: list[str], flag: str) -> None:
    if flag in ("--height", "--width", "--steps", "--frames", "--batch"):  # typed flags: rlsched.bounds' ranges
        with pytest.raises(SystemExit) as exc:
            main(["profile", "predict", *argv])
        assert exc.value.code == 2 and f"error: argument {flag}: must be an integer >= 1" in capsys.readouterr().err
        return
    assert main(["profile", "predict", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlsched: error: {flag}:"), err
    assert "Traceback" not in err


def test_as_a_subprocess_bad_input_exits_2_without_a_traceback() -> None:
    res = subprocess.run([sys.executable, "-m", "rlsched", "profile", "predict", "flux1-dev-h100", "--height", "x",
                          "--width", "1024", "--steps", "28"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2 and "--height" in res.stderr and "Traceback" not in res.stderr
