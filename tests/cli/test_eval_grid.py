"""``rlsched eval`` checks before it runs, keeps what finished, and starts no more processes than
CPUs (issue 18: "Work lost", "Silent wrong results")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rlsched.cli import main
from rlsched.evaluation import runs as evaluation
from rlsched.resources import data_dir

FAST = ["--seeds", "1000", "--loads", "1.0", "--duration", "60", "--json"]


def _scenarios(tmp_path: Path) -> tuple[Path, Path]:
    """Two scenario files (``default`` and a copy named ``other``) and a tuned folder holding only
    ``default.json``."""
    envs = data_dir("envs")
    a, b = tmp_path / "default.yaml", tmp_path / "other.yaml"
    shutil.copy(envs / "default.yaml", a)
    b.write_text((envs / "default.yaml").read_text().replace("name: default", "name: other", 1))
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    shutil.copy(data_dir("agents") / "tuned" / "default.json", tuned / "default.json")
    return a, b


def _no_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def ran(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a simulation ran before the check")
    monkeypatch.setattr(evaluation, "simulate", ran)


def test_a_scenario_without_its_tuned_file_fails_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: every other scenario ran first (minutes to hours), then exit 2 with nothing written."""
    a, b = _scenarios(tmp_path)
    _no_runs(monkeypatch)
    spec = f"static:{tmp_path}/tuned/{{scenario}}.json"
    out = tmp_path / "res"
    code = main(["eval", "--scenarios", f"{a},{b}", "--policies", f"fifo,{spec}", "--out", str(out), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "--policies" in err and "other.json" in err and "scenario 'other'" in err
    assert "nothing was run" in err and not out.exists()


def test_a_failure_late_in_the_grid_keeps_the_finished_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: a run failing in the last scenario lost every finished run (no file written)."""
    a, b = _scenarios(tmp_path)
    real = evaluation._one

    def one(task: tuple) -> Any:
        if Path(task[0]).stem == "other":
            raise evaluation.ConfigError("other.yaml", "broke mid-grid")
        return real(task)

    monkeypatch.setattr(evaluation, "_one", one)
    out = tmp_path / "res"
    code = main(["eval", "--scenarios", f"{a},{b}", "--policies", "fifo,edf", "--out", str(out), *FAST])
    assert code == 2
    partial = json.loads((out / "partial.json").read_text())
    assert (partial["finished"], partial["total"]) == (2, 4)
    assert [(Path(r["scenario"]).stem, r["policy"]) for r in partial["rows"]] == [("default", "fifo"),
                                                                                  ("default", "edf")]
    assert "broke mid-grid" in partial["stopped_by"] and "partial.json" in capsys.readouterr().err


def test_out_that_is_a_file_is_refused_before_any_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``eval --out EXISTING_FILE`` ran the whole grid, then failed on the path."""
    _no_runs(monkeypatch)
    out = tmp_path / "results.md"
    out.write_text("keep me")
    code = main(["eval", "--scenarios", "default", "--policies", "fifo", "--out", str(out), *FAST])
    assert code == 2 and f"--out: {out} is a file" in capsys.readouterr().err
    assert out.read_text() == "keep me"


def test_a_successful_grid_writes_its_report_and_drops_an_old_partial(tmp_path: Path) -> None:
    out = tmp_path / "res"
    out.mkdir()
    (out / "partial.json").write_text("{}")
    assert main(["eval", "--scenarios", "default", "--policies", "fifo", "--out", str(out), *FAST]) == 0
    assert {"results.json", "results.md", "slo_vs_load.png"} <= {p.name for p in out.iterdir()}
    assert not (out / "partial.json").exists() and not list(out.glob(".*tmp"))


class _Pool:
    """Stands in for ProcessPoolExecutor: records how many processes were asked for."""

    asked: list[int] = []

    def __init__(self, max_workers: int, **kwargs: Any) -> None:
        self.asked.append(max_workers)

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        pass

    def submit(self, fn: Any, task: Any) -> Any:
        import concurrent.futures

        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done.set_result(fn(task))
        return done

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def map(self, fn: Any, tasks: Any, chunksize: int = 1) -> Any:
        return map(fn, tasks)


def _square(x: int) -> int:
    return x * x


def test_workers_are_capped_at_the_cpus_and_the_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: ``--workers 1000`` on 2 cores started one process per task (48), 5x slower than 1."""
    import concurrent.futures

    from rlsched.parallel import run_tasks

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _Pool)
    _Pool.asked = []
    assert list(run_tasks(_square, list(range(48)), workers=1000)) == [x * x for x in range(48)]
    assert list(run_tasks(_square, list(range(3)), workers=1)) == [0, 1, 4]
    assert _Pool.asked == [2]  # 2 CPUs; workers=1 runs in this process


def test_workers_flag_refuses_zero_and_says_it_is_capped(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--workers", "0"])
    assert exc.value.code == 2
    assert "argument --workers: must be an integer >= 1 and <= 4096, not 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "capped at this machine's CPUs" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")
