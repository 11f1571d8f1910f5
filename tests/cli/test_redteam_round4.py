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
