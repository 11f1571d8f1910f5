"""A few committed result cells (results/default/results.json), regenerated number for number.

Each cell is the mean (and 95 % interval) over the ten held-out seeds 1000-1009 of one
(scenario, policy, load), so a cell is ten runs; the default scenario at load ×1.0 takes
about two seconds per policy. Any change to the simulator, the cost profiles, the
workload generator, a policy, the shipped checkpoint or the metrics that moves a number
fails here, so it cannot slip into the README's results unnoticed: either it is a bug, or
``make results`` must be re-run and committed with it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rlsched.evaluation import aggregate, paired, run_grid
from rlsched.sim.metrics import json_safe

RESULTS = Path(__file__).resolve().parents[1] / "results" / "default" / "results.json"
STATIC = "static:agents/tuned/{scenario}.json"
PICK = "pick:checkpoints/pick;static=agents/tuned/{scenario}.json"
CELL = ("default", 1.0)


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads(RESULTS.read_text())


@pytest.fixture(scope="module")
def regenerated(committed: dict):  # type: ignore[no-untyped-def]
    scenario, load = CELL
    return run_grid([scenario], ["fifo", STATIC, PICK], committed["seeds"], [load], progress=False)


def test_the_committed_cells_cover_ten_seeds(committed: dict) -> None:
    assert committed["seeds"] == list(range(1000, 1010))


@pytest.mark.parametrize("policy", ["fifo", STATIC, PICK], ids=["fifo", "static", "pick"])
def test_a_committed_cell_is_regenerated_exactly(committed: dict, regenerated, policy: str) -> None:  # type: ignore[no-untyped-def]
    """Caught: anything that changes the evaluation's numbers without regenerating results/ (e.g.
    FIFO skipping an incompatible head, a moved OOM boundary, a changed workload seed, a retrained
    checkpoint): the cell's every mean and interval, as ``rlsched eval`` writes them, to the last bit."""
    scenario, load = CELL
    (want,) = [c for c in committed["cells"]
               if (c["scenario"], c["policy"], c["rate_scale"]) == (scenario, policy, load)]
    (got,) = [c for c in aggregate(regenerated.rows) if c.policy == policy]
    assert json_safe(dataclasses.asdict(got)) == want


def test_the_committed_pick_versus_static_row_is_regenerated_exactly(committed: dict, regenerated) -> None:  # type: ignore[no-untyped-def]
    """The paired comparison the README quotes (pick − tuned static, per seed) for the same cell."""
    scenario, load = CELL
    (want,) = [r for r in committed["paired_vs_static"][PICK] if (r["scenario"], r["rate_scale"]) == (scenario, load)]
    (got,) = paired(regenerated.rows, PICK, (STATIC,))
    assert json_safe(got) == want
