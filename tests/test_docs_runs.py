"""Every command docs/ shows runs, budgets cut, from a folder that is not the checkout: simulate,
deploy, profile, eval, tune, plan, label and bench as the pages write them, with fewer seeds, loads,
trials, episodes and shorter windows (what the page's numbers take is minutes to hours). Left to
other tests: the learning recipes (``learn``/``train``/``export``: tests/agents/ on tiny presets),
``loadgen`` against a server (tests/test_loadgen.py, tests/e2e/), ``--ray`` (tests/ray/), a GPU's
``profile measure``, and docs/workload.md's chain (tests/test_my_workload.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.cli import main
from tests.test_docs_commands import ROOT, code_lines, rlsched_argvs

RUN = {"simulate", "deploy", "profile", "eval", "tune", "plan", "label", "bench"}
CUTS = {"--seeds": 1, "--loads": 1, "--trials": "2", "--episodes": "1", "--gpus": "2", "--check-seeds": 1,
        "--repeats": "1"}
"""Budgets cut: a number is how many of the page's list to keep; a string replaces the value."""
OUTPUTS = ("--out", "--records")


def _runs() -> list[tuple[str, list[str]]]:
    out = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        if doc.name == "workload.md":
            continue
        for line in code_lines(doc.read_text()):
            for argv in rlsched_argvs(line):
                if argv and argv[0] in RUN and "--ray" not in argv and argv[:2] != ["profile", "measure"] \
                        and "--help" not in argv:
                    out.append((f"{doc.name}: {' '.join(argv)}", argv))
    return out


def _cut(argv: list[str], folder: Path) -> list[str]:
    out = []
    for i, a in enumerate(argv):
        flag = argv[i - 1] if i else ""
        if flag in CUTS:
            cut = CUTS[flag]
            a = ",".join(a.split(",")[:cut]) if isinstance(cut, int) else cut
        elif flag in OUTPUTS:
            a = str(folder / Path(a).name)
        out.append(a)
    if out[0] in ("eval", "tune", "label") and "--duration" not in out:
        out += ["--duration", "600"]
    if out[0] == "eval" and "--seeds" not in out:
        out += ["--seeds", "1000", "--loads", "1"]
    if out[0] == "label":
        out += ["--no-progress", "--every", "8"]
    if out[0] in ("plan",) and "--seeds" not in out:
        out += ["--seeds", "0"]
    if out[0] in ("plan",) and "--loads" not in out:
        out += ["--loads", "1"]
    return out


RUNS = _runs()


def test_the_pages_show_commands_to_run() -> None:
    assert {argv[0] for _, argv in RUNS} >= {"simulate", "deploy", "eval", "tune", "plan"}


@pytest.mark.parametrize(("where", "argv"), RUNS, ids=[w[:100] for w, _ in RUNS])
def test_a_docs_command_runs(where: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cut = _cut(argv, out)
    status = main(cut)
    assert status == 0, f"{where}\nran: rlsched {' '.join(cut)}\n{capsys.readouterr().err[-2000:]}"
