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


# ------------------------------------------------------------ paths that are not regular files (issue 34)
# A named pipe, a symbolic link (to a pipe, or to a regular file) and a folder stand for every
# path that is not a regular file: a device node is never touched by a test.


def _not_regular(tmp_path: Path, kind: str) -> Path:
    import os

    path = tmp_path / f"out-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-fifo":
        os.mkfifo(tmp_path / "target-fifo")
        path.symlink_to(tmp_path / "target-fifo")
    elif kind == "link-to-file":
        (tmp_path / "target.txt").write_text("kept")
        path.symlink_to(tmp_path / "target.txt")
    elif kind == "folder":
        path.mkdir()
    return path


def _unchanged(path: Path, kind: str) -> bool:
    import stat

    mode = path.lstat().st_mode
    return {"fifo": stat.S_ISFIFO, "folder": stat.S_ISDIR}.get(kind, stat.S_ISLNK)(mode) and (
        kind != "link-to-file" or path.read_text() == "kept")


KINDS = ("fifo", "link-to-fifo", "link-to-file", "folder")
WHY = {"fifo": "is a named pipe (FIFO), not a regular file", "link-to-fifo": "is a symbolic link (to ",
       "link-to-file": "is a symbolic link (to ", "folder": "is a folder; name the file to write"}


@pytest.mark.parametrize("kind", KINDS)
def test_the_writer_refuses_a_path_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """Bug: ``os.replace`` put a regular file in place of a pipe, a link or (as root) a device node."""
    from rlsched.atomic import atomic_open, stream_open, write_atomic
    from rlsched.errors import OutputPathError

    path = _not_regular(tmp_path, kind)
    for write in (lambda: write_atomic(path, "x", "--records"), lambda: stream_open(path, "w", "--records"),
                  lambda: stream_open(path, "a", "--records"), lambda: atomic_open(path, "w", "--records").__enter__()):
        with pytest.raises(OutputPathError) as exc:
            write()
        assert str(exc.value).startswith(f"--records: {path} {WHY[kind]}") and _unchanged(path, kind)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_a_socket_is_refused_and_so_is_a_pipe_put_there_while_writing(tmp_path: Path) -> None:
    import os
    import socket
    import stat

    from rlsched.atomic import atomic_open, write_atomic
    from rlsched.errors import OutputPathError

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(OutputPathError, match="is a socket, not a regular file"):
            write_atomic(sock_path, "x")
    path = tmp_path / "late"
    with pytest.raises(OutputPathError, match="output: .*late is a named pipe"), atomic_open(path) as fh:
        fh.write("x")
        os.mkfifo(path)  # between the first check and the replace
    assert stat.S_ISFIFO(path.lstat().st_mode)


def test_stream_open_writes_and_appends_a_regular_file(tmp_path: Path) -> None:
    from rlsched.atomic import stream_open

    path = tmp_path / "log.jsonl"
    path.write_text("old\n")
    with stream_open(path, "a") as fh:
        fh.write("more\n")
    assert path.read_text() == "old\nmore\n"
    with stream_open(path, "w") as fh:
        fh.write("new\n")
    assert path.read_text() == "new\n"


# Every output flag of every command, with {out} the path under test: each is checked before the
# work (the work is replaced by a failure where it would be slow), so the refusal is immediate.
FILE_OUTPUTS = {
    "simulate --records": ["simulate", "--duration", "60", "--records", "{out}"],
    "tune --out": ["tune", "--trials", "2", "--out", "{out}"],
    "deploy --out": ["deploy", "--policy", "fifo", "--out", "{out}"],
    "profile fit --out": ["profile", "fit", "envs/profiles/measurements/qwen-image-h200-vllm-omni", "--out", "{out}"],
    "loadgen --records": ["loadgen", "http://127.0.0.1:9", "--records", "{out}"],
}


