"""The fourth reliability round's findings (issue 47), each class with a test that fails without its fix:
what ``plan`` recommends, Ctrl-C in every command, ``label --json``'s stdout, eval's refusals and report."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.cli import main


# ------------------------------------------------------------------ plan recommends only deployable routers
@pytest.mark.parametrize("argv, flag, message", [
    (["--routers", "rlsched,rlsched;view=replica"], "--routers", "'rlsched;view=replica': rlsched deploy cannot "
     "serve this router (extras.rlsched_router.router: 'rlsched;view=replica': view= and delay_ms= are simulator "
     "options"),
    (["--routers", "rlsched;view=ledger"], "--routers", "view= and delay_ms= are simulator options"),
    (["--routers", "central,lookahead"], "--routers", "'lookahead': rlsched deploy cannot serve this router"),
    (["--routers", "hindsight:60"], "--routers", "'hindsight:60': rlsched deploy cannot serve this router"),
    (["--routers", "", "--policy", "edf@lookahead"], "--policy", "plan compares only routers it can deploy "
                                                                 "(compare any router in the simulator with "
                                                                 "rlsched eval)"),
])
def test_plan_refuses_a_router_deploy_cannot_serve_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str, message: str) -> None:
    """Bug: plan compared (minutes of simulation) and recommended ``view=replica``, ``view=ledger``,
    ``lookahead``, ``hindsight:60``, and wrote a deploy line that ``rlsched deploy`` refused."""
    out = tmp_path / "plan"
    assert main(["plan", "--seeds", "0", "--loads", "1", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlsched: error: {flag}: ") and message in err
    assert not out.exists()


# ------------------------------------------------------------------ Ctrl-C: one line, status 130, in every command
def _stop_at_the_first_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C as the first simulation starts, wherever a command runs it (a single replica or a stage)."""
    from rlsched.sim.simulator import Simulator
    from rlsched.sim.stage import Stage

    def ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    for cls in (Simulator, Stage):
        monkeypatch.setattr(cls, "run", ctrl_c)
    monkeypatch.setattr(Simulator, "advance_to_next_decision", ctrl_c)


@pytest.mark.parametrize("command, argv, outputs", [
    ("simulate", ["--scenario", "default", "--policy", "edf", "--duration", "60", "--json"], []),
    ("tune", ["--scenario", "default", "--trials", "2", "--seeds", "0", "--loads", "1", "--duration", "60",
              "--json", "--out", "{tmp}/tuned.json"], ["tuned.json"]),
    ("plan", ["--seeds", "0", "--loads", "1", "--routers", "", "--json", "--out", "{tmp}/plan"], ["plan"]),
    ("label", ["--scenarios", "default", "--episodes", "1", "--duration", "60", "--json", "--no-progress",
               "--out", "{tmp}/labels.npz"], ["labels.npz"]),
    ("learn", ["--agent", "agents/pick.yaml", "--run-dir", "{tmp}/run", "--json", "--no-progress", "--timesteps", "0"],
     ["run/labels.npz"]),
])
def test_ctrl_c_ends_every_command_in_one_line_with_status_130(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        command: str, argv: list[str], outputs: list[str]) -> None:
    """Bug: tune, simulate, plan, learn and label printed a KeyboardInterrupt traceback (eval and loadgen
    alone said one line and exited 130)."""
    _stop_at_the_first_simulation(monkeypatch)
    assert main([command, *(a.format(tmp=tmp_path) for a in argv)]) == 130
    captured = capsys.readouterr()
    assert captured.err == (f"rlsched: interrupted: rlsched {command} stopped; each file it wrote is whole, "
                            "the rest were not written\n")
    assert captured.out == ""
    for name in outputs:
        assert not (tmp_path / name).exists(), name


