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
