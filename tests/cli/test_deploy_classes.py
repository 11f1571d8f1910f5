"""``rlsched deploy --classes SCENARIO`` (issue 48): the scenario's own classes, with their weights and tiers,
go into the plugin's settings, and an untagged request's class defaults to the most common one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlsched.cli import main
from rlsched.integrations.vllm_omni.config import PluginConfig

FOUR = Path(__file__).resolve().parents[1] / "data" / "four-classes.yaml"


def _settings(path: Path) -> PluginConfig:
    stage = yaml.safe_load(path.read_text())["stages"][0]
    return PluginConfig.from_extras(stage["extras"])


def test_deploy_writes_the_scenarios_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--policy", "priority", "--classes", str(FOUR), "--out", str(tmp_path / "d.yaml")]) == 0
    cfg = _settings(tmp_path / "d.yaml")
    assert cfg.default_priority == "free"
    assert {c: (i.weight, i.tier) for c, i in cfg.class_table.items()} == {
        "paid": (4.0, "realtime"), "team": (2.0, "realtime"), "free": (1.0, "batch"), "bulk": (0.5, "background")}
    assert cfg.slo_scale("bulk") == 20.0 and cfg.class_of("PAID") == "paid" and cfg.class_of("gold") is None


def test_shipped_classes_write_nothing_new(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--policy", "edf", "--out", str(tmp_path / "d.yaml")]) == 0
    extras = yaml.safe_load((tmp_path / "d.yaml").read_text())["stages"][0]["extras"]["rlsched"]
    assert "classes" not in extras and "default_priority" not in extras


def test_a_default_outside_the_classes_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--policy", "edf", "--classes", str(FOUR), "--default-priority", "batch",
                 "--out", str(tmp_path / "d.yaml")]) == 2
    assert "rlsched: error: --default-priority: 'batch' is not a class of" in capsys.readouterr().err


def test_plans_deploy_line_names_the_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--gpus", "1", "--seeds", "0", "--loads", "1", "--policy", "edf", "--routers", "", "--json"]
    assert main([*argv, "--scenario", str(FOUR), "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    line = (tmp_path / "a" / "deploy.sh").read_text()
    assert f"--classes {FOUR.resolve()}" in line
    assert main([*argv, "--scenario", "default", "--out", str(tmp_path / "b")]) == 0
    assert "--classes" not in (tmp_path / "b" / "deploy.sh").read_text()


def test_deploy_carries_the_quotas_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(FOUR.read_text())
    data["classes"]["bulk"]["quota"] = 0.2
    data["serving"]["quota_window_s"] = 300
    scenario = tmp_path / "capped.yaml"
    scenario.write_text(yaml.safe_dump(data))
    assert main(["deploy", "--policy", "edf", "--classes", str(scenario), "--out", str(tmp_path / "d.yaml")]) == 0
    cfg = _settings(tmp_path / "d.yaml")
    assert cfg.quotas == (("bulk", 0.2),) and cfg.quota_window_s == 300
    uncapped = tmp_path / "u.yaml"
    assert main(["deploy", "--policy", "edf", "--classes", str(FOUR), "--out", str(uncapped)]) == 0
    extras = yaml.safe_load(uncapped.read_text())["stages"][0]["extras"]["rlsched"]
    assert "quota_window_s" not in extras and all("quota" not in v for v in extras["classes"].values())
