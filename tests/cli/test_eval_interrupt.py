"""Ctrl-C during ``rlsched eval``: the finished runs kept in partial.json, one line, status 130 (issue 34)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlsched.cli import main
from rlsched.evaluation import runs as evaluation
from tests.conftest import take_ctrl_c

FAST = ["--seeds", "1000", "--loads", "1.0", "--duration", "60", "--json"]


def test_ctrl_c_keeps_the_finished_runs_and_exits_130_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: partial.json was written, then a KeyboardInterrupt traceback (status -2), unlike loadgen."""
    real, calls = evaluation._one, []

    def one(task: Any) -> Any:
        calls.append(task)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(evaluation, "_one", one)
    out = tmp_path / "res"
    assert main(["eval", "--scenarios", "default", "--policies", "fifo,edf", "--seeds", "1000,1001", *FAST[2:],
                 "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err == f"rlsched: interrupted: 2 of 4 runs finished; their rows are in {out / 'partial.json'}\n"
    partial = json.loads((out / "partial.json").read_text())
    assert (partial["finished"], partial["total"], partial["stopped_by"]) == (2, 4, "interrupted")
    assert not (out / "results.json").exists()


def test_ctrl_c_before_any_run_finished_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    def one(task: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluation, "_one", one)
    out = tmp_path / "res"
    assert main(["eval", "--scenarios", "default", "--policies", "fifo", *FAST, "--out", str(out)]) == 130
    assert capsys.readouterr().err == "rlsched: interrupted: 0 of 1 runs finished\n" and not out.exists()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the worker processes in /proc")
def test_a_terminal_ctrl_c_with_workers_prints_no_traceback(tmp_path: Path) -> None:
    """A terminal sends SIGINT to the whole process group: each worker printed its own traceback."""
    out = tmp_path / "res"
    seeds = ",".join(str(1000 + i) for i in range(40))
    proc = subprocess.Popen([sys.executable, "-m", "rlsched", "eval", "--scenarios", "default", "--policies",
                             "fifo,edf", "--seeds", seeds, "--loads", "1.0", "--json", "--workers", "2",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=take_ctrl_c)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _children(proc.pid) and proc.poll() is None:
            time.sleep(0.05)  # the grid is running once its workers are
        assert proc.poll() is None, "the grid ended before the test could stop it"
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlsched: interrupted: ") and " of 80 runs finished" in lines[0]
    if "partial.json" in lines[0]:
        partial = json.loads((out / "partial.json").read_text())
        assert partial["stopped_by"] == "interrupted" and len(partial["rows"]) == partial["finished"] > 0


def test_ctrl_c_inside_a_locks_release_is_an_interrupt_too() -> None:
    """Bug (seen once in make test): Ctrl-C landed inside a Condition's release while eval awaited a
    worker's result; CPython raised RuntimeError('cannot release un-acquired lock') while handling the
    KeyboardInterrupt, and eval printed a traceback instead of its one line and status 130."""
    from rlsched.commands.evaluate import _interrupted

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("cannot release un-acquired lock")  # noqa: B904 (as CPython chains it)
    except RuntimeError as exc:
        assert _interrupted(exc)
    assert not _interrupted(RuntimeError("boom")) and _interrupted(KeyboardInterrupt())
