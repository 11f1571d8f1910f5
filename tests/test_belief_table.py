"""``results/belief``: the harm table's summary is what ``scripts/belief_harm.py`` computes from its own
results.json, in every run alike (a tie between cells was broken by a set's hash order, so a rerun of the
same numbers could name another cell)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():  # type: ignore[no-untyped-def]
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("belief_harm", ROOT / "scripts" / "belief_harm.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_shipped_summary_is_the_one_its_results_give() -> None:
    data = json.loads((ROOT / "results" / "belief" / "belief.json").read_text())
    lines = _script().summary(data["rows"], data["meta"]["seeds"])
    page = (ROOT / "results" / "belief" / "belief.md").read_text()
    assert [line for line in lines if line not in page] == []
    doc = (ROOT / "docs" / "calibration.md").read_text()
    assert [line for line in lines[2:] if line not in doc] == []


def test_a_tie_picks_the_first_cell_in_file_order() -> None:
    script = _script()
    truth = next(iter(script.TRUTHS))
    rows = [{"scenario": "s", "truth": truth, "spec": spec, "arm": arm, "load": 1.0, "seed": 0, "weighted": 0.5,
             "failed": 0, "last_move": 0, "converged_at": 0}
            for spec in ("b@x", "a@x") for arm in ("deployed", "calibrated", "reference")]
    line = script.summary(rows, [0])[2]
    assert "`b@x` ×1" in line
