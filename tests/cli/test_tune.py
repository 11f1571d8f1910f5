"""``rlsched tune`` on Optuna: anchors first, seeded, resumable, the same wherever trials run."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

optuna = pytest.importorskip("optuna")

from rlsched.agents.tune import (  # noqa: E402
    PARAMS,
    TuneSpec,
    deadline_vector,
    default_vector,
    objective,
    open_study,
    search,
)
from rlsched.errors import ConfigError, MissingExtra  # noqa: E402
from rlsched.sim import load_scenario  # noqa: E402

SPEC = TuneSpec("default", seeds=(0,), rate_scales=(1.0, 1.5), duration_s=300.0, trials=5, explore=0.6)


def _storage(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'study.db'}"


def test_anchors_are_the_first_trials_and_scores_match_the_in_process_objective() -> None:
    init = tuple(np.linspace(-0.5, 0.5, 9))
    spec = TuneSpec(**{**SPEC.__dict__, "init": init})
    study = open_study(spec)
    space = {name: optuna.distributions.FloatDistribution(-1.0, 1.0) for name in PARAMS}
    first = [study.ask(space) for _ in range(3)]
    assert [t.number for t in first] == [0, 1, 2]
    got = [np.array([t.params[name] for name in PARAMS]) for t in first]
    assert all(np.array_equal(a, b) for a, b in zip(got, [default_vector(), deadline_vector(), np.array(init)]))
    result = search(SPEC)
    assert result.default_score == objective(SPEC, load_scenario("default"), default_vector())
    assert result.score == max(result.scores) >= result.default_score


def test_same_search_seed_same_study_and_other_seed_other_proposals() -> None:
    a, b = search(SPEC), search(SPEC)
    assert a.scores == b.scores and np.array_equal(a.vector, b.vector)
    other = search(TuneSpec(**{**SPEC.__dict__, "search_seed": 1}))
    assert other.scores[:2] == a.scores[:2] and other.scores[2:] != a.scores[2:]  # anchors, then the sampler


def test_local_workers_do_not_change_the_result() -> None:
    spec = TuneSpec(**{**SPEC.__dict__, "trials": 4, "batch": 2})
    assert search(spec).scores == search(spec, workers=2).scores


def test_a_stopped_tune_resumes_its_study(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    first = search(TuneSpec(**{**SPEC.__dict__, "trials": 3}), storage=storage)
    study = open_study(SPEC, storage)
    study.ask()  # a trial left running by a killed process
    reported: list[int] = []
    resumed = search(SPEC, lambda done, score, best: reported.append(done), storage=storage)
    assert resumed.scores[:3] == first.scores and len(resumed.scores) == 5
    assert reported == [4, 5]  # only the missing trials ran
    states = [t.state.name for t in open_study(SPEC, storage).trials]
    assert states.count("FAIL") == 1 and states.count("COMPLETE") == 5


def test_anchors_are_queued_once_across_reopenings(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    open_study(SPEC, storage)  # a tune killed before its first trial
    study = open_study(SPEC, storage)
    assert [t.state.name for t in study.trials] == ["WAITING", "WAITING"]


def test_resuming_under_another_objective_is_refused(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    search(TuneSpec(**{**SPEC.__dict__, "trials": 2}), storage=storage)
    with pytest.raises(ConfigError, match="--study-name"):
        search(TuneSpec(**{**SPEC.__dict__, "seeds": (1,)}), storage=storage)
    search(TuneSpec(**{**SPEC.__dict__, "seeds": (1,), "trials": 2}), storage=storage, study_name="other")


def test_missing_optuna_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(MissingExtra, match=r"rlsched\[tune\]"):
        search(SPEC)


def test_spec_fields_are_checked() -> None:
    with pytest.raises(ConfigError, match="tune.batch"):
        TuneSpec("default", batch=0)
    with pytest.raises(ConfigError, match="tune.init"):
        TuneSpec("default", init=(0.0, 1.0))


def test_cli_keeps_the_study_beside_out_and_a_rerun_resumes_it(tmp_path: Path) -> None:
    import json
    import subprocess

    def tune(trials: int) -> dict:
        cmd = [sys.executable, "-m", "rlsched", "tune", "--scenario", "default", "--seeds", "0", "--duration", "300",
               "--trials", str(trials), "--out", "tuned/default.json", "--json"]
        res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads(res.stdout)

    first = tune(3)
    assert (tmp_path / "tuned" / "default.optuna.db").exists() and first["trials"] == 3
    again = tune(4)
    assert again["trials"] == 4 and again["default_score"] == first["default_score"]
    assert again["score"] >= first["score"]
    study = optuna.load_study(study_name="tune-default", storage=f"sqlite:///{tmp_path / 'tuned/default.optuna.db'}")
    assert len(study.trials) == 4  # one more trial, not a second study of four


# ------------------------------------------------------------------ issue 18: work lost, storage errors


def _tune_cli(*args: str) -> list[str]:
    return ["tune", "--scenario", "default", "--seeds", "0", "--duration", "120", "--trials", "1", "--json", *args]


def test_default_out_is_never_the_shipped_tuned_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``tune --scenario default --trials 2`` without --out replaced the shipped 40-trial
    ``agents/tuned/default.json``."""
    from rlsched.cli import main

    monkeypatch.chdir(tmp_path)
    shipped = tmp_path / "agents" / "tuned" / "default.json"
    shipped.parent.mkdir(parents=True)
    shipped.write_text('{"shipped": true}')
    assert main(_tune_cli()) == 0
    assert shipped.read_text() == '{"shipped": true}'
    written = tmp_path / "runs" / "tuned" / "default.json"
    assert len(__import__("json").loads(written.read_text())["action"]) == 9
    assert (tmp_path / "runs" / "tuned" / "default.optuna.db").exists()
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    assert "runs/tuned/SCENARIO.json" in capsys.readouterr().out


