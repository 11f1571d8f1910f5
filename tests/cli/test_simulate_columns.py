"""``simulate``'s table: one name per column, and the requests served past their SLO beside the p99 latency
(issue 48: two columns were titled ``batch``, and static's p99 of thousands of seconds came from requests
it serves last, by design, with no column saying how many)."""

from __future__ import annotations

import json

from rlsched.cli import main
from rlsched.commands.tables import COLUMNS


def test_one_name_per_column() -> None:
    heads = [head for head, _, _ in COLUMNS]
    assert len(heads) == len(set(heads)), heads
    assert {"late", "shed", "OOM", "mean batch"} <= set(heads)


def test_late_requests_are_counted_and_shown(capsys) -> None:
    argv = ["simulate", "--scenario", "default", "--compare", "fifo,static:agents/tuned/default.json",
            "--load", "1.5", "--duration", "1800"]
    assert main([*argv, "--json"]) == 0
    for row in json.loads(capsys.readouterr().out):
        met = round(row["slo_attainment"] * row["requests_total"])
        assert row["requests_late"] == row["requests_completed"] - met > 0, row["policy"]
    assert main([*argv, "--markdown"]) == 0
    head, rule, *rows = capsys.readouterr().out.splitlines()
    assert "| late |" in head and head.count("| batch |") == 1
