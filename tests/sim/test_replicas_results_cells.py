"""Committed multi-replica result cells (results/replicas/*/results.json), regenerated number for number.

The CFG-parallel degree (``cfg_parallel``, default 1) must leave every layout without it exactly as
it was: one-GPU replicas (qwen-image-8gpu) and SP2 replicas of two profiles (qwen-image-hetero).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rlsched.evaluation import aggregate, run_grid
from rlsched.sim.metrics import json_safe

RESULTS = Path(__file__).resolve().parents[2] / "results" / "replicas"
CELLS = [("qwen-image-8gpu", "fifo@round-robin", 1.0), ("qwen-image-hetero", "edf@least-work", 1.0),
         # the deployed view (issue 33: the ledger plus the replicas' published states) and late binding
         # one wave ahead
         ("qwen-image-8gpu", "static:agents/tuned/default.json@rlsched", 1.25),
         ("qwen-image-8gpu", "static:agents/tuned/default.json@central", 1.25)]


@pytest.mark.parametrize(("scenario", "policy", "load"), CELLS,
                         ids=[f"{c[0]}-{c[1].split('@')[1]}" for c in CELLS])
def test_a_committed_replicas_cell_is_regenerated_exactly(scenario: str, policy: str, load: float) -> None:
    committed = json.loads((RESULTS / scenario / "results.json").read_text())
    (want,) = [c for c in committed["cells"]
               if (c["scenario"], c["policy"], c["rate_scale"]) == (scenario, policy, load)]
    grid = run_grid([scenario], [policy], committed["seeds"], [load], progress=False)
    (got,) = aggregate(grid.rows)
    assert json_safe(dataclasses.asdict(got)) == want
