"""Every numeric flag is range-checked before any work (issue 18: ``train --timesteps -5`` "trained"
and exported an untrained network; zero, negative, huge, NaN and inf went through elsewhere)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rlsched import bounds
from rlsched.cli import build_parser, main


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--run-dir", "R", "--timesteps", "-5"],
     "argument --timesteps: must be an integer >= 1 and <= 1000000000000, not -5"),
    (["train", "--run-dir", "R", "--timesteps", "0"], "argument --timesteps: must be an integer >= 1"),
    (["train", "--run-dir", "R", "--n-envs", "0"], "argument --n-envs: must be an integer >= 1 and <= 1024, not 0"),
    (["train", "--run-dir", "R", "--n-envs", "100000"], "argument --n-envs: must be an integer >= 1 and <= 1024"),
    (["train", "--run-dir", "R", "--seed", "-1"], "argument --seed: must be an integer >= 0"),
    (["learn", "--run-dir", "R", "--timesteps", "-1"], "argument --timesteps: must be an integer >= 0"),
    (["learn", "--run-dir", "R", "--workers", "0"], "argument --workers: must be an integer >= 1 and <= 4096, not 0"),
    (["eval", "--workers", "-2"], "argument --workers: must be an integer >= 1 and <= 4096, not -2"),
    (["eval", "--duration", "-1"], "argument --duration: must be a finite number > 0 and <= 1e+09, not -1"),
    (["eval", "--duration", "inf"], "argument --duration: must be a finite number > 0 and <= 1e+09, not inf"),
    (["eval", "--replicas", "5000"], "argument --replicas: must be an integer >= 1 and <= 1024, not 5000"),
    (["eval", "--sp", "2000000000"], "argument --sp: must be one of 1, 2, 4, 8, not 2000000000"),
    (["simulate", "--replicas", "1000000"], "argument --replicas: must be an integer >= 1 and <= 1024, not 1000000"),
    (["simulate", "--sp", "3"], "argument --sp: must be one of 1, 2, 4, 8, not 3"),
    (["simulate", "--duration", "1e300"], "argument --duration: must be a finite number > 0 and <= 1e+09, not 1e300"),
    (["simulate", "--load", "0"], "argument --load: must be a finite number >= 1e-09 and <= 1e+09, not 0"),
    (["tune", "--trials", "0"], "argument --trials: must be an integer >= 1 and <= 1000000, not 0"),
    (["label", "--out", "l.npz", "--episodes", "0"], "argument --episodes: must be an integer >= 1"),
    (["label", "--out", "l.npz", "--every", "0"], "argument --every: must be an integer >= 1"),
    (["label", "--out", "l.npz", "--future", "-1"], "argument --future: must be a finite number >= 0 and <= 1e+09"),
    (["label", "--out", "l.npz", "--duration", "nan"], "argument --duration: must be a finite number > 0"),
    (["loadgen", "http://h", "--timeout", "inf"], "argument --timeout: must be a finite number > 0 and <= 1e+09"),
    (["loadgen", "http://h", "--timeout", "0"], "argument --timeout: must be a finite number > 0"),
    (["loadgen", "http://h", "--connections", "0"], "argument --connections: must be an integer >= 1 and <= 4096"),
    (["loadgen", "http://h", "--connections", "10000000"], "argument --connections: must be an integer >= 1"),
    (["loadgen", "http://h", "--max-requests", "0"], "argument --max-requests: must be an integer >= 1"),
    (["loadgen", "http://h", "--time-scale", "nan"], "argument --time-scale: must be a finite number >= 1e-09"),
    (["loadgen", "http://h", "--load", "-1"], "argument --load: must be a finite number >= 1e-09"),
    (["loadgen", "http://h", "--max-reply-mb", "0"], "argument --max-reply-mb: must be a finite number > 0"),
    (["bench", "sim", "--repeats", "0"], "argument --repeats: must be an integer >= 1"),
    (["bench", "plugin", "--calls", "-1"], "argument --calls: must be an integer >= 1 and <= 1000000000, not -1"),
    (["deploy", "--policy", "edf", "--max-num-seqs", "0"], "argument --max-num-seqs: must be an integer >= 1"),
    (["deploy", "--policy", "edf", "--max-wait-ms", "inf"],
     "argument --max-wait-ms/--request-batch-max-wait-ms: must be a finite number >= 0"),
    (["deploy", "--policy", "edf", "--time-scale", "1e300"],
     "argument --time-scale: must be a finite number >= 0.001 and <= 1000, not 1e300"),
    (["deploy", "--policy", "edf", "--sp", "3"], "argument --sp: must be one of 1, 2, 4, 8, not 3"),
    (["deploy", "--policy", "edf", "--cfg-parallel", "3"], "argument --cfg-parallel: must be one of 1, 2, not 3"),
    (["deploy", "--policy", "edf", "--metrics-port", "70000"],
     "argument --metrics-port: must be an integer >= 0 and <= 65535, not 70000"),
    (["deploy", "--policy", "edf", "--stage-id", "-1"], "argument --stage-id: must be an integer >= 0"),
    (["deploy", "--policy", "edf", "--decision-budget-ms", "0"], "argument --decision-budget-ms: must be a finite"),
    (["deploy", "--policy", "edf", "--default-slo-scale", "1e300"], "argument --default-slo-scale: must be a finite"),
    (["plan", "--gpus", "1000000"], "argument --gpus: must be an integer >= 1 and <= 1024, not 1000000"),
    (["profile", "measure", "--out", "m.csv", "--repeats", "0"], "argument --repeats: must be an integer >= 1"),
    (["profile", "measure", "--out", "m.csv", "--seed", "-1"], "argument --seed: must be an integer >= 0"),
    (["profile", "predict", "qwen-image-h200", "--height", "2000000", "--width", "512", "--steps", "20"],
     "argument --height: must be an integer >= 1 and <= 1000000, not 2000000"),
    (["profile", "predict", "qwen-image-h200", "--height", "512", "--width", "512", "--steps", "20", "--batch", "0"],
     "argument --batch: must be an integer >= 1 and <= 65536, not 0"),
])
def test_out_of_range_flags_are_argument_errors(argv: list[str], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["label", "--out", "OUT/l.npz", "--load-range", "0.5"], "--load-range: expected LOW,HIGH"),
    (["label", "--out", "OUT/l.npz", "--load-range", "1.5,0.5"], "--load-range: expected LOW,HIGH"),
    (["label", "--out", "OUT/l", "--episodes", "1"], "the labels file must end in .npz"),
    (["label", "--out", "OUT/l.npz", "--scenarios", "default", "--static", "OUT/none-{scenario}.json"],
     "--static: scenario 'default'"),
    (["profile", "measure", "--out", "OUT/m.csv", "--batch-sizes", "0,2"], "--batch-sizes: each batch size"),
    (["loadgen", "ftp://h"], "url: expected an http:// or https:// URL"),
    (["loadgen", "http://h:99999"], "url: 'http://h:99999': Port out of range"),
    (["profile", "predict", "qwen-image-h200", "--height", "512", "--width", "512", "--steps", "20", "--frames", "100"],
     "--frames: invalid request field 'num_frames'=100: model 'qwen-image' generates images: one frame"),
])
def test_values_checked_in_the_handler_are_config_errors(argv: list[str], message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``label --load-range 0.5`` was an unpacking traceback after the scorer loaded; a
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


def _actions(parser: argparse.ArgumentParser, path: str = "rlsched") -> list[tuple[str, argparse.Action]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _actions(sub, f"{path} {name}")
        else:
            out.append((path, action))
    return out


def test_every_numeric_flag_has_a_bounded_type_from_the_table() -> None:
    """Walk every subcommand's parser: a flag whose default is a number, or whose type makes one, must have a
    type built from ``rlsched.bounds`` (issue 34: ``--sp 2000000000`` and ``--replicas 10**6`` were accepted;
    ``plan --gpus``, ``deploy --time-scale`` and ``--metrics-port`` were plain ``int``/``float``)."""
    table = {id(b) for b in vars(bounds).values() if isinstance(b, bounds.Bound)}
    numeric = []
    for path, action in _actions(build_parser()):
        if action.nargs == 0 or isinstance(action, argparse._HelpAction):
            continue  # store_true / help
        looks_numeric = action.type in (int, float) or getattr(action.type, "bound", None) is not None \
            or (isinstance(action.default, (int, float)) and not isinstance(action.default, bool))
        if not looks_numeric:
            continue
        flag = action.option_strings[-1] if action.option_strings else action.dest
        numeric.append(f"{path} {flag}")
        bound = getattr(action.type, "bound", None)
        assert id(bound) in table, f"{path} {flag}: type {action.type!r} is not built from rlsched.bounds"
        assert action.default in (None, argparse.SUPPRESS) or bound.holds(action.default), \
            f"{path} {flag}: default {action.default!r}"  # SUPPRESS: a renamed flag's old spelling
    assert {"rlsched simulate --replicas", "rlsched simulate --sp", "rlsched eval --sp", "rlsched deploy --time-scale",
            "rlsched plan --gpus", "rlsched profile predict --frames", "rlsched loadgen --connections"} <= set(numeric)


def test_flag_and_schema_read_one_bound() -> None:
    """The flag and the scenario field that mean the same thing refuse the same values."""
    from rlsched.sim import schema

    assert schema.MAX_REPLICAS == bounds.REPLICAS.high == 1024
    assert bounds.SP_DEGREE.values == (1, 2, 4, 8)
    assert schema.ReplicaGroupSpec.model_fields["sp_degree"].annotation.__args__ == bounds.SP_DEGREE.values


@pytest.mark.parametrize(("changes", "message"), [
    ({"replicas": 100_000}, "--replicas: must be an integer >= 1 and <= 1024, not 100000"),
    ({"replicas": 2, "sp_degree": 3}, "--sp: must be one of 1, 2, 4, 8, not 3"),
    ({"replicas": True}, "--replicas: must be an integer >= 1 and <= 1024, not True"),
])
def test_a_library_run_has_the_flags_bounds(changes: dict, message: str) -> None:
    """``RunSpec`` built in code (not by argparse) meets the same bounds before anything is drawn."""
    from rlsched.errors import ConfigError
    from rlsched.evaluation import RunSpec, simulate
    from rlsched.sim import load_scenario

    with pytest.raises(ConfigError, match=message):
        simulate(RunSpec("default", "fifo", 0, duration_s=60.0, **changes), load_scenario("default"))


def test_every_numeric_flag_takes_exactly_its_bounds_values() -> None:
    """Property over every numeric flag: a value at or past its bound's edges (and NaN, inf, a huge integer, a
    fraction for an integer flag) parses iff the bound holds it; else argparse's ArgumentTypeError."""
    for path, action in _actions(build_parser()):
        bound = getattr(action.type, "bound", None)
        if bound is None:
            continue
        edges = list(bound.values) if bound.values else [bound.low, bound.high]
        texts = [repr(e + d) for e in edges for d in (-1, -1e-9, 0, 1e-9, 1) if abs(e) != float("inf")]
        texts += [str(int(e) + d) for e in edges for d in (-1, 0, 1) if abs(e) != float("inf")]
        texts += ["nan", "inf", "-inf", str(10**400), "2.5", "true", ""]
        for text in texts:
            try:
                value = action.type(text)
            except argparse.ArgumentTypeError as exc:
                assert str(exc).startswith(f"must be {bound.describe()}, not "), (path, text, str(exc))
                continue
            values = value if isinstance(value, list) else [value]  # flag_list: one value per comma
            assert values and all(bound.holds(v) for v in values), (path, action.option_strings, text, value)


def test_a_list_flag_reads_each_value_as_its_bound_does() -> None:
    """``plan --gpus 1,2,4`` (with ``--rate``): each count checked by the flag's bound, argparse's own error."""
    from rlsched.argtypes import flag_list

    parse = flag_list(bounds.STAGE_GPUS)
    assert parse("1,2,4") == [1, 2, 4] and parse.bound is bounds.STAGE_GPUS
    with pytest.raises(argparse.ArgumentTypeError, match="must be an integer >= 1 and <= 1024, not 2000"):
        parse("1,2000")
