"""The seed heuristics, ``static`` and ``rlsched tune``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlsched.errors import ConfigError
from rlsched.evaluation import RunSpec, prepare, simulate
from rlsched.policies import make_policy
from rlsched.policies.projected import ProjectionConfig
from rlsched.policies.seed import SeedConfig, load_seed_config, memory_cap
from rlsched.sim import load_scenario, scenario_names
from rlsched.sim.request import COMPLETED, FAILED_OOM
from tests.conftest import make_request

ONE_GPU = [n for n in scenario_names() if not load_scenario(n).replicas]
"""Scenarios of one GPU (the multi-replica ones run as stages: tests/sim/test_scenario_replicas.py)."""

SEEDS = ("seed-memory", "seed-priority", "seed-composite")
REPO = Path(__file__).resolve().parents[2]


def _short(name: str) -> float:
    """An arrival window with a few dozen requests, at double load (queues form)."""
    return load_scenario(name).duration_s / 12


@pytest.mark.parametrize("scenario", ONE_GPU)
@pytest.mark.parametrize("policy", (*SEEDS, "static"))
def test_serves_every_request_of_every_scenario(policy: str, scenario: str) -> None:
    sim = prepare(RunSpec(scenario, policy, seed=3, rate_scale=2.0, duration_s=_short(scenario)))
    sim.run(make_policy(policy))  # InvalidDecision if a batch broke max_num_seqs or mixed keys
    assert len(sim.records) == sim.total_requests > 0
    assert {r.status for r in sim.records.values()} <= {COMPLETED, FAILED_OOM}
    assert max(sim.batch_sizes) <= sim.config.max_num_seqs


@pytest.mark.parametrize("policy", SEEDS)
def test_step_mode_serves_every_request(policy: str) -> None:
    sim = prepare(RunSpec("default", policy, seed=3, rate_scale=2.0, duration_s=900, mode="step"))
    sim.run(make_policy(policy))
    assert {r.status for r in sim.records.values()} == {COMPLETED}


def test_same_seed_same_run() -> None:
    runs = [simulate(RunSpec("omni-mix", "seed-composite", seed=5, duration_s=1200))[1] for _ in range(2)]
    assert runs[0] == runs[1]


def test_memory_awareness_removes_fifo_ooms() -> None:
    spec = dict(scenario="trace-azure", seed=1)
    assert simulate(RunSpec(policy="fifo", **spec))[1]["requests_failed"] > 0
    for policy in ("seed-memory", "seed-composite"):
        assert simulate(RunSpec(policy=policy, **spec))[1]["requests_failed"] == 0


def test_priority_shares_serve_realtime_better_than_fifo() -> None:
    def realtime(policy: str) -> float:
        rows = [simulate(RunSpec("default", policy, seed=s))[1] for s in range(3)]
        return float(np.mean([r["per_class"]["realtime"]["slo_attainment"] for r in rows]))
    assert realtime("seed-priority") > realtime("fifo") + 0.05


def test_memory_cap_follows_the_seed_formula(make_sim) -> None:
    sim = make_sim([make_request(0, size=2048)], max_num_seqs=16)
    sim.advance_to_next_decision()
    rec = sim.waiting[0]
    free = sim.cost.gpu_memory_gb - sim.cost.weights_gb
    assert memory_cap(sim, rec, SeedConfig()) == int(free * 0.8 // (rec.mem_gb * 1.2)) < 8
    small = make_sim([make_request(0, size=512)], max_num_seqs=16)
    small.advance_to_next_decision()
    assert memory_cap(small, small.waiting[0], SeedConfig()) == 8  # the image cap binds


def test_batch_timeout_coalesces_a_short_batch(make_sim) -> None:
    sim = make_sim([make_request(0, 0.0), make_request(1, 0.030)]).run(make_policy("seed-memory"))
    assert sim.batches == 1 and sim.records[0].first_scheduled_s == pytest.approx(0.050)


def test_seed_memory_fills_the_head_key_past_other_keys(make_sim) -> None:
    reqs = [make_request(0, 0.0), make_request(1, 0.0, size=1024), make_request(2, 0.0)]
    sim = make_sim(reqs).run(make_policy("seed-memory"))
    assert sim.records[0].batch_id == sim.records[2].batch_id != sim.records[1].batch_id


def test_starving_background_goes_before_fresh_realtime(make_sim) -> None:
    reqs = [make_request(0, 0.0, size=2048), make_request(1, 1.0, priority="background"),
            make_request(2, 80.0, size=1024, priority="realtime")]
    sim = make_sim(reqs, max_num_seqs=1).run(make_policy("seed-priority"))
    assert sim.records[1].first_scheduled_s < sim.records[2].first_scheduled_s


def test_realtime_share_goes_first_when_nobody_starves(make_sim) -> None:
    reqs = [make_request(0, 0.0, size=1024), make_request(1, 1.0, priority="background"),
            make_request(2, 2.0, size=768, priority="realtime")]
    sim = make_sim(reqs, max_num_seqs=1).run(make_policy("seed-priority"))
    assert sim.records[2].first_scheduled_s < sim.records[1].first_scheduled_s


def test_composite_prefers_the_shared_prefix(make_sim) -> None:
    reqs = [make_request(0, 0.0, prefix_id=7), make_request(1, 0.0, prefix_id=3),
            make_request(2, 0.0, prefix_id=7)]
    composite = make_sim(reqs, max_num_seqs=2).run(make_policy("seed-composite"))
    assert composite.records[0].batch_id == composite.records[2].batch_id
    fair = make_sim(reqs, max_num_seqs=2).run(make_policy("seed-priority"))
    assert fair.records[0].batch_id == fair.records[1].batch_id


def test_preset_holds_the_defaults() -> None:
    assert load_seed_config(str(REPO / "agents" / "seed-heuristics.yaml")) == SeedConfig()
    assert make_policy(f"seed-composite:{REPO / 'agents' / 'seed-heuristics.yaml'}").config == SeedConfig()


def test_bad_presets_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("priority_weights: {realtime: 1.0}\n")
    with pytest.raises(ConfigError, match="priority_weights"):
        load_seed_config(str(bad))
    bad.write_text("batch_timout_ms: 5\n")
    with pytest.raises(ConfigError, match="batch_timout_ms"):
        load_seed_config(str(bad))
    with pytest.raises(ConfigError, match="not found"):
        make_policy("seed-memory:nowhere.yaml")


def test_static_loads_a_tuned_vector(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"action": [1, -1, -1, 0, 0, 0, 0, -1, 0]}))
    policy = make_policy(f"static:{path}")
    assert policy.params.class_weights[0] > 0.9 and policy.config == ProjectionConfig()


def test_static_refuses_per_file_projection_knobs(tmp_path: Path) -> None:
    """static and rl share one projection config, so they differ only by what is learned."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"action": [0] * 9, "starvation_threshold_s": 12}))
    with pytest.raises(ConfigError, match="starvation_threshold_s"):
        make_policy(f"static:{path}")
    path.write_text(json.dumps({"action": [0.0, 1.0]}))
    with pytest.raises(ConfigError, match="9 numbers"):
        make_policy(f"static:{path}")


def test_tune_cli_writes_a_vector_static_can_run(tmp_path: Path) -> None:
    out = tmp_path / "tuned.json"
    run = [sys.executable, "-m", "rlsched", "tune", "--scenario", "default", "--trials", "3", "--seeds", "0",
           "--duration", "900", "--out", str(out), "--json"]
    subprocess.run(run, check=True, capture_output=True, timeout=120)
    saved = json.loads(out.read_text())
    assert saved["seeds"] == [0] and len(saved["action"]) == 9 and saved["score"] >= saved["default_score"]
    simulate(RunSpec("default", f"static:{out}", seed=1000, duration_s=900))
    refused = subprocess.run([*run[:8], "1000", *run[9:]], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "1000" in refused.stderr
