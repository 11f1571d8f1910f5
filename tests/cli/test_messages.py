"""Messages that name what the user gave (issue 34, "Messages that mislead"); each is in docs/errors.md."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlsched.cli import main

INPUTS = {  # argv with {path}, what the message calls the file
    "trace": (["simulate", "--duration", "60", "--trace", "{path}"], "trace file"),
    "scenario": (["simulate", "--scenario", "{path}"], "scenario"),
    "tuned": (["simulate", "--duration", "60", "--policy", "static:{path}"], "tuned action file"),
    "profile": (["profile", "predict", "{path}", "--height", "512", "--width", "512", "--steps", "4"], "profile file"),
    "seed preset": (["simulate", "--duration", "60", "--policy", "seed-composite:{path}"], "seed-heuristics preset"),
    "measurements": (["profile", "fit", "{dir}"], "measurement set file"),
}


@pytest.mark.parametrize("kind", ["fifo", "folder"])
@pytest.mark.parametrize("name", list(INPUTS))
def test_an_input_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path: Path, name: str, kind: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: a trace, scenario or tuned file that exists but is a named pipe was reported "not found"."""
    path = tmp_path / ("measurements.csv" if name == "measurements" else "input.yaml")
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    argv, what = INPUTS[name]
    assert main([a.replace("{path}", str(path)).replace("{dir}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    shown = "a named pipe (FIFO)" if kind == "fifo" else "a folder"
    assert f"{what} is {shown}, not a regular file" in err and "not found" not in err, err
    assert err.startswith(f"rlsched: error: {path}: ") or f"{what} {path} is" in err


def test_a_link_to_nothing_and_a_missing_file_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "t.csv"
    link.symlink_to(tmp_path / "gone.csv")
    assert main(["simulate", "--trace", str(link)]) == 2
    assert f"{link}: trace file is a symbolic link to {tmp_path / 'gone.csv'}, which does not exist" in \
        capsys.readouterr().err
    assert main(["simulate", "--trace", str(tmp_path / "none.csv")]) == 2
    assert f"{tmp_path / 'none.csv'}: trace file not found" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["edf@hindsight:-5", "edf@lookahead:-5", "edf@hindsight:5;top=1"])
def test_a_teacher_router_error_names_the_router_given(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``edf@hindsight:-5`` was reported as ``router lookahead``."""
    assert main(["simulate", "--policy", spec, "--replicas", "2", "--duration", "60"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlsched: error: router {spec.split('@')[1]}: ")
    assert ("hindsight" in spec) == ("lookahead" not in err)


def test_plan_names_the_loads_and_gpus_it_was_given_not_a_rate_scale(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: a load too heavy to simulate was reported as a rate scale the user never gave."""
    assert main(["plan", "--loads", "1e8", "--seeds", "0", "--routers", "", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlsched: error: --loads: load 1e+08 on --gpus 1 runs scenario 'default' at 1e+08 x its "
                          "own rate") and "lower --loads or --gpus" in err
    with pytest.raises(SystemExit):
        main(["plan", "--gpus", "1000000", "--out", str(tmp_path / "p")])
    assert "argument --gpus: must be an integer >= 1 and <= 1024, not 1000000" in capsys.readouterr().err


SP = "--sp: 2 GPUs per replica on scenario 'omni-mix': its profile 'omni-h200' cannot split a request over GPUs"


@pytest.mark.parametrize("argv", [
    ["simulate", "--scenario", "omni-mix", "--replicas", "2", "--sp", "2", "--duration", "60"],
    ["eval", "--scenarios", "default,omni-mix", "--policies", "fifo", "--seeds", "1000", "--duration", "60",
     "--replicas", "2", "--sp", "2", "--json"],
])
def test_sp_on_a_profile_without_an_sp_block_names_the_flag_and_the_profile(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``--replicas 2 --sp 2`` named a model and its profile's missing block, not the flag or the profile;
    eval ran every other scenario first."""
    assert main([*argv, "--out", str(tmp_path / "o")] if argv[0] == "eval" else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlsched: error: {SP}") and "no 'sp' block" in err
    assert not (tmp_path / "o").exists()


def test_deploy_checks_the_layout_against_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: deploy wrote a stage of SP2 replicas for a profile that cannot model them."""
    out = tmp_path / "d.yaml"
    assert main(["deploy", "--policy", "fifo", "--replicas", "2", "--sp", "2", "--devices", "0,1,2,3",
                 "--profile", "omni-h200", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("rlsched: error: --sp: 2 (--replicas 2 x --sp 2): profile "
                                              "'omni-h200' cannot model this layout") and not out.exists()


def test_a_scenario_name_that_is_a_file_here_says_how_it_was_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``--scenario p`` with a file ``p`` here was "not found" with no word of why."""
    monkeypatch.chdir(tmp_path)
    Path("p").write_text("name: p\n")
    assert main(["simulate", "--scenario", "p"]) == 2
    assert "p here is read as a scenario name: give a scenario file with its .yaml)" in capsys.readouterr().err
