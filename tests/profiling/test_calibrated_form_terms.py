"""``rlsched profile calibrate`` with the full refit's form terms (issue 46): a log line or ``--scales`` with
encode, decode and comm scales writes a profile whose coefficients are ``rescaled``'s, its provenance naming
the terms refit; a bad form-term scale is refused naming the term (``check_scales``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.cli import main
from rlsched.errors import ConfigError
from rlsched.profiling.calibrated import calibrated_profile, parse_scales, scales_from_log, scales_from_metrics
from rlsched.sim.cost import load_profile, profile_from_dict
from rlsched.sim.truth import MEMORY_TERMS, SP_TIME_TERMS, TIME_TERMS, rescaled

PROFILE = "qwen-image-h200-vllm-omni"
OLD = "rlsched: cost profile {p} calibrated, version 1: qwen-image time x1.100, attention x1.000, memory x1.000\n"
NEW = ("rlsched: cost profile {p} calibrated, version 2: qwen-image time x1.300, attention x1.020, memory x1.000, "
       "fixed x0.500, encode x1.000, decode x2.000, comm x1.500\n")
FULL = (1.3, 1.02, 1.0, 0.5, 1.0, 2.0, 1.5)


def test_a_log_line_with_decode_and_comm_is_read_and_an_older_line_still_is() -> None:
    log = "INFO " + OLD.format(p=PROFILE) + "INFO " + NEW.format(p=PROFILE)
    assert scales_from_log(log, "server.log") == (PROFILE, 2, {"qwen-image": FULL})
    assert scales_from_log(OLD.format(p=PROFILE), "server.log")[2] == {"qwen-image": (1.1, 1.0, 1.0)}
    by_hand = parse_scales("qwen-image=1.3,1.02,1,0.5,1,2,1.5; wan=1,1,1,1,1.2", "--scales")
    assert by_hand == {"qwen-image": FULL, "wan": (1.0, 1.0, 1.0, 1.0, 1.2)}
    assert parse_scales("qwen-image=1.3,1,1,1,1,1,1", "--scales") == {"qwen-image": (1.3, 1.0, 1.0)}


def test_the_written_profile_holds_rescaleds_coefficients_decode_times_d() -> None:
    data = calibrated_profile(PROFILE, {"qwen-image": FULL}, "test")
    written = profile_from_dict(data, "calibrated").model("qwen-image")
    shipped = load_profile(PROFILE).model("qwen-image")
    want = rescaled(load_profile(PROFILE), {"qwen-image": FULL}, "check").model("qwen-image")
    assert written.decode_s_per_mpx == pytest.approx(shipped.decode_s_per_mpx * 1.3 * 2.0, rel=1e-5)
    assert written.a_s == pytest.approx(shipped.a_s * 1.3 * 0.5, rel=1e-5)
    for key in (*TIME_TERMS, *MEMORY_TERMS):
        assert getattr(written, key) == pytest.approx(getattr(want, key), rel=1e-5), key
    assert written.sp is not None and want.sp is not None and written.cfg_parallel is not None
    for key in SP_TIME_TERMS:  # the ring's terms: None in this profile, and kept so
        value = getattr(want.sp, key)
        assert getattr(written.sp, key) == (None if value is None else pytest.approx(value, rel=1e-5)), key
    assert written.sp.ulysses_comm_s_per_mtok == pytest.approx(shipped.sp.ulysses_comm_s_per_mtok * 1.3 * 1.5)
    assert (written.cfg_parallel.latency_s, written.cfg_parallel.link_gb_s) == pytest.approx(
        (want.cfg_parallel.latency_s, want.cfg_parallel.link_gb_s), rel=1e-5)
    assert data["sources"][-1] == "test; form terms refit: fixed, decode, comm"
    assert calibrated_profile(PROFILE, {"qwen-image": (1.3, 1.0, 1.0)}, "test")["sources"][-1] == "test"


def test_calibrate_from_a_log_of_the_full_refit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "server.log").write_text("INFO start\nINFO " + NEW.format(p=PROFILE))
    out = tmp_path / "cal.yaml"
    assert main(["profile", "calibrate", "--log", str(tmp_path / "server.log"), "--out", str(out)]) == 0
    assert "qwen-image time x1.3, attention x1.02, memory x1, fixed x0.5, encode x1, decode x2, comm x1.5" in (
        capsys.readouterr().err)
    written, shipped = load_profile(out).model("qwen-image"), load_profile(PROFILE).model("qwen-image")
    assert written.decode_s_per_mpx == pytest.approx(shipped.decode_s_per_mpx * 2.6, rel=1e-5)
    assert load_profile(out).sources[-1].endswith("from " + str(tmp_path / "server.log")
                                                  + "; form terms refit: fixed, decode, comm")


@pytest.mark.parametrize("text, message", [
    ("qwen-image=1,1,1,1,1,0", "qwen-image: decode scale '0' must be a number >= 0.0625 and <= 16"),
    ("qwen-image=1,1,1,1,1,1,99", "qwen-image: comm scale '99' must be a number >= 0.0625 and <= 16"),
    ("qwen-image=1,1,1,1,nan", "qwen-image: encode scale 'nan' must be a number"),
    ("qwen-image=1,1,1,1,1,1,1,1", "'qwen-image=1,1,1,1,1,1,1,1': expected "
                                   "MODEL=TIME,ATTENTION[,MEMORY[,FIXED[,ENCODE[,DECODE[,COMM]]]]] (positive numbers)"),
])
def test_a_bad_form_term_is_refused_naming_the_term(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^--scales: ") as err:
        parse_scales(text, "--scales")
    assert message in str(err.value)


def test_a_bad_form_term_in_a_log_names_the_line_and_the_term() -> None:
    log = "INFO start\nINFO " + NEW.format(p=PROFILE).replace("decode x2.000", "decode x99")
    with pytest.raises(ConfigError, match=r"^server.log:2: qwen-image: decode scale '99' must be a number >= 0.0625"):
        scales_from_log(log, "server.log")


METRICS = """# HELP rlsched_calibration_version Online calibration's version of the cost profile (0: as shipped)
# TYPE rlsched_calibration_version gauge
rlsched_calibration_version{model_name="Qwen/Qwen-Image"} 2.0
# TYPE rlsched_calibration_scale gauge
rlsched_calibration_scale{model_name="Qwen/Qwen-Image",term="time"} 1.3
rlsched_calibration_scale{model_name="Qwen/Qwen-Image",term="attention"} 1.02
rlsched_calibration_scale{model_name="Qwen/Qwen-Image",term="memory"} 1.0
rlsched_calibration_scale{model_name="Qwen/Qwen-Image",term="fixed"} 0.5
rlsched_calibration_scale{model_name="Qwen/Qwen-Image",term="encode"} 1.0
rlsched_calibration_scale{model_name="Qwen/Qwen-Image",term="decode"} 2.0
rlsched_calibration_scale{model_name="Qwen/Qwen-Image",term="comm"} 1.5
"""
"""A replica's /metrics as prometheus_client writes it, serving Qwen-Image by its Hugging Face name."""