def test_out_that_is_a_folder_is_refused_before_the_first_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``tune --out EXISTING_DIR`` ran every trial, then failed writing the result."""
    import rlsched.agents.tune as tune
    from rlsched.cli import main

    def trial(*args: object, **kwargs: object) -> list[float]:
        raise AssertionError("a trial ran before the --out check")

    monkeypatch.setattr(tune, "score_vectors", trial)
    assert main(_tune_cli("--out", str(tmp_path))) == 2
    assert f"--out: {tmp_path} is a folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(_tune_cli("--out", str(tmp_path / "file" / "t.json"))) == 2
    assert f"--out: {tmp_path / 'file'} is a file" in capsys.readouterr().err


@pytest.mark.parametrize(("storage", "message"), [
    ("bogus://x", "--storage: cannot use 'bogus://x': NoSuchModuleError"),
    ("sqlite:////nonexistent-folder/x.db", "folder /nonexistent-folder does not exist"),
    ("postgresql://u@127.0.0.1:1/x", "--storage: cannot open 'postgresql://u@127.0.0.1:1/x': ImportError"),
])
def test_a_storage_that_does_not_open_is_a_config_error(storage: str, message: str) -> None:
    """Bug: SQLAlchemy tracebacks (NoSuchModuleError, OperationalError) instead of an error naming --storage."""
    with pytest.raises(ConfigError) as exc:
        search(SPEC, storage=storage)
    assert message in f"{exc.value.where}: {exc.value}"


def test_two_tunes_of_one_study_at_once_are_refused(tmp_path: Path) -> None:
    """Bug: a second tune on the same study ran alongside the first (more trials than asked, each
    failing the other's running trials, or "database is locked" tracebacks)."""
    from rlsched.agents.tune import study_lock

    storage = _storage(tmp_path)
    with study_lock(storage), pytest.raises(ConfigError, match="--storage: .* is in use by another `rlsched tune`"):
        search(SPEC, storage=storage)
    assert len(search(TuneSpec(**{**SPEC.__dict__, "trials": 2}), storage=storage).scores) == 2  # lock released


@pytest.mark.parametrize(("args", "flag"), [
    (("--search-seed", "-1"), "argument --search-seed: must be an integer >= 0"),
    (("--batch", "0"), "argument --batch: must be an integer >= 1"),
    (("--trials", "-3"), "argument --trials: must be an integer >= 1"),
    (("--duration", "nan"), "argument --duration: must be a finite number > 0"),
])
def test_numeric_flags_are_range_checked(args: tuple[str, str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``--search-seed -1`` was a numpy traceback after the study opened; ``--duration nan`` ran."""
    from rlsched.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["tune", *args])
    assert exc.value.code == 2 and flag in capsys.readouterr().err


def test_seeds_and_loads_are_checked_with_their_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``--seeds abc`` / ``--loads x`` were ValueError tracebacks."""
    from rlsched.cli import main

    assert main(_tune_cli("--seeds", "abc")) == 2
    assert "--seeds: expected comma-separated integers" in capsys.readouterr().err
    assert main(_tune_cli("--loads", "1,x")) == 2
    assert "--loads" in capsys.readouterr().err


# ------------------------------------------------------------------ issue 22: reproducible, with provenance


def test_a_tune_rerun_writes_the_same_file_and_records_its_commit_and_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from rlsched.cli import main

    monkeypatch.chdir(tmp_path)
    files = []
    for name in ("a", "b"):
        argv = _tune_cli("--trials", "3", "--out", f"{name}/default.json")
        monkeypatch.setattr(sys, "argv", ["/venv/bin/rlsched", *argv])  # what the console script sees
        assert main(argv) == 0
        files.append(json.loads((tmp_path / name / "default.json").read_text()))
    capsys.readouterr()
    a, b = files
    assert a["provenance"]["command"] == ("rlsched tune --scenario default --seeds 0 --duration 120 --trials 1 "
                                          "--json --trials 3 --out a/default.json")
    assert a["provenance"]["commit"] == "unknown" or len(a["provenance"]["commit"]) == 40
    assert a["trials"] == 3 and a["study"] != b["study"]  # each beside its own --out
    volatile = ("provenance", "study")
    assert {k: v for k, v in a.items() if k not in volatile} == {k: v for k, v in b.items() if k not in volatile}


TRACE = ("arrival_s,height,width,num_frames,num_inference_steps,cfg,priority\n"
         "0.0,1024,1024,1,20,true,realtime\n1.0,1024,1024,1,20,true,realtime\n1.5,1024,1024,1,20,true,batch\n"
         "2.0,512,512,1,20,true,background\n2.2,1024,1024,1,20,true,realtime\n")


def test_tune_on_a_trace_scores_the_traces_requests_and_a_rewritten_trace_is_another_study(tmp_path: Path) -> None:
    """``tune --trace`` (issue 48): the objective replays the user's own trace, as ``simulate --trace`` does."""
    from rlsched.agents.tune import policy_for
    from rlsched.evaluation.runs import RunSpec, prepare
    from rlsched.sim.metrics import summarize

    trace = tmp_path / "mine.csv"
    trace.write_text(TRACE)
    spec = TuneSpec("default", seeds=(0,), trials=3, trace=str(trace))
    sc = load_scenario("default")
    vec = deadline_vector()
    sim = prepare(RunSpec("default", "static", 0, 1.0, trace=str(trace)), sc)
    replayed = summarize(sim.run(policy_for(vec)))
    assert replayed["requests_total"] == 5
    assert objective(spec, sc, vec) == replayed["weighted_slo_attainment"] != objective(
        TuneSpec("default", seeds=(0,), trials=3), sc, vec)
    storage = _storage(tmp_path)
    search(spec, storage=storage)
    trace.write_text(TRACE.replace("2.2,", "2.1,"))
    with pytest.raises(ConfigError, match="--study-name: study .* was tuned for .*trace_sha256"):
        search(spec, storage=storage)


def test_tune_cli_refuses_a_missing_trace(tmp_path: Path, capsys) -> None:
    from rlsched.cli import main

    assert main(["tune", "--trace", str(tmp_path / "none.csv"), "--out", str(tmp_path / "t.json")]) == 2
    assert f"--trace: {tmp_path / 'none.csv'}: no such file" in capsys.readouterr().err