# ------------------------------------------------------------------ --json: one JSON object on stdout, nothing else
def test_label_json_prints_json_only_on_stdout(tmp_path: Path) -> None:
    """Bug: ``label --json`` printed its progress bar on stdout before the JSON object (a bar is on stderr now,
    in every command: ``rlsched.parallel.progress_bar``)."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "l.npz"
    proc = subprocess.run([sys.executable, "-m", "rlsched", "label", "--scenarios", "default", "--episodes", "1",
                           "--duration", "120", "--workers", "1", "--json", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"labels": str(out), "states": json.loads(proc.stdout)["states"]}
    assert proc.stderr == ""  # the bar is drawn on stderr, and only on a terminal


# ------------------------------------------------------------------ eval's refusals and report: the CLI's conventions
@pytest.mark.parametrize("argv, message", [
    (["--seeds", "5"], "rlsched: error: --seeds: 5 is a training seed (evaluation seeds are >= 1000); pass "
                       "--allow-training-seeds to use training seeds anyway"),  # was "rlsched eval: ...", status 1
    (["--loads", "-1"], "rlsched: error: --loads: each value must be a finite number >= 1e-09 and <= 1e+09, not -1"),
    (["--loads", "abc"], "rlsched: error: --loads: expected comma-separated numbers, not 'abc'"),
    (["--seeds", "1000,1000"], "rlsched: error: --seeds: 1000 is given twice; each value once"),
    (["--loads", "1,1.0"], "rlsched: error: --loads: 1.0 is given twice"),
    (["--policies", "fifo,edf,fifo"], "rlsched: error: --policies: 'fifo' is given twice"),
    (["--scenarios", "default,default"], "rlsched: error: --scenarios: 'default' is given twice"),
])
def test_eval_refuses_in_one_error_line_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      argv: list[str], message: str) -> None:
    """Bugs: training seeds were refused by a SystemExit in another format (status 1), a bad load as an
    ``invalid request field``, and repeats ran as extra runs reported as agreement (``± 0.0``)."""
    base = {"--scenarios": "default", "--policies": "fifo", "--seeds": "1000", "--loads": "1"}
    base.update(dict(zip(argv[::2], argv[1::2])))
    args = [x for kv in base.items() for x in kv]
    assert main(["eval", *args, "--duration", "60", "--json", "--out", str(tmp_path / "ev")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    assert not (tmp_path / "ev").exists()


def test_tune_and_label_name_their_load_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--loads", "1,-2", "--out", str(tmp_path / "t.json")]) == 2
    assert capsys.readouterr().err.startswith("rlsched: error: --loads: each value must be a finite number")
    assert main(["label", "--load-range", "x,1", "--out", str(tmp_path / "l.npz")]) == 2
    assert capsys.readouterr().err.startswith("rlsched: error: --load-range: expected comma-separated numbers")


def test_eval_report_says_why_there_is_no_headline_instead_of_a_nan_table(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: with no load where FIFO meets 40-80 % of SLOs, results.md held an empty table and "Mean ratio:
    ×nan vs fifo, ×nan vs the best other policy"."""
    out = tmp_path / "ev"
    assert main(["eval", "--scenarios", "default", "--policies", "fifo,static", "--seeds", "1000", "--loads", "0.5",
                 "--duration", "60", "--out", str(out)]) == 0
    text = (out / "results.md").read_text()
    assert "nan" not in text and "No load here has FIFO meeting 40–80 % of SLOs, so there is no headline ratio" in text
    assert "nan" not in capsys.readouterr().out


# ------------------------------------------------------------------ a policy path holding '@'
def test_a_policy_path_holding_an_at_sign_is_one_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``static:DIR@2/t.json`` was split at its '@': the file read was ``DIR`` (not found) and the router
    ``2/t.json``. What follows the last '@' is a router only when it is not a path."""
    import json
    import shutil

    from rlsched.routing.routers import split_pair

    folder = tmp_path / "v@2"
    folder.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "agents" / "tuned" / "default.json", folder / "t.json")
    spec = f"static:{folder}/t.json"
    assert split_pair(spec) == (spec, "round-robin")
    assert split_pair(f"{spec}@rlsched") == (spec, "rlsched")
    assert split_pair("edf@router:checkpoints/router") == ("edf", "router:checkpoints/router")
    assert main(["simulate", "--scenario", "default", "--policy", spec, "--duration", "60", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == spec
    assert main(["simulate", "--scenario", "default", "--policy", "rl:runs/a@b", "--duration", "60"]) == 2
    assert ("unknown router 'b' in 'rl:runs/a@b' (known: affinity, hindsight, least-queue, least-work, lookahead, "
            "random, rlsched, round-robin, router, or central for late binding); a policy whose path holds '@' is "
            "given with its router: rl:runs/a@b@round-robin") in capsys.readouterr().err
    assert main(["simulate", "--scenario", "default", "--policy", "edf@rlshed", "--duration", "60"]) == 2
    err = capsys.readouterr().err  # a plain typo: no hint about paths
    assert "unknown router 'rlshed' in 'edf@rlshed'" in err and "holds '@'" not in err


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks (100 a second on Linux)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the child's CPU time in /proc")
def test_a_real_ctrl_c_in_simulate_is_one_line_and_130(tmp_path: Path) -> None:
    """The signal itself, not a raised KeyboardInterrupt: SIGINT to a simulation well under way."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import take_ctrl_c

    proc = subprocess.Popen([sys.executable, "-m", "rlsched", "simulate", "--scenario", "default", "--policy", "fifo",
                             "--duration", "1000000", "--load", "4", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=take_ctrl_c)
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and _cpu_s(proc.pid) < 1.5 and time.monotonic() < deadline:
            time.sleep(0.1)  # past the imports (under 1 s of CPU) and into the simulation (about 6 s)
        assert proc.poll() is None, "the simulation ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, out) == (130, "")
    assert err == ("rlsched: interrupted: rlsched simulate stopped; each file it wrote is whole, the rest were "
                   "not written\n")
