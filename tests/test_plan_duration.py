"""``rlsched plan --duration``: every layout on a window of arrivals it is given (issue 50: a plan of
hundreds of GPUs at the scenario's two hours of arrivals took hours)."""

from __future__ import annotations

import json

from rlsched.cli import main
from rlsched.planning import plan
from rlsched.routing.routers import run_spec
from rlsched.sim import load_profile, load_scenario
from rlsched.sim.layout import at_layout
from rlsched.sim.metrics import summarize_stage
from rlsched.sim.stage import Stage

PROFILE = "qwen-image-h200-vllm-omni"


def test_plan_runs_every_layout_on_the_window_it_is_given() -> None:
    result = plan("default", 2, "fifo@round-robin", [0], [1.0], profile=PROFILE, cfg_degrees=(1,), duration_s=90)
    assert result["duration_s"] == 90 and result["rows"][0]["layout"] == "2x SP1"
    sc, cost = load_scenario("default"), load_profile(PROFILE)
    stage = Stage.uniform(sc.requests(0, rate_scale=2.0, duration_s=90, cost=cost), 2, at_layout(cost, 1, 1),
                          sc.serving, seed=0)
    run_spec(stage, "fifo@round-robin")
    assert result["rows"][0]["by_load"]["1"] == summarize_stage(stage)["weighted_slo_attainment"]
    assert plan("default", 2, "fifo@round-robin", [0], [1.0], profile=PROFILE, cfg_degrees=(1,))["duration_s"] == \
        sc.duration_s


def test_plan_cli_takes_duration(tmp_path, capsys) -> None:
    out = tmp_path / "plan"
    assert main(["plan", "--gpus", "2", "--profile", PROFILE, "--seeds", "0", "--loads", "1", "--cfg-degrees", "1",
                 "--routers", "", "--duration", "60", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["duration_s"] == 60
    assert json.loads((out / "plan.json").read_text())["duration_s"] == 60
