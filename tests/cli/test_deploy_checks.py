"""``rlsched deploy`` refuses a config vLLM-Omni would silently run without the plugin (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlsched.cli import main
from rlsched.integrations.vllm_omni.config import PluginConfig

BASE = """\
async_chunk: false
stages:
  - stage_id: 0
    max_num_seqs: 1
  - stage_id: 1
    max_num_seqs: 4
    devices: "0"
"""


def _deploy(tmp_path: Path, *args: str) -> int:
    return main(["deploy", "--policy", "edf", "--out", str(tmp_path / "deploy.yaml"), *args])


@pytest.mark.parametrize(("args", "message"), [
    (["--stage-id", "99", "--base-config", "base.yaml"],
     "--stage-id: 99 is not a stage of --base-config base.yaml (its stages: 0, 1)"),
    (["--stage-id", "99"], "--stage-id: 99 without --base-config"),
    (["--base-config", "nosuch.yaml"], "--base-config: nosuch.yaml: no such file"),
    (["--base-config", "broken.yaml"], "broken.yaml: cannot read it as YAML"),
    (["--base-config", "list.yaml"], "expected a mapping with 'stages'"),
    (["--decision-budget-ms", "200"], "--decision-budget-ms: 200 exceeds --decision-deadline-ms 100"),
    (["--decision-budget-ms", "5", "--decision-deadline-ms", "2"], "--decision-budget-ms: 5 exceeds"),
    (["--router", "least-work", "--router-budget-ms", "5", "--router-deadline-ms", "2"],
     "--router-budget-ms: 5 exceeds --router-deadline-ms 2"),
])
def test_deploy_refuses_what_vllm_omni_would_drop_or_cannot_read(tmp_path: Path, args: list[str], message: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Bug: ``--stage-id 99`` wrote a stage vLLM-Omni drops (no plugin runs); ``--base-config
    nosuch.yaml`` and a budget above the deadline were written unchecked."""
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "broken.yaml").write_text("stages: [\n")
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert _deploy(tmp_path, *args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "deploy.yaml").exists()


def test_a_router_budget_above_the_default_deadline_raises_the_deadline(tmp_path: Path) -> None:
    """Issue 47: a router budget above its deadline is refused in ``extras.rlsched_router``; deploy's
    default deadline follows a higher ``--router-budget-ms`` (the e2e tests deploy a 100 ms budget)."""
    from rlsched.integrations.vllm_omni.config import RouterConfig

    assert _deploy(tmp_path, "--router", "least-work", "--router-budget-ms", "100") == 0
    extras = yaml.safe_load((tmp_path / "deploy.yaml").read_text())["stages"][0]["extras"]
    assert extras["rlsched_router"] == {"router": "least-work", "budget_ms": 100.0, "deadline_ms": 100.0}
    assert RouterConfig.from_extras(extras, {}).deadline_ms == 100.0


def test_a_stage_of_the_base_config_is_written_with_it(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    assert _deploy(tmp_path, "--stage-id", "1", "--base-config", "base.yaml") == 0
    doc = yaml.safe_load((tmp_path / "deploy.yaml").read_text())
    assert doc["base_config"] == "base.yaml" and doc["stages"][0]["stage_id"] == 1  # beside the YAML: as given


def test_a_base_config_found_from_here_is_written_as_an_absolute_path(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM-Omni reads base_config relative to the deploy YAML's folder, so a path that only
    exists from the working directory is written absolute."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text(BASE)
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["deploy", "--policy", "edf", "--out", "out/deploy.yaml", "--base-config", "configs/base.yaml"]) == 0
    doc = yaml.safe_load((tmp_path / "out" / "deploy.yaml").read_text())
    assert doc["base_config"] == str(tmp_path / "configs" / "base.yaml")


def test_the_base_configs_own_base_is_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "root.yaml").write_text("stages:\n  - stage_id: 2\n")
    (tmp_path / "mid.yaml").write_text("base_config: root.yaml\nstages:\n  - stage_id: 0\n")
    assert _deploy(tmp_path, "--stage-id", "2", "--base-config", "mid.yaml") == 0
    (tmp_path / "loop.yaml").write_text("base_config: loop.yaml\nstages: []\n")
    assert _deploy(tmp_path, "--base-config", "loop.yaml") == 2
    assert "loops back to itself" in capsys.readouterr().err


def test_deploy_out_that_is_a_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--policy", "edf", "--out", str(tmp_path)]) == 2
    assert f"--out: {tmp_path} is a folder" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "publish"), [
    ([], False),
    (["--router", "least-work"], True),
    (["--router", "round-robin"], True),
    (["--policy", "sjf@rlsched"], True),
    (["--policy", "edf@central"], True),
])
def test_a_router_gets_the_replicas_published_state(tmp_path: Path, args: list[str], publish: bool) -> None:
    """Whenever deploy writes a router (extras.rlsched_router), the replicas publish their scheduler state
    to it (extras.rlsched.publish_state); without one the setting stays off and unwritten."""
    assert _deploy(tmp_path, "--replicas", "2", "--devices", "0,1", *args) == 0
    extras = yaml.safe_load((tmp_path / "deploy.yaml").read_text())["stages"][0]["extras"]
    assert ("rlsched_router" in extras) is publish
    assert extras["rlsched"].get("publish_state", False) is publish
    assert PluginConfig.from_extras(extras, {}).publish_state is publish
