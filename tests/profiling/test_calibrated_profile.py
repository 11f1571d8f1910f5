"""``rlsched profile calibrate``: a profile with the plugin's online calibration applied, as a profile file."""

from __future__ import annotations

import pytest

from rlsched.cli import main
from rlsched.errors import ConfigError
from rlsched.profiling.calibrated import calibrated_profile, parse_scales, scales_from_log
from rlsched.sim.cost import load_profile, profile_from_dict
from rlsched.sim.truth import rescaled
from tests.conftest import make_request

PROFILE = "qwen-image-h200-vllm-omni"
LOG = """INFO [scheduler.py:357] rlsched: cost profile qwen-image-h200-vllm-omni calibrated, version 3: qwen-image time x1.280, attention x1.020, memory x1.000
INFO something else
INFO [scheduler.py:357] rlsched: cost profile qwen-image-h200-vllm-omni calibrated, version 4: qwen-image time x1.301, attention x1.500, memory x1.000
"""  # noqa: E501  (the plugin's lines as vLLM's logger prints them)


def test_the_written_profile_predicts_what_the_calibration_did(tmp_path) -> None:
    profile, version, scales = scales_from_log(LOG, "server.log")
    assert (profile, version, scales) == (PROFILE, 4, {"qwen-image": (1.301, 1.5, 1.0)})
    out = tmp_path / "cal.yaml"
    assert main(["profile", "calibrate", "--log", str(LOG_FILE(tmp_path)), "--out", str(out)]) == 0
    written = load_profile(out)
    assert written.name == f"{PROFILE}-calibrated" and "version 4" in written.sources[-1]
    want = rescaled(load_profile(PROFILE), scales, "check")
    for size in (512, 1024, 2048):
        req = make_request(0, size=size)
        assert written.record(req).work_s == pytest.approx(want.record(req).work_s, rel=1e-5)
        assert written.record(req).mem_gb == pytest.approx(want.record(req).mem_gb, rel=1e-5)
    unit = calibrated_profile(PROFILE, {"qwen-image": (1.0, 1.0, 1.0)}, "x")
    assert profile_from_dict(unit, "y").name.endswith("-calibrated")


def LOG_FILE(tmp_path):  # noqa: N802
    path = tmp_path / "server.log"
    path.write_text(LOG)
    return path


def test_scales_by_hand_and_every_refusal_names_its_input(tmp_path, capsys) -> None:
    out = tmp_path / "cal.yaml"
    by_hand = ["profile", "calibrate", "--profile", PROFILE, "--scales", "qwen-image=1.3,1.0", "--out", str(out)]
    assert main(by_hand) == 0
    shipped = load_profile(PROFILE).model("qwen-image")
    assert load_profile(out).model("qwen-image").a_s == pytest.approx(1.3 * shipped.a_s)
    assert parse_scales("a=1,2; b=3,4,5", "X") == {"a": (1.0, 2.0, 1.0), "b": (3.0, 4.0, 5.0)}
    expected = (r"X: 'a=1': expected MODEL=TIME,ATTENTION\[,MEMORY\[,FIXED\[,ENCODE\[,DECODE\[,COMM\]\]\]\]\] "
                r"\(positive numbers\)")
    with pytest.raises(ConfigError, match=expected):
        parse_scales("a=1", "X")
    with pytest.raises(ConfigError, match=r"X: no MODEL=TIME,ATTENTION\[,MEMORY\] entry"):
        parse_scales(" ; ", "X")
    with pytest.raises(ConfigError, match=r"server.log: no 'rlsched: cost profile \.\.\. calibrated") as never:
        scales_from_log("nothing here", "server.log")
    assert ("no 'rlsched: cost profile ... calibrated, version N: ...' line (the plugin logs one per calibration "
            "version; none means the profile was never moved") in str(never.value)
    with pytest.raises(ConfigError, match=r"models: no model 'wan' to calibrate \(it holds \['qwen-image'\]\)"):
        calibrated_profile(PROFILE, {"wan": (1.0, 1.0, 1.0)}, "x")
    capsys.readouterr()
    assert main(["profile", "calibrate", "--out", str(out)]) != 0
    assert ("--log/--metrics/--scales: give one: the server log the plugin wrote, a replica's metrics, or the scales"
            in capsys.readouterr().err)
    assert main(["profile", "calibrate", "--scales", "qwen-image=1,1", "--out", str(out)]) != 0
    assert "--profile: --scales needs the profile they apply to" in capsys.readouterr().err


def test_a_log_of_a_derived_profile_says_how_to_write_the_profile_it_names(tmp_path, capsys) -> None:
    """Under ``profile: auto`` the server logs the derived profile's name, which names no file: ``calibrate --log``
    failed with "envs/profiles/e2e-model-h100-derived.yaml: cannot read"; it now says how to write the profile."""
    from rlsched.cli import main

    log = tmp_path / "server.log"
    log.write_text(LOG.replace("qwen-image-h200-vllm-omni", "e2e-model-h100-derived"))
    assert main(["profile", "calibrate", "--log", str(log), "--out", str(tmp_path / "c.yaml")]) == 2
    assert ("--profile: the log's profile 'e2e-model-h100-derived' is no shipped profile or file (a server under "
            "profile: auto derives it at start-up): write it with `rlsched profile derive --model DIR --gpu G --out "
            "derived.yaml` and give --profile derived.yaml") in capsys.readouterr().err
