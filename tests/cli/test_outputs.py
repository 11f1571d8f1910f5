"""Output paths are checked before the work, and outputs are written whole (issue 18, "Work lost")."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rlsched.cli import main


def test_compare_writes_one_records_file_per_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``simulate --compare fifo,sjf --records r.csv`` wrote nothing and said nothing."""
    rec = tmp_path / "r.csv"
    assert main(["simulate", "--compare", "fifo,sjf,static:agents/tuned/default.json", "--duration", "600",
                 "--records", str(rec), "--json"]) == 0
    err = capsys.readouterr().err
    files = [tmp_path / "r.fifo.csv", tmp_path / "r.sjf.csv", tmp_path / "r.static-agents-tuned-default.json.csv"]
    for path in files:
        rows = list(csv.DictReader(path.open()))
        assert rows and {"id", "status", "finish_s"} <= set(rows[0]) and str(path) in err
    assert not rec.exists()
    fifo, sjf = (list(csv.DictReader(p.open())) for p in files[:2])
    assert len(fifo) == len(sjf)  # the same workload under each policy


def test_records_path_is_checked_before_simulating(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "r.csv"
    folder.mkdir()
    assert main(["simulate", "--duration", "600", "--records", str(folder)]) == 2
    assert f"--records: {folder} is a folder" in capsys.readouterr().err


def _fake_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "last").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"agent": {}, "seed": 0}))
    (run / "last" / "model.zip").write_bytes(b"")
    return run


def test_export_out_that_is_a_file_is_refused_before_reading_the_run(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``export --out EXISTING_FILE`` read and converted the model, then failed on the path."""
    import rlsched.agents.export as export

    def work(*args: Any) -> Any:
        raise AssertionError("the export ran before the --out check")

    monkeypatch.setattr(export, "actor_tensors", work)
    out = tmp_path / "policy"
    out.write_text("a file")
    assert main(["export", str(_fake_run(tmp_path)), "--out", str(out), "--source", "last"]) == 2
    assert f"--out: {out} is a file" in capsys.readouterr().err


def test_export_of_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "ck")]) == 2
    assert "not a run dir written by `rlsched train`" in capsys.readouterr().err


def test_a_failed_export_leaves_the_previous_checkpoint_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: the checkpoint was written in place; a failure midway left new weights beside old metadata."""
    import rlsched.agents.export as export
    from rlsched.learned.checkpoint import save_checkpoint

    out = tmp_path / "ck"
    tensors = {"action_net.weight": np.ones((2, 3), np.float32), "action_net.bias": np.zeros(2, np.float32)}
    save_checkpoint(out, tensors, {"v": 1})
    (out / "NOTES.md").write_text("kept")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def half(folder: Path, t: Any, meta: Any) -> Path:
        save_checkpoint(folder, {k: v * 2 for k, v in t.items()}, meta)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "save_checkpoint", half)
    with pytest.raises(OSError):
        export._save_atomic(out, tensors, {"v": 2})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]  # no temporary folder left behind
    monkeypatch.setattr(export, "save_checkpoint", save_checkpoint)
    export._save_atomic(out, tensors, {"v": 2})
    assert json.loads((out / "policy.json").read_text())["v"] == 2 and (out / "NOTES.md").read_text() == "kept"


def test_train_run_dir_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.write_text("")
    assert main(["train", "--run-dir", str(run), "--timesteps", "8"]) == 2
    assert f"--run-dir: {run} is a file" in capsys.readouterr().err


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    from rlsched.atomic import atomic_open
    from rlsched.commands.args import write_atomic

    path = tmp_path / "results.json"
    write_atomic(path, "old")
    with pytest.raises(RuntimeError), atomic_open(path) as fh:
        fh.write("half")
        raise RuntimeError("crash mid-write")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["results.json"]
    write_atomic(path, "new")
    fresh = tmp_path / "fresh.json"
    write_atomic(fresh, "x")  # the mode open() gives, not mkstemp's 0o600
    (tmp_path / "plain").write_text("")
    assert path.read_text() == "new" and fresh.stat().st_mode == (tmp_path / "plain").stat().st_mode
