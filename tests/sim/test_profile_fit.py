"""Every shipped profile is the fit of its committed measurement set, and is physical."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from rlsched.errors import ConfigError, TraceFormatError
from rlsched.profiling.fit import fit_profile, render_profile
from rlsched.profiling.measurements import Measurement, read_measurements
from rlsched.sim import Request, load_profile
from rlsched.sim.cost import PROFILE_DIR
from tests.profiling.synthetic import write_predicted_rows

MEASUREMENTS = PROFILE_DIR / "measurements"
SETS = sorted(p.name for p in MEASUREMENTS.iterdir() if p.is_dir())
SHIPPED = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def test_every_shipped_profile_has_a_measurement_set() -> None:
    assert SHIPPED and set(SHIPPED) == set(SETS)


@pytest.mark.parametrize("name", SETS)
def test_refit_reproduces_the_shipped_profile_exactly(name: str) -> None:
    result = fit_profile(MEASUREMENTS / name)
    shipped = yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text())
    assert result.profile == shipped
    text = render_profile(result, f"envs/profiles/measurements/{name}")
    assert text == (PROFILE_DIR / f"{name}.yaml").read_text()


@pytest.mark.parametrize("name", SETS)
def test_fitted_rows_are_reproduced_within_10_percent(name: str) -> None:
    fitted = [r for r in fit_profile(MEASUREMENTS / name).residuals if r.row.use == "fit"]
    worst = max((abs(r.error), r.row.line) for r in fitted) if fitted else (0.0, 0)
    assert worst[0] <= 0.10, f"{name}: line {worst[1]} off by {worst[0]:.1%}"


@pytest.mark.parametrize("name", SHIPPED)
def test_profile_names_its_stack(name: str) -> None:
    stack = load_profile(name).stack
    assert stack is not None and stack.engine and stack.attention and stack.precision


@pytest.mark.parametrize("name", SHIPPED)
def test_implied_flops_are_below_the_gpu_peak(name: str) -> None:
    """A coefficient that implies more FLOP/s than the GPU has is not a measurement of it
    (the pre-fit Wan2.1 profile implied ~1.7 PFLOP/s of linear layers on a ~1 PFLOP/s H100)."""
    cost = load_profile(name)
    assert cost.peak_tflops > 0
    checked = 0
    for m in cost.models.values():
        if not m.linear_gflop_per_token:
            continue
        lin, att = m.implied_tflops()
        assert 0 < lin < cost.peak_tflops, f"{m.name}: linear layers at {lin:.0f} TFLOP/s"
        assert 0 < att < cost.peak_tflops, f"{m.name}: attention at {att:.0f} TFLOP/s"
        checked += 1
    assert checked >= 1


def test_video_split_follows_the_two_resolution_attention_share() -> None:
    cost = load_profile("wan21-t2v-14b-h100")
    m = cost.model("wan2.1-t2v-14b")
    for (h, w), share in (((720, 1280), 0.70), ((480, 832), 0.50)):
        rec = cost.record(Request(0, 0.0, m.name, "video", h, w, 81, 50, True, "batch", math.inf))
        attn = m.c_s_per_gtok2 * rec.quad
        assert attn / rec.step_s == pytest.approx(share, abs=0.03)


def test_sequential_cfg_pays_the_fixed_cost_per_forward() -> None:
    seq = load_profile("qwen-image-h200-vllm-omni").model("qwen-image")
    assert seq.sequential_cfg
    t, q = 2 * 4096 / 1e6, 2 * 4096**2 / 1e9
    assert seq.step_time(t, q, passes=2) - seq.step_time(t, q, passes=1) == pytest.approx(seq.a_s)


def test_fit_recovers_known_coefficients(tmp_path: Path) -> None:
    """Rows generated from a known profile are fitted back to it (the fit is not a copy of start)."""
    src = MEASUREMENTS / "wan21-t2v-14b-h100"
    truth = load_profile("wan21-t2v-14b-h100")
    fit_yaml = yaml.safe_load((src / "fit.yaml").read_text())
    model = fit_yaml["models"]["wan2.1-t2v-14b"]
    model["start"].update(b_s_per_mtok=200.0, c_s_per_gtok2=9.0, act_gb_per_ktok=1.0)
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(fit_yaml))
    write_predicted_rows(src, truth, tmp_path)
    got = fit_profile(tmp_path).profile["models"]["wan2.1-t2v-14b"]
    want = truth.model("wan2.1-t2v-14b")
    assert got["step"]["b_s_per_mtok"] == pytest.approx(want.b_s_per_mtok, rel=1e-3)
    assert got["step"]["c_s_per_gtok2"] == pytest.approx(want.c_s_per_gtok2, rel=1e-3)
    assert got["act_gb_per_ktok"] == pytest.approx(want.act_gb_per_ktok, rel=1e-3)


def test_coefficients_the_rows_cannot_separate_are_refused_by_name(tmp_path: Path) -> None:
    """Three step coefficients (per-forward, linear, attention) fitted to two resolutions: a line
    of values fits equally well, and which one a solver returned depended on the CPU's BLAS
    kernels (the shipped vLLM-Omni profile refitted to a_s 0.032 on AMD, 0.031 on Intel). The fit
    refuses it, naming the three; the shipped set holds a_s, and then refits exactly everywhere."""
    src = MEASUREMENTS / "qwen-image-h200-vllm-omni"
    fit_yaml = yaml.safe_load((src / "fit.yaml").read_text())
    model = fit_yaml["models"]["qwen-image"]
    assert "a_s" not in model["fit"]
    model["fit"] = ["a_s", *model["fit"]]
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(fit_yaml))
    (tmp_path / "measurements.csv").write_text((src / "measurements.csv").read_text())
    with pytest.raises(ConfigError, match=r"do not identify \['a_s', 'b_s_per_mtok', 'c_s_per_gtok2'\]"):
        fit_profile(tmp_path)


def test_bad_row_names_file_line_and_column(tmp_path: Path) -> None:
    src = MEASUREMENTS / "flux1-dev-h100"
    text = (src / "measurements.csv").read_text().splitlines()
    text[1] = text[1].replace(",total_s,", ",seconds,")
    (tmp_path / "measurements.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(TraceFormatError, match=r"measurements.csv:2.*metric"):
        read_measurements(tmp_path / "measurements.csv")


def test_missing_stack_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load((PROFILE_DIR / "flux1-dev-h100.yaml").read_text())
    data["stack"]["kernel"] = "fa3"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="stack.kernel"):
        load_profile(path)
    del data["stack"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="stack"):
        load_profile(path)


def test_measurement_shape_label() -> None:
    row = Measurement("m", "H100", "s", 480, 832, 81, 1, 50, True, "step_s", 1.0, "fit", "x")
    assert row.shape == "832x480x81f"


def test_max_memory_form_holds_the_larger_of_activation_and_decode(tmp_path: Path) -> None:
    data = yaml.safe_load((PROFILE_DIR / "flux1-dev-h100.yaml").read_text())
    req = Request(0, 0.0, "flux1-dev", "image", 1024, 1024, 1, 28, False, "batch", math.inf)
    summed = load_profile("flux1-dev-h100").record(req).mem_gb
    data["models"]["flux1-dev"]["memory_form"] = "max"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    cost = load_profile(path)
    m = cost.model("flux1-dev")
    act, vae = m.act_gb_per_ktok * 4096 / 1e3, m.vae_gb_per_mpx * 1024 * 1024 / 1e6
    recs = [cost.record(Request(i, 0.0, "flux1-dev", "image", 1024, 1024, 1, 28, False, "batch", math.inf))
            for i in range(4)]
    assert recs[0].mem_gb == pytest.approx(max(act, vae)) and summed == pytest.approx(act + vae)
    assert cost.batch_memory_gb(recs) == pytest.approx(cost.weights_gb + max(4 * act, 4 * vae))
    data["models"]["flux1-dev"]["memory_form"] = "peak"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="memory_form"):
        load_profile(path)


def test_unknown_fit_yaml_key_is_refused(tmp_path: Path) -> None:
    src = MEASUREMENTS / "flux1-dev-h100"
    spec = yaml.safe_load((src / "fit.yaml").read_text())
    spec["max_mfuu"] = spec.pop("max_mfu")
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "measurements.csv").write_text((src / "measurements.csv").read_text())
    with pytest.raises(ConfigError, match="max_mfuu"):
        fit_profile(tmp_path)
