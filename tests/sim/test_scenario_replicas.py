"""Multi-replica scenarios (a top-level ``replicas:`` key): schema, the stage they build, and the
commands that run them (simulate/eval run the stage; one-GPU tools refuse it; plan enumerates it)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlsched.errors import ConfigError
from rlsched.evaluation import RunSpec, labels, plain_combinations, prepare, run_grid, simulate, write_report
from rlsched.planning import plan
from rlsched.sim import load_scenario, scenario_names
from rlsched.sim.layout import LayoutCost

BASE: dict[str, Any] = {
    "name": "pool", "profile": "qwen-image-h200-vllm-omni", "duration_s": 600,
    "serving": {"mode": "request", "max_num_seqs": 4, "request_batch_max_wait_ms": 50},
    "arrival": {"process": "poisson", "rate_rps": 0.3},
    "classes": {"realtime": {"share": 1, "slo_scale": 2}, "batch": {"share": 2, "slo_scale": 3}},
    "mix": [{"model": "qwen-image", "modality": "image", "height": 512, "width": 512, "weight": 2},
            {"model": "qwen-image", "modality": "image", "height": 1328, "width": 1328}],
    "replicas": [{"count": 2, "sp_degree": 2, "name": "wide"}, {"count": 3}],
}
STAGED = [n for n in scenario_names() if load_scenario(n).replicas]


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_pool_builds_its_replicas_in_file_order(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, BASE))
    specs = sc.replica_specs()
    assert [s.name for s in specs] == ["wide-0", "wide-1", *(f"qwen-image-h200-vllm-omni@sp1-{i}" for i in range(3))]
    assert sc.gpus == 2 * 2 + 3
    assert isinstance(specs[0].cost, LayoutCost) and specs[0].cost is specs[1].cost  # one cost per group
    assert specs[2].cost is specs[3].cost and not isinstance(specs[2].cost, LayoutCost)


@pytest.mark.parametrize(("group", "key"), [
    ({"count": 0}, "replicas[0].count"),
    ({"count": 2, "sp_degree": 3}, "replicas[0].sp_degree"),
    ({"count": 2, "gpus": 2}, "replicas[0].gpus"),
])
def test_bad_groups_name_their_key(tmp_path: Path, group: dict, key: str) -> None:
    data = {**copy.deepcopy(BASE), "replicas": [group]}
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_scenario(write(tmp_path, data))


def test_a_group_that_cannot_hold_a_shape_is_refused_naming_it(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    data["mix"].append({"model": "qwen-image", "modality": "image", "height": 2048, "width": 2048})
    data["replicas"] = [{"count": 1}, {"count": 2, "profile": "qwen-image-a100-vllm-omni"}]  # 80 GB, one GPU
    sc = load_scenario(write(tmp_path, data))
    with pytest.raises(ConfigError, match=r"replicas\[1\].*2048x2048"):
        sc.replica_specs()


def test_the_stage_rate_is_the_files_and_slos_are_written_against_one_gpu(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, BASE))
    stage, metrics = simulate(RunSpec(str(write(tmp_path, BASE)), "edf@least-work", seed=1000))
    assert metrics["requests_total"] == len(sc.requests(1000)) > 0  # not scaled x replicas
    assert metrics["gpus"] == 7 and metrics["replicas"] == 5 and "sp_degree" not in metrics
    assert [r["replica"] for r in metrics["per_replica"]] == [s.name for s in sc.replica_specs()]
    cost = sc.cost()
    for req in sc.requests(1000)[:20]:
        one_gpu = cost.record(req).work_s
        assert req.slo_s == pytest.approx(sc.classes[req.priority].slo_scale * one_gpu)
    assert sum(r["requests"] for r in metrics["per_replica"]) == metrics["requests_total"]


def test_one_gpu_tools_refuse_a_pool_and_replicas_flags_do_not_stack(tmp_path: Path) -> None:
    path = str(write(tmp_path, BASE))
    with pytest.raises(ConfigError, match="models one GPU"):
        prepare(RunSpec(path, "fifo"))
    with pytest.raises(ConfigError, match="declares its own replicas"):
        simulate(RunSpec(path, "fifo", replicas=2))
    with pytest.raises(ConfigError, match="heterogeneous"):
        plan(path, None, "fifo@round-robin", [0], [1.0])
    from rlsched.envs.episodes import EpisodeSampler

    with pytest.raises(ConfigError, match="the environment models one GPU"):
        EpisodeSampler().load(path)


@pytest.mark.parametrize("scenario", STAGED)
def test_shipped_pools_serve_every_request_once(scenario: str) -> None:
    sc = load_scenario(scenario)
    stage, metrics = simulate(RunSpec(scenario, "static:agents/tuned/default.json@rlsched", seed=3,
                                      duration_s=sc.duration_s / 12))
    assert metrics["requests_completed"] == metrics["requests_total"] == len(stage.records) > 0
    assert len(metrics["per_replica"]) == len(stage.replicas) > 1


def test_shipped_pools_cover_what_the_product_serves_on() -> None:
    """8-GPU Qwen-Image, video + images in step mode, a heterogeneous pool, a trace."""
    pools = {n: load_scenario(n) for n in STAGED}
    assert any(sc.gpus == 8 and sc.profile == "qwen-image-h200-vllm-omni" for sc in pools.values())
    assert any(sc.serving.mode == "step" and any(s.modality == "video" for s in sc.mix) for sc in pools.values())
    assert any(len({(g.profile, g.sp_degree) for g in sc.replicas}) > 1 for sc in pools.values())
    assert any(sc.arrival["process"] == "trace" for sc in pools.values())


def test_eval_over_a_pool_reports_against_vllm_omni_and_the_plain_combinations(tmp_path: Path) -> None:
    path = str(write(tmp_path, {**BASE, "name": "pool", "duration_s": 300}))
    specs = ["static:agents/tuned/default.json@rlsched", "fifo@round-robin", "edf@least-work", "edf@central",
             "static:agents/tuned/default.json@central"]
    grid = run_grid([path], specs, [1000, 1001], [1.0, 2.0], progress=False)
    summary = write_report(grid, tmp_path / "out")
    assert summary["plain"] == ["fifo@round-robin", "edf@least-work"] == list(plain_combinations(specs))
    assert summary["headline"]["target"] == specs[0] and summary["headline"]["baseline"] == "fifo@round-robin"
    assert {r["best"] for r in summary["paired"][specs[0]]} <= set(summary["plain"])
    assert summary["worst_vs_any"]["ratio"] > 0
    assert not summary["worst_vs_early"]["best"].endswith("@central")  # early binding's rivals only
    assert summary["worst_vs_early"]["ratio"] >= summary["worst_vs_any"]["ratio"]
    late = summary["late_vs_early"]  # edf has no @rlsched partner in this grid: only static is paired
    assert list(late) == [specs[4]] and {r["best"] for r in late[specs[4]]} == {specs[0]}
    md = (tmp_path / "out" / "results.md").read_text()
    assert "static (tuned)@rlsched" in md and "| fifo@round-robin |" in md
    assert labels(specs)[specs[0]] == "static (tuned)@rlsched"
    with pytest.raises(ConfigError, match="--replicas"):
        run_grid([path], specs, [1000], [1.0], progress=False, replicas=2)


def test_plan_on_a_homogeneous_pool_uses_its_gpus_and_rechecks_on_evaluation_seeds() -> None:
    result = plan("qwen-image-8gpu", None, "edf@least-work", [0], [1.0], check_seeds=[1000])
    assert result["gpus"] == 8 and [r["layout"] for r in result["rows"]] == [
        "8x SP1", "4x CFG2", "4x SP2", "2x SP2+CFG2", "2x SP4", "1x SP4+CFG2", "1x SP8"]
    best = max(result["rows"], key=lambda r: r["check_mean"])
    assert result["hindsight_best"] == best["layout"]
    mine = next(r for r in result["rows"] if r["layout"] == result["recommended"])
    loses = 100 * (best["check_mean"] - mine["check_mean"])
    assert result["recommended_loses_points"] == pytest.approx(loses, abs=0.01)
    with pytest.raises(ConfigError, match="--check-seeds"):
        plan("qwen-image-8gpu", None, "edf@least-work", [0], [1.0], check_seeds=[5])


def test_tune_scores_a_pool_as_the_stage_deploys_it(tmp_path: Path) -> None:
    """The tuning objective on a pool is the stage's attainment with the action on every replica
    behind rlsched's router: the default action scores exactly what ``static@rlsched`` gets."""
    from rlsched.agents.tune import TuneSpec, default_vector, objective

    path = str(write(tmp_path, {**BASE, "duration_s": 300}))
    spec = TuneSpec(path, seeds=(0, 1), rate_scales=(1.5,), trials=2)
    score = objective(spec, load_scenario(path), default_vector())
    runs = [simulate(RunSpec(path, "static@rlsched", seed=s, rate_scale=1.5))[1]["weighted_slo_attainment"]
            for s in (0, 1)]
    assert score == pytest.approx(sum(runs) / 2, abs=1e-12)
    one_gpu = simulate(RunSpec(path, "static@round-robin", seed=0, rate_scale=1.5))[1]["weighted_slo_attainment"]
    assert score != pytest.approx(one_gpu)  # not the round-robin (or one-GPU) number
