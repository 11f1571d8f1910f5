"""Every command the README shows runs, as written, from a folder that is not the checkout (shipped
names and ``envs/…`` paths resolve as they do for an installed package); outputs go to a temporary
folder. Left out here: ``learn`` (tests/agents/test_recipe_kinds.py runs it end to end on a tiny preset;
the shipped one trains for an hour) and the own-workload block (tests/test_my_workload.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.cli import main
from tests.test_docs_commands import README, code_lines, rlsched_argvs

OUTPUTS = ("--out", "--records")
LONG = {"learn"}
WORKLOAD = "my-shop"
"""The README's own-workload block: tests/test_my_workload.py runs it (from docs/workload.md, budgets cut)."""
RUNS = [argv for line in code_lines(README.read_text()) for argv in rlsched_argvs(line)
        if argv[0] not in LONG and not any(WORKLOAD in a for a in argv)]


def _into(argv: list[str], folder: Path) -> list[str]:
    """The same command, each output flag's path moved into ``folder``."""
    return [str(folder / Path(a).name) if i and argv[i - 1] in OUTPUTS else a for i, a in enumerate(argv)]


def test_the_readme_shows_commands_to_run() -> None:
    verbs = {argv[0] for argv in RUNS}
    assert {"simulate", "deploy", "profile"} <= verbs, verbs


@pytest.mark.parametrize("argv", RUNS, ids=[" ".join(a)[:80] for a in RUNS])
def test_a_readme_command_runs(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    try:
        status = main(_into(argv, out))
    except SystemExit as exc:  # --help
        status = exc.code
    captured = capsys.readouterr()
    assert status == 0, f"rlsched {' '.join(argv)}\n{captured.err[-2000:]}"
    for i, a in enumerate(argv[1:], 1):
        if argv[i - 1] in OUTPUTS:
            assert (out / Path(a).name).exists(), f"{a} not written"