@pytest.mark.parametrize("kind", ["fifo", "link-to-fifo", "link-to-file"])
@pytest.mark.parametrize("command", list(FILE_OUTPUTS))
def test_every_file_output_is_refused_typed_before_the_work(tmp_path: Path, command: str, kind: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = _not_regular(tmp_path, kind)
    assert main([a.replace("{out}", str(path)) for a in FILE_OUTPUTS[command]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlsched: error: {command.split()[-1]}: {path} {WHY[kind]}") and err.count("\n") == 1
    assert _unchanged(path, kind)


def test_each_compare_records_file_is_checked_before_the_first_policy(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import os

    os.mkfifo(tmp_path / "r.sjf.csv")
    argv = ["simulate", "--compare", "fifo,sjf", "--duration", "60", "--records", str(tmp_path / "r.csv")]
    assert main(argv) == 2
    assert f"--records: {tmp_path / 'r.sjf.csv'} is a named pipe" in capsys.readouterr().err
    assert not (tmp_path / "r.fifo.csv").exists()


def test_label_out_is_checked_for_what_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    path = tmp_path / "l.npz"
    os.mkfifo(path)
    assert main(["label", "--episodes", "1", "--out", str(path)]) == 2
    assert f"--out: {path} is a named pipe (FIFO), not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["eval", "plan"])
def test_a_pipe_among_the_files_a_folder_output_gets_is_refused_before_simulating(
        tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``plan --out`` was checked after every layout had been simulated (a traceback after minutes)."""
    import os

    import rlsched.evaluation.runs
    import rlsched.planning

    def work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("simulated before the --out check")

    monkeypatch.setattr(rlsched.planning, "plan", work)
    monkeypatch.setattr(rlsched.evaluation.runs, "run_tasks", work)
    out = tmp_path / "res"
    out.mkdir()
    name = "plan.json" if command == "plan" else "results.json"
    os.mkfifo(out / name)
    argv = [command, "--out", str(out), *(["--scenarios", "default", "--policies", "fifo"] if command == "eval"
                                          else [])]
    assert main(argv) == 2
    assert f"--out: {out / name} is a named pipe (FIFO), not a regular file" in capsys.readouterr().err
    os.unlink(out / name)
    os.mkfifo(tmp_path / "fifo")
    assert main([command, "--out", str(tmp_path / "fifo")]) == 2
    assert f"--out: {tmp_path / 'fifo'} is a named pipe (FIFO); name a folder" in capsys.readouterr().err


def test_plan_writes_its_files_whole_and_says_which_it_replaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import rlsched.commands.plan

    out = tmp_path / "plan"
    argv = ["plan", "--out", str(out), "--seeds", "0", "--loads", "1", "--routers", "", "--json"]
    assert main(argv) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert {"plan.json", "stage.yaml", "deploy.sh"} <= set(first) and "note" not in capsys.readouterr().err
    (out / "NOTES.md").write_text("kept")

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rlsched.commands.plan, "write_atomic", lambda path, text, flag: (
        crash() if path.name == "stage.yaml" else rlsched.atomic.write_atomic(path, text, flag)))
    import rlsched.atomic

    with pytest.raises(OSError):
        main(argv)
    err = capsys.readouterr().err
    assert f"rlsched: note: --out {out} holds " in err and "plan.json, stage.yaml, deploy.sh" in err
    assert (out / "stage.yaml").read_bytes() == first["stage.yaml"] and (out / "NOTES.md").read_text() == "kept"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_study_that_is_a_pipe_is_refused_before_the_first_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import os

    import rlsched.agents.tune as tune

    def trial(*args: object, **kwargs: object) -> list[float]:
        raise AssertionError("a trial ran before the --storage check")

    monkeypatch.setattr(tune, "score_vectors", trial)
    os.mkfifo(tmp_path / "t.optuna.db")
    assert main(["tune", "--trials", "2", "--out", str(tmp_path / "t.json")]) == 2
    assert f"--storage: {tmp_path / 't.optuna.db'} is a named pipe (FIFO), not a regular file" in \
        capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "link-to-folder"])
def test_a_folder_replaced_whole_must_be_a_folder_not_a_link(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``os.replace`` of a checkpoint folder swapped a link for a folder (its target left as it was)
    and moved a pipe aside."""
    import os

    import rlsched.agents.export as export
    from rlsched.atomic import replace_folder
    from rlsched.errors import OutputPathError

    out = tmp_path / "ck"
    if kind == "fifo":
        os.mkfifo(out)
    else:
        (tmp_path / "real").mkdir()
        out.symlink_to(tmp_path / "real")
    why = "is a named pipe (FIFO); name a folder" if kind == "fifo" else "is a symbolic link (to "
    (tmp_path / "new").mkdir()
    with pytest.raises(OutputPathError, match="ck " + why.replace("(", r"\(").replace(")", r"\)")):
        replace_folder(tmp_path / "new", out)

    def work(*args: Any) -> Any:
        raise AssertionError("the export ran before the --out check")

    monkeypatch.setattr(export, "actor_tensors", work)
    assert main(["export", str(_fake_run(tmp_path)), "--out", str(out), "--source", "last"]) == 2
    assert f"--out: {out} {why}" in capsys.readouterr().err
    assert out.is_symlink() if kind != "fifo" else not out.is_dir()
    run_dir = tmp_path / "rd"
    os.mkfifo(run_dir)
    assert main(["train", "--run-dir", str(run_dir), "--timesteps", "8"]) == 2
    assert f"--run-dir: {run_dir} is a named pipe (FIFO); name a folder" in capsys.readouterr().err