def test_calibrate_from_a_replicas_metrics(tmp_path: Path) -> None:
    assert scales_from_metrics(METRICS, ["qwen-image"], "m") == (2, {"qwen-image": FULL})
    (tmp_path / "metrics.txt").write_text(METRICS)
    out = tmp_path / "cal.yaml"
    assert main(["profile", "calibrate", "--metrics", str(tmp_path / "metrics.txt"), "--profile", PROFILE,
                 "--out", str(out)]) == 0
    written, shipped = load_profile(out).model("qwen-image"), load_profile(PROFILE).model("qwen-image")
    assert written.decode_s_per_mpx == pytest.approx(shipped.decode_s_per_mpx * 2.6, rel=1e-5)
    assert load_profile(out).sources[-1] == (f"online calibration version 2 of {PROFILE} (rlsched plugin), from "
                                             f"{tmp_path / 'metrics.txt'}; form terms refit: fixed, decode, comm")


def test_metrics_of_no_calibration_or_another_model_are_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    never = METRICS.replace("} 2.0", "} 0.0")
    with pytest.raises(ConfigError, match="^m: ") as err:
        scales_from_metrics(never, ["qwen-image"], "m")
    assert ("no rlsched_calibration_scale of a calibration version above 0 (the profile was never moved, or these "
            "are not an rlsched replica's metrics)") in str(err.value)
    with pytest.raises(ConfigError, match=r"^m: served model 'Qwen/Qwen-Image' is none of the profile's models "
                                          r"\['a', 'b'\]: give its scales by hand \(--scales MODEL=\.\.\.\)"):
        scales_from_metrics(METRICS, ["a", "b"], "m")
    with pytest.raises(ConfigError, match="^m: qwen-image: decode scale '0' must be a number"):
        scales_from_metrics(METRICS.replace('term="decode"} 2.0', 'term="decode"} 0'), ["qwen-image"], "m")
    out = tmp_path / "cal.yaml"
    assert main(["profile", "calibrate", "--metrics", "x.txt", "--out", str(out)]) == 2
    assert "--profile: --metrics needs the profile the replica serves (its metrics do not name it)" in (
        capsys.readouterr().err)
    assert main(["profile", "calibrate", "--metrics", "http://127.0.0.1:1/metrics", "--profile", PROFILE,
                 "--out", str(out)]) == 2
    assert "--metrics http://127.0.0.1:1/metrics: cannot read the metrics endpoint: " in capsys.readouterr().err
    assert not out.exists()
