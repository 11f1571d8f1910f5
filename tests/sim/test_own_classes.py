"""A scenario's own classes (issue 48, "Your own classes"): names of the user's, each with its share, SLO
scale, weight and tier; the weighted SLO uses those weights; every table, metric and plot reports per class
name; heuristics read the weights, the policies tuned or trained on the shipped tiers read each class as its
tier, and say so."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlsched.cli import main
from rlsched.errors import ConfigError, InvalidRequest
from rlsched.evaluation import RunSpec, simulate
from rlsched.policies import make_policy
from rlsched.sim import Simulator
from rlsched.sim.classes import SHIPPED, default_tiers, mapping_note
from rlsched.sim.metrics import summarize
from rlsched.sim.request import Request
from rlsched.sim.scenario import load_scenario, scenario_from_dict

FOUR = Path(__file__).resolve().parents[1] / "data" / "four-classes.yaml"
NAMES = ["paid", "team", "free", "bulk"]


def _data(**classes: Any) -> dict[str, Any]:
    data = yaml.safe_load(FOUR.read_text())
    if classes:
        data["classes"] = classes
    return data


def test_requests_carry_their_class_name_weight_and_tier() -> None:
    sc = load_scenario(FOUR)
    reqs = sc.requests(seed=0, duration_s=1800)
    seen = {r.priority: (r.weight, r.tier) for r in reqs}
    assert seen == {"paid": (4.0, "realtime"), "team": (2.0, "realtime"), "free": (1.0, "batch"),
                    "bulk": (0.5, "background")}


def test_default_tiers_by_weight_rank() -> None:
    assert default_tiers([4, 2, 1, 0.5]) == ["realtime", "realtime", "batch", "background"]
    assert default_tiers([1, 5]) == ["batch", "realtime"]
    assert default_tiers([1]) == ["realtime"]
    assert default_tiers([1.0] * 8) == ["realtime"] * 3 + ["batch"] * 3 + ["background"] * 2


def test_weighted_slo_uses_the_scenario_weights() -> None:
    sc = load_scenario(FOUR)
    sim = Simulator(sc.requests(seed=1, duration_s=1800), sc.cost(), sc.serving).run(make_policy("fifo"))
    m = summarize(sim, NAMES)
    assert list(m["per_class"]) == NAMES
    w = {"paid": 4.0, "team": 2.0, "free": 1.0, "bulk": 0.5}
    att = {c: m["per_class"][c]["slo_attainment"] for c in NAMES}
    assert m["weighted_slo_attainment"] == pytest.approx(sum(w[c] * att[c] for c in NAMES) / sum(w.values()))
    # heaviest first when the caller names no order
    assert list(summarize(sim)["per_class"]) == NAMES


def test_a_class_without_requests_keeps_its_row() -> None:
    sc = scenario_from_dict(_data(paid={"share": 1, "slo_scale": 2}, idle={"share": 1e-9, "slo_scale": 2}), "x.yaml")
    _, m = simulate(RunSpec("x", "fifo", 0, 1.0, 600), sc)
    assert m["per_class"]["idle"]["count"] == 0 and list(m["per_class"]) == ["paid", "idle"]


def test_strict_priority_serves_the_heaviest_class_first() -> None:
    reqs = [Request(i, 0.0, "qwen-image", "image", 512, 512, 1, 20, True, c, 1e9, -1, "batch", w)
            for i, (c, w) in enumerate([("bulk", 0.5), ("free", 1.0), ("paid", 4.0), ("team", 2.0)])]
    sc = load_scenario(FOUR)
    sim = Simulator(reqs, sc.cost(), sc.with_serving(max_num_seqs=1).serving).run(make_policy("priority"))
    order = sorted(sim.records.values(), key=lambda r: r.first_scheduled_s)
    assert [r.request.priority for r in order] == ["paid", "team", "free", "bulk"]


@pytest.mark.parametrize("policy", ["edf", "priority", "seed-composite", "static:agents/tuned/default.json",
                                    "rl:checkpoints/default", "pick:checkpoints/pick", "edf@central"])
def test_every_kind_of_policy_serves_own_classes(policy: str) -> None:
    _, m = simulate(RunSpec(str(FOUR), policy, 0, 1.0, 900, replicas=2 if "@" in policy else 1), load_scenario(FOUR))
    assert list(m["per_class"]) == NAMES and sum(m["per_class"][c]["count"] for c in NAMES) == m["requests_total"]
    assert 0 <= m["weighted_slo_attainment"] <= 1


def test_the_mapping_is_said() -> None:
    note = mapping_note(load_scenario(FOUR).class_table)
    assert "paid as realtime" in note and "bulk as background" in note and "free as batch" in note
    assert mapping_note(SHIPPED) == ""


@pytest.mark.parametrize(("classes", "key", "reason"), [
    ({f"c{i}": {"share": 1, "slo_scale": 2} for i in range(9)}, "classes", "at most 8"),
    ({"1st": {"share": 1, "slo_scale": 2}}, "classes.1st (key)", "a class name is a letter"),
    ({"paid": {"share": 1, "slo_scale": 2, "tier": "gold"}}, "classes.paid.tier", "realtime"),
    ({"paid": {"share": 1, "slo_scale": 2, "weight": 0}}, "classes.paid.weight", "greater than 0"),
    ({"paid": {"share": 1, "slo_scale": 2, "quota": 0}}, "classes.paid.quota", "greater than 0"),
    ({"paid": {"share": 1, "slo_scale": 2, "quota": 1.01}}, "classes.paid.quota", "less than or equal to 1"),
])
def test_bad_classes_name_the_key(classes: dict[str, Any], key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(_data(**classes), "x.yaml")
    assert str(err.value).startswith(f"x.yaml: {key}") and reason in str(err.value), str(err.value)


def test_a_request_of_an_unknown_tier_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="tier"):
        Request(0, 0.0, "m", "image", 1, 1, 1, 1, True, "paid", 1.0, -1, "gold", 1.0)
    with pytest.raises(InvalidRequest, match="priority"):  # a class of its own needs its tier
        Request(0, 0.0, "m", "image", 1, 1, 1, 1, True, "paid", 1.0)


def test_simulate_table_has_a_column_per_class(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--scenario", str(FOUR), "--compare", "edf,static:agents/tuned/default.json",
            "--duration", "600"]
    assert main([*argv, "--markdown"]) == 0
    out = capsys.readouterr()
    head = out.out.splitlines()[0]
    assert "| paid | team | free | bulk |" in head and "realtime" not in head
    assert "paid as realtime" in out.err
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(list(r["per_class"]) == NAMES for r in rows)


def test_eval_reports_per_class_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--scenarios", str(FOUR), "--policies", "edf,rl:checkpoints/default", "--seeds", "1000",
                 "--loads", "1", "--duration", "600", "--out", str(tmp_path / "ev"), "--json"]) == 0
    capsys.readouterr()
    md = (tmp_path / "ev" / "results.md").read_text()
    assert "| policy | load | paid | team | free | bulk |" in md and "paid as realtime" in md
    cells = json.loads((tmp_path / "ev" / "results.json").read_text())["cells"]
    assert all(f"per_class.{c}.slo_attainment" in cell["mean"] for cell in cells for c in NAMES)


def test_cdf_plot_has_a_panel_per_class() -> None:
    from rlsched.evaluation.plots import class_names
    from rlsched.evaluation.runs import Grid

    grid = Grid([{"per_class": dict.fromkeys(NAMES, {})}], {}, {}, 1.0)
    assert class_names(grid) == NAMES


def test_shipped_names_keep_their_weights_and_tiers() -> None:
    sc = load_scenario("default")
    assert sc.class_table == SHIPPED
    assert all(math.isclose(r.weight, {"realtime": 3, "batch": 2, "background": 1}[r.priority]) and
               r.tier == r.priority for r in sc.requests(seed=0, duration_s=600))


def test_a_request_without_a_class_name_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="must be a class name"):
        Request(0, 0.0, "m", "image", 1, 1, 1, 1, True, "", 1.0, -1, "batch", 1.0)
