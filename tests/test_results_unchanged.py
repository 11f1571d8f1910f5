"""``scripts/results_unchanged.py``: a committed cell re-run matches, and a moved number is caught."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "results_unchanged.py"
COMMITTED = ROOT / "results" / "replicas" / "qwen-image-8gpu" / "results.json"
CELL = ["--policies", "fifo@round-robin", "--loads", "1.0"]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("results_unchanged", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_committed_cell_is_reported_identical(script, capsys) -> None:
    assert script.main([str(COMMITTED.parent), *CELL]) == 0
    assert "1 of 1 cells identical" in capsys.readouterr().out


def test_a_moved_number_fails_and_is_named(script, tmp_path, capsys) -> None:
    committed = json.loads(COMMITTED.read_text())
    for cell in committed["cells"]:
        if (cell["policy"], cell["rate_scale"]) == ("fifo@round-robin", 1.0):
            cell["mean"]["slo_attainment"] += 0.01
    (tmp_path / "results.json").write_text(json.dumps(committed))
    assert script.main([str(tmp_path), *CELL]) == 1
    out = capsys.readouterr().out
    assert "MOVED ('qwen-image-8gpu', 'fifo@round-robin', 1.0): mean.slo_attainment" in out
    assert "0 of 1 cells identical" in out


def test_patterns_choose_cells_and_nothing_chosen_is_an_error(script, capsys) -> None:
    cells = json.loads(COMMITTED.read_text())["cells"]
    central = script.chosen(cells, None, ["*@central"], [1.0])
    assert central and all(c["policy"].endswith("@central") and c["rate_scale"] == 1.0 for c in central)
    assert script.main([str(COMMITTED.parent), "--policies", "no-such-policy"]) == 2
    assert "no committed cell matches" in capsys.readouterr().err
