"""Every numeric flag is range-checked before any work (issue 18: ``train --timesteps -5`` "trained"
and exported an untrained network; zero, negative, huge, NaN and inf went through elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.cli import main


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--run-dir", "R", "--timesteps", "-5"], "argument --timesteps: must be an integer >= 1, not -5"),
    (["train", "--run-dir", "R", "--timesteps", "0"], "argument --timesteps: must be an integer >= 1, not 0"),
    (["train", "--run-dir", "R", "--n-envs", "0"], "argument --n-envs: must be an integer in [1, 1024], not 0"),
    (["train", "--run-dir", "R", "--n-envs", "100000"], "argument --n-envs: must be an integer in [1, 1024]"),
    (["learn", "--run-dir", "R", "--timesteps", "-1"], "argument --timesteps: must be an integer >= 0, not -1"),
    (["learn", "--run-dir", "R", "--workers", "0"], "argument --workers: must be an integer >= 1, not 0"),
    (["eval", "--workers", "-2"], "argument --workers: must be an integer >= 1, not -2"),
    (["eval", "--duration", "-1"], "argument --duration: must be a finite number > 0, not -1"),
    (["eval", "--duration", "inf"], "argument --duration: must be a finite number > 0, not inf"),
    (["label", "--out", "l.npz", "--episodes", "0"], "argument --episodes: must be an integer >= 1, not 0"),
    (["label", "--out", "l.npz", "--every", "0"], "argument --every: must be an integer >= 1, not 0"),
    (["label", "--out", "l.npz", "--future", "-1"], "argument --future: must be a finite number >= 0, not -1"),
    (["label", "--out", "l.npz", "--duration", "nan"], "argument --duration: must be a finite number > 0, not nan"),
    (["loadgen", "http://h", "--timeout", "inf"], "argument --timeout: must be a finite number > 0, not inf"),
    (["loadgen", "http://h", "--timeout", "0"], "argument --timeout: must be a finite number > 0, not 0"),
    (["loadgen", "http://h", "--workers", "0"], "argument --workers: must be an integer in [1, 4096], not 0"),
    (["loadgen", "http://h", "--workers", "10000000"], "argument --workers: must be an integer in [1, 4096]"),
    (["loadgen", "http://h", "--max-requests", "0"], "argument --max-requests: must be an integer >= 1, not 0"),
    (["loadgen", "http://h", "--time-scale", "nan"], "argument --time-scale: must be a finite number > 0, not nan"),
    (["loadgen", "http://h", "--rate-scale", "-1"], "argument --rate-scale: must be a finite number > 0, not -1"),
    (["loadgen", "http://h", "--max-reply-mb", "0"], "argument --max-reply-mb: must be a finite number > 0"),
    (["bench", "sim", "--repeats", "0"], "argument --repeats: must be an integer >= 1, not 0"),
    (["bench", "plugin", "--calls", "-1"], "argument --calls: must be an integer >= 1, not -1"),
    (["deploy", "--policy", "edf", "--max-num-seqs", "0"], "argument --max-num-seqs: must be an integer >= 1, not 0"),
    (["deploy", "--policy", "edf", "--max-wait-ms", "inf"], "argument --max-wait-ms: must be a finite number >= 0"),
    (["profile", "measure", "--out", "m.csv", "--repeats", "0"], "argument --repeats: must be an integer >= 1"),
    (["profile", "measure", "--out", "m.csv", "--seed", "-1"], "argument --seed: must be an integer >= 0"),
])
def test_out_of_range_flags_are_argument_errors(argv: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["label", "--out", "OUT/l.npz", "--rate-scales", "0.5"], "--rate-scales: expected LOW,HIGH"),
    (["label", "--out", "OUT/l.npz", "--rate-scales", "1.5,0.5"], "--rate-scales: expected LOW,HIGH"),
    (["label", "--out", "OUT/l", "--episodes", "1"], "the labels file must end in .npz"),
    (["label", "--out", "OUT/l.npz", "--scenarios", "default", "--static", "OUT/none-{scenario}.json"],
     "--static: scenario 'default'"),
    (["profile", "measure", "--out", "OUT/m.csv", "--batch-sizes", "0,2"], "--batch-sizes: each batch size"),
    (["loadgen", "ftp://h"], "url: expected an http:// or https:// URL"),
    (["loadgen", "http://h:99999"], "url: 'http://h:99999': Port out of range"),
])
def test_values_checked_in_the_handler_are_config_errors(argv: list[str], message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``label --rate-scales 0.5`` was an unpacking traceback after the scorer loaded; a
    scenario without its tuned file failed at its own episode, after the others."""
    assert main([a.replace("OUT", str(tmp_path)) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_train_refuses_a_preset_with_no_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A preset's own ``timesteps: -5`` (no flag) is refused before any environment is built."""
    preset = tmp_path / "p.yaml"
    preset.write_text("timesteps: -5\n")
    assert main(["train", "--agent", str(preset), "--run-dir", str(tmp_path / "run")]) == 2
    assert "agent.timesteps (--timesteps): must be an integer >= 1, not -5" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
