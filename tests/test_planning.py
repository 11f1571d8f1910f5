"""Layouts of N GPUs: the cost model at an SP degree, the enumeration, and ``rlsched plan``."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlsched.cli import main
from rlsched.errors import ConfigError
from rlsched.planning import Layout, deploy_command, layouts, plan
from rlsched.sim import Request, load_profile
from rlsched.sim.layout import at_layout
from rlsched.sim.simulator import ServingConfig

WIDE = load_profile("qwen-image-h200-vllm-omni")


def _req(size: int) -> Request:
    return Request(0, 0.0, "qwen-image", "image", size, size, 1, 50, True, "batch", 1e9)


def test_a_replica_on_d_gpus_sees_the_sp_cost_model() -> None:
    assert at_layout(WIDE, 1) is WIDE  # one GPU: exactly today's model
    for d in (2, 4, 8):
        cost = at_layout(WIDE, d)
        for size in (512, 1024, 2048):
            rec = cost.record(_req(size))
            assert rec.work_s == pytest.approx(WIDE.standalone_sp_s(_req(size), d))
            assert cost.batch_memory_gb([rec, rec]) == pytest.approx(WIDE.batch_memory_gb_sp([rec, rec], d))
            assert cost.batch_duration([rec]) == pytest.approx(rec.work_s)
    # small shapes get slower with more GPUs, large ones faster (the published crossover)
    assert at_layout(WIDE, 8).record(_req(512)).work_s > WIDE.record(_req(512)).work_s
    assert at_layout(WIDE, 8).record(_req(2048)).work_s < WIDE.record(_req(2048)).work_s / 3


def test_layouts_are_what_the_gpus_and_the_profile_allow() -> None:
    assert [lay.name for lay in layouts(8, WIDE)] == ["8x SP1", "4x CFG2", "4x SP2", "2x SP2+CFG2", "2x SP4",
                                                      "1x SP4+CFG2", "1x SP8"]
    assert all(lay.replicas * lay.gpus_per_replica == 8 for lay in layouts(8, WIDE))
    assert [lay.name for lay in layouts(6, WIDE)] == ["6x SP1", "3x CFG2", "3x SP2"]
    assert [lay.name for lay in layouts(8, load_profile("qwen-image-h200"))] == ["8x SP1"]  # no sp block
    assert [lay.name for lay in layouts(8, WIDE, (1,))] == ["8x SP1", "4x SP2", "2x SP4", "1x SP8"]  # --cfg-degrees 1
    with pytest.raises(ConfigError, match="--cfg-degrees"):
        layouts(8, WIDE, (1, 3))
    # FLUX.1-dev's profile has sp but no cfg_parallel block: no CFG layouts
    assert [lay.name for lay in layouts(8, load_profile("flux1-dev-h100"))] == ["8x SP1", "4x SP2", "2x SP4", "1x SP8"]
    with pytest.raises(ConfigError, match="--gpus"):
        layouts(0, WIDE)


def test_plan_recommends_the_best_layout_on_training_seeds_only() -> None:
    result = plan("default", 4, "static:agents/tuned/default.json@rlsched", [0], [1.0],
                  profile="qwen-image-h200-vllm-omni")
    means = {r["layout"]: r["mean"] for r in result["rows"]}
    assert result["recommended"] == max(means, key=means.get)
    assert "num_replicas:" in result["stage_yaml"] and "ulysses_degree:" in result["stage_yaml"]
    with pytest.raises(ConfigError, match="training seeds"):
        plan("default", 4, "fifo@round-robin", [1000], [1.0])


def test_plan_compares_the_routers_on_the_recommended_layout_and_deploys_the_winner() -> None:
    result = plan("qwen-image-8gpu", 2, "static:agents/tuned/default.json@rlsched", [0], [1.0, 1.5],
                  routers=["rlsched", "central"])
    rows = {r["router"]: r for r in result["router_rows"]}
    assert set(rows) == {"rlsched", "central"}
    best = max(rows, key=lambda r: rows[r]["mean"])
    assert result["recommended_router"] == best and f"--router {best}" in result["deploy_command"]
    for load in ("1", "1.5"):
        assert rows[result["best_router_by_load"][load]]["by_load"][load] == max(r["by_load"][load]
                                                                               for r in rows.values())
    with pytest.raises(ConfigError, match="router"):
        plan("qwen-image-8gpu", 2, "edf@rlsched", [0], [1.0], routers=["nope"])


def test_plan_cli_writes_table_plot_and_stage_keys(tmp_path) -> None:
    out = tmp_path / "plan"
    res = subprocess.run([sys.executable, "-m", "rlsched", "plan", "--gpus", "2", "--profile",
                          "qwen-image-h200-vllm-omni", "--seeds", "0", "--loads", "1.0", "--out", str(out),
                          "--json"], capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(res.stdout)
    assert {r["layout"] for r in result["rows"]} == {"2x SP1", "1x CFG2", "1x SP2"}
    assert (out / "plan.png").stat().st_size > 0 and (out / "stage.yaml").read_text() == result["stage_yaml"]
    assert (out / "deploy.sh").read_text().splitlines()[-1] == result["deploy_command"]
    res = subprocess.run([sys.executable, "-m", "rlsched", "plan", "--gpus", "2", "--profile",
                          "qwen-image-h200-vllm-omni", "--seeds", "0", "--loads", "1.0", "--out", str(out),
                          "--cfg-degrees", "1"], capture_output=True, text=True, timeout=300, check=True)
    assert "1x CFG2" not in res.stdout and "2x SP1" in res.stdout
    assert {r["layout"] for r in json.loads((out / "plan.json").read_text())["rows"]} == {"2x SP1", "1x SP2"}


def test_the_deploy_line_serves_the_recommended_layout_with_the_planned_policy_and_router() -> None:
    line = deploy_command(Layout(2, 2), 4, "edf@least-work", "qwen-image-h200-vllm-omni", ServingConfig("step", 8))
    assert line == ("rlsched deploy --replicas 2 --devices 0,1,2,3 --sp 2 --policy edf --router least-work "
                    "--profile qwen-image-h200-vllm-omni --max-num-seqs 8 --step-execution --out deploy.yaml")
    paths = deploy_command(Layout(8, 1), 8, "static:agents/my tuned.json@rlsched", "p", ServingConfig(), out="d.yaml")
    assert shlex.split(paths)[shlex.split(paths).index("--policy") + 1] == "static:agents/my tuned.json"  # quoted
    # a bare policy routes as vLLM-Omni does; late binding is rlsched's central pool (docs/deploy.md)
    assert "--router round-robin" in deploy_command(Layout(2, 1), 2, "fifo", "p", ServingConfig())
    assert "--policy edf --router central" in deploy_command(Layout(2, 1), 2, "edf@central", "p", ServingConfig())


def test_plans_deploy_line_runs_and_writes_the_stage_plan_recommended(tmp_path, capsys) -> None:
    result = plan("qwen-image-8gpu", 2, "edf@rlsched", [0], [1.0])
    argv = shlex.split(result["deploy_command"])
    assert argv[:2] == ["rlsched", "deploy"]
    argv[argv.index("--out") + 1] = str(tmp_path / "deploy.yaml")
    assert main(argv[1:]) == 0
    (stage,) = yaml.safe_load((tmp_path / "deploy.yaml").read_text())["stages"]
    keys = yaml.safe_load(result["stage_yaml"])
    row = next(r for r in result["rows"] if r["layout"] == result["recommended"])
    assert stage["num_replicas"] == keys["num_replicas"] == row["replicas"] and stage["devices"] == keys["devices"]
    parallel = stage.get("parallel_config", {"sequence_parallel_size": 1})
    assert parallel["sequence_parallel_size"] == row["sp_degree"]
    assert parallel.get("cfg_parallel_size", 1) == row["cfg_parallel"]
    assert stage["extras"]["rlsched"]["policy"] == "edf" and stage["extras"]["rlsched_router"]["router"] == "rlsched"
    assert stage["max_num_seqs"] == 4  # the scenario's, as simulated
    assert "vllm serve MODEL --omni --stage-overrides" in capsys.readouterr().out


def test_simulate_runs_a_multi_replica_stage_from_the_command_line() -> None:
    res = subprocess.run([sys.executable, "-m", "rlsched", "simulate", "--replicas", "2", "--duration", "600",
                          "--compare", "fifo,edf@least-work,static:agents/tuned/default.json@central", "--json"],
                         capture_output=True, text=True, timeout=300, check=True)
    rows = json.loads(res.stdout)
    assert [len(r["per_replica"]) for r in rows] == [2, 2, 2]
    assert all(sum(p["requests"] for p in r["per_replica"]) == r["requests_total"] for r in rows)
    one = subprocess.run([sys.executable, "-m", "rlsched", "simulate", "--duration", "600", "--json"],
                         capture_output=True, text=True, timeout=300, check=True)
    assert "per_replica" not in json.loads(one.stdout)  # one GPU, no router: the simulator as before


def test_plan_png_keeps_its_title_and_gives_the_recommended_layout_a_colour_of_its_own() -> None:
    """Caught: a long --policy cut the title off at both sides, and the recommended layout shared its colour
    with two others (8x SP1, 1x SP8 and 4x CFG2 hash to one colour)."""
    import matplotlib.pyplot as plt

    from rlsched.planning import plan_figure

    names = [f"{r}x SP{d}" for r, d in ((8, 1), (4, 2), (2, 4), (1, 8))] + ["4x CFG2", "2x SP2 CFG2", "1x SP4 CFG2"]
    rows = [{"layout": n, "by_load": {"0.5": 0.9 - 0.1 * i, "1": 0.6 - 0.05 * i}} for i, n in enumerate(names)]
    result = {"scenario": "qwen-image-8gpu", "gpus": 8, "rows": rows, "recommended": "8x SP1",
              "policy": "static:agents/tuned/a-tuned-table-with-a-long-name.json;lookahead=4@rlsched"}
    fig = plan_figure(result)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    assert fig.bbox.x0 <= title.x0 and title.x1 <= fig.bbox.x1 and title.y1 <= fig.bbox.y1
    (ax,) = fig.axes
    assert not ax.get_legend().get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    colours = {ln.get_label(): ln.get_color() for ln in ax.get_lines()}
    best = colours.pop("8x SP1 (recommended)")
    assert best not in colours.values() and len(colours) == len(names) - 1
    plt.close(fig)


def test_plan_for_a_fixed_traffic_serves_the_same_rate_on_every_gpu_count_and_picks_the_fewest_that_reach() -> None:
    """``plan --rate``: "2 or 4 GPUs for *my* traffic?" (issue 48): without it the traffic grows with --gpus."""
    from rlsched.planning import own_rate, plan_for_rate
    from rlsched.sim import load_scenario

    assert own_rate(load_scenario("default"), [0, 1, 2], "qwen-image-h200") == pytest.approx(0.05, rel=0.1)
    result = plan_for_rate("default", [4, 1, 2], 0.12, "edf@rlsched", [0], [1.0], 0.95,
                           profile="qwen-image-h200-vllm-omni")
    by = {r["gpus"]: r for r in result["by_gpus"]}
    assert sorted(by) == [1, 2, 4] and by[1]["mean"] < by[2]["mean"] < by[4]["mean"]  # the same traffic on more GPUs
    first = min(g for g, r in by.items() if r["reaches_target"])
    assert result["gpus"] == first and result["reaches_target"] and result["rate_rps"] == 0.12
    assert result["recommended"] == by[first]["layout"] and f"--devices {','.join(map(str, range(first)))}" \
        in result["deploy_command"]
    none = plan_for_rate("default", [1, 2], 0.12, "edf@rlsched", [0], [1.0], 1.0, profile="qwen-image-h200-vllm-omni")
    assert not none["reaches_target"] and none["gpus"] == max(none["by_gpus"], key=lambda r: r["mean"])["gpus"]


def test_plan_refuses_several_gpu_counts_without_a_rate_and_a_target_outside_0_1(tmp_path, capsys) -> None:
    from rlsched.planning import plan_for_rate

    assert main(["plan", "--gpus", "1,2", "--out", str(tmp_path / "p")]) != 0
    assert "--gpus: several GPU counts (1,2) answer a fixed traffic: give --rate too" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=re.escape("with --rate, give distinct GPU counts, not")):
        plan_for_rate("default", [2, 2], 0.1, "edf@rlsched", [0], [1.0], 0.9)
    with pytest.raises(ConfigError, match=re.escape("must be a class-weighted SLO attainment in (0, 1], not")):
        plan_for_rate("default", [2], 0.1, "edf@rlsched", [0], [1.0], 1.5)
    with pytest.raises(ConfigError, match="--rate: load 1 x --rate 1e.06 runs scenario 'default' at .* x its own rate, "
                                          "too much to simulate: .*; lower --rate or --loads"):
        plan_for_rate("default", [2], 1e6, "edf@rlsched", [0], [1.0], 0.9)
    quiet = tmp_path / "quiet.yaml"
    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "envs" / "default.yaml").read_text())
    spec.update(duration_s=1.0, arrival={"process": "poisson", "rate_rps": 1e-6})
    quiet.write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="--rate: scenario 'default' draws no arrivals at its own rate, so no rate "
                                          "scale reaches a traffic; give it an arrival rate first"):
        plan_for_rate(str(quiet), [1], 0.1, "edf@rlsched", [0], [1.0], 0.9)
