"""Paths resolve beside the file that names them (issue 48): a scenario's profile and traces beside the
scenario, a recipe's scenarios and tuned files beside the recipe, from any working folder; ``deploy``
and ``plan`` write paths a server started in another folder reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlsched.resources import data_dir

ENVS = data_dir("envs")
TUNED = data_dir("agents") / "tuned" / "default.json"
SCENARIO = """name: shop
profile: gpu.yaml
serving: {mode: request, max_num_seqs: 4}
duration_s: 300
arrival: {process: trace, path: traces/arrivals.csv, time_scale: 0.02}
classes:
  realtime: {share: 0.3, slo_scale: 2.0}
  batch: {share: 0.7, slo_scale: 3.0}
mix:
  - {model: qwen-image, modality: image, height: 512, width: 512, steps: 20}
"""


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """``tmp_path/shop/shop.yaml`` naming ``gpu.yaml`` and ``traces/arrivals.csv`` beside it; the
    working folder is ``tmp_path/elsewhere``, where neither exists."""
    folder = tmp_path / "shop"
    (folder / "traces").mkdir(parents=True)
    shutil.copy(ENVS / "profiles" / "qwen-image-h200-vllm-omni.yaml", folder / "gpu.yaml")
    lines = (ENVS / "traces" / "azure_llm_2023_code.csv").read_text().splitlines()[:120]
    (folder / "traces" / "arrivals.csv").write_text("\n".join(lines) + "\n")
    (folder / "shop.yaml").write_text(SCENARIO)
    (tmp_path / "elsewhere").mkdir()
    return folder / "shop.yaml"


def _rlsched(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rlsched", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def test_simulate_and_eval_from_another_folder(shop: Path, tmp_path: Path) -> None:
    """The scenario's relative profile and trace are read beside it, not in the working folder."""
    cwd = tmp_path / "elsewhere"
    sim = _rlsched(cwd, "simulate", "--scenario", str(shop), "--compare", "fifo,edf", "--json")
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)
    out = tmp_path / "results"
    ev = _rlsched(cwd, "eval", "--scenarios", str(shop), "--policies", "fifo", "--seeds", "1000", "--loads", "1",
                  "--out", str(out), "--json")
    assert ev.returncode == 0, ev.stderr
    assert (out / "results.json").is_file()


def test_gym_make_with_an_absolute_scenario_from_another_folder(shop: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    gym = pytest.importorskip("gymnasium")
    import rlsched.envs  # noqa: F401  (registers the environment)

    monkeypatch.chdir(tmp_path / "elsewhere")
    env = gym.make("rlsched/DiTBatch-v0", scenario=str(shop))
    _, info = env.reset(seed=0)
    assert info["scenario"] == "shop"


def test_beside_wins_then_the_working_folder_then_the_shipped(shop: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from rlsched.sim import load_scenario

    folder = shop.parent
    sc = load_scenario(shop)
    assert sc.profile == str(folder / "gpu.yaml") and sc.arrival["path"] == str(folder / "traces" / "arrivals.csv")
    cwd = tmp_path / "elsewhere"
    shutil.copy(folder / "gpu.yaml", cwd / "cwd-gpu.yaml")
    (folder / "named.yaml").write_text(SCENARIO.replace("profile: gpu.yaml", "profile: cwd-gpu.yaml"))
    (folder / "shipped.yaml").write_text(SCENARIO.replace("profile: gpu.yaml", "profile: qwen-image-h200-vllm-omni"))
    monkeypatch.chdir(cwd)
    assert load_scenario(folder / "named.yaml").profile == "cwd-gpu.yaml"  # not beside: the working folder's
    assert load_scenario(folder / "shipped.yaml").profile == "qwen-image-h200-vllm-omni"  # a name: shipped
    assert load_scenario(folder / "named.yaml").requests(0)


def test_recipe_scenarios_and_tuned_files_beside_it(shop: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from rlsched.agents.config import load_agent_config
    from rlsched.agents.pick_train import load_pick_config
    from rlsched.agents.router_train import load_router_config

    folder = shop.parent
    shutil.copy(TUNED, folder / "tuned.json")
    (folder / "pick.yaml").write_text("name: p\nscenarios: [shop.yaml, default]\nstatic: tuned.json\n")
    (folder / "knob.yaml").write_text("kind: knob\nenv: {scenarios: [shop.yaml]}\n"
                                      "ppo: {init_action_from: [tuned.json]}\n")
    (folder / "router.yaml").write_text("kind: router\npools: [shop.yaml]\nstatic: {shop.yaml: tuned.json}\n"
                                        "durations: {shop.yaml: 600}\n")
    monkeypatch.chdir(tmp_path / "elsewhere")
    here = str(folder / "shop.yaml"), str(folder / "tuned.json")
    pick = load_pick_config(folder / "pick.yaml")
    assert pick.scenarios == (here[0], "default") and pick.static == here[1]
    knob = load_agent_config(folder / "knob.yaml")
    assert knob.env.scenarios == (here[0],) and knob.ppo.init_action_from == (here[1],)
    router = load_router_config(folder / "router.yaml")
    assert router.pools == (here[0],) and router.static == {here[0]: here[1]} and router.durations == {here[0]: 600}


def test_shipped_recipes_read_as_before() -> None:
    """Shipped presets name shipped data, never beside them: what they record (a checkpoint's content
    hash) is unchanged."""
    from rlsched.agents.paths import preset_paths_beside
    from rlsched.sim.yamlio import read_yaml

    for preset in sorted(data_dir("agents").glob("*.yaml")):
        data = read_yaml(preset)
        assert preset_paths_beside(data, preset.parent) == data, preset.name


def test_deploy_and_plan_write_absolute_paths(shop: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlsched.cli import main
    from rlsched.planning import Layout, deploy_command
    from rlsched.sim.simulator import ServingConfig

    folder = shop.parent
    shutil.copy(TUNED, folder / "tuned.json")
    monkeypatch.chdir(folder)
    assert main(["deploy", "--policy", "static:tuned.json", "--profile", "gpu.yaml", "--out", "d.yaml"]) == 0
    extras = yaml.safe_load((folder / "d.yaml").read_text())["stages"][0]["extras"]["rlsched"]
    assert extras["policy"] == f"static:{folder / 'tuned.json'}" and extras["profile"] == str(folder / "gpu.yaml")
    line = deploy_command(Layout(2, 1), 2, "static:tuned.json@rlsched", "gpu.yaml", ServingConfig("request", 4))
    assert f"static:{folder / 'tuned.json'}" in line and f"--profile {folder / 'gpu.yaml'}" in line
    shipped = deploy_command(Layout(2, 1), 2, "static:agents/tuned/default.json@rlsched", "qwen-image-h200-vllm-omni",
                             ServingConfig("request", 4))
    assert "static:agents/tuned/default.json " in shipped  # shipped data is found from any folder: as written


def test_a_shipped_profile_path_stays_as_written_and_loads_from_any_folder(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``deploy`` keeps ``envs/profiles/NAME.yaml`` as written (shipped data): the plugin, started in another
    folder, must find it, as it finds ``agents/tuned/…`` and ``checkpoints/…``."""
    from rlsched.sim.cost import load_profile, portable_profile

    shipped = "envs/profiles/qwen-image-h200-vllm-omni.yaml"
    monkeypatch.chdir(ENVS.parent)
    assert portable_profile(shipped) == shipped
    monkeypatch.chdir(tmp_path)
    assert load_profile(shipped).name == load_profile("qwen-image-h200-vllm-omni").name
