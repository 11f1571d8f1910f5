"""scripts/fleet_table.py: the fleet results (results/fleet/default-N/rows.json) regenerate run for run, and
the docs table pairs the deployed router by seed against the true state and vLLM-Omni's least-queue."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rlsched.evaluation import RunSpec, simulate

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "fleet_table.py"
COMMITTED = ROOT / "results" / "fleet" / "default-64" / "rows.json"


@pytest.fixture(scope="module")
def fleet():
    spec = importlib.util.spec_from_file_location("fleet_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("policy", ["fifo@least-queue", "static:agents/tuned/default.json@rlsched"])
def test_a_committed_fleet_run_is_regenerated_exactly(policy: str) -> None:
    committed = json.loads(COMMITTED.read_text())
    want = next(r for r in committed["rows"] if (r["policy"], r["rate_scale"], r["seed"]) == (policy, 0.5, 1000))
    _, got = simulate(RunSpec("default", policy, 1000, 0.5, committed["duration_s"], replicas=committed["replicas"]))
    assert got["weighted_slo_attainment"] == want["weighted_slo_attainment"]
    assert got["requests_total"] == want["requests_total"]


def test_the_table_pairs_the_deployed_router_by_seed_and_names_the_cells_short_of_a_target(fleet, tmp_path) -> None:
    out = tmp_path / "fleet" / "default-4"
    policies = [fleet.DEPLOYED, fleet.VLLM_OMNI, fleet.TRUE_STATE]
    fleet.main(["run", "--replicas", "4", "--loads", "1.5", "--seeds", "1000,1001", "--duration", "60",
                "--policies", ",".join(policies), "--out", str(out)])
    run = json.loads((out / "rows.json").read_text())
    value = {(r["policy"], r["seed"]): r["weighted_slo_attainment"] for r in run["rows"]}
    diff = [value[fleet.DEPLOYED, s] - value[fleet.VLLM_OMNI, s] for s in (1000, 1001)]
    (line,) = [x for x in fleet.fleet_table([run]) if x.startswith("| 4 | ×1.5 |")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[7].startswith(f"{100 * sum(diff) / 2:+.1f} ± ")
    mean = sum(value[fleet.VLLM_OMNI, s] for s in (1000, 1001)) / 2
    assert cells[6] == f"{100 * mean:.1f}"
    # a deployed router below fifo@least-queue is named among the cells short of a target
    worse = {**run, "rows": [{**r, "weighted_slo_attainment": 0.0} if r["policy"] == fleet.DEPLOYED else r
                             for r in run["rows"]]}
    assert fleet.fleet_table([worse])[-2].endswith(": 4 ×1.5.")
