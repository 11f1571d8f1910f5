"""``rlsched learn --agent PRESET`` runs the recipe the preset declares by ``kind``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsched.agents.pick_train import learn, load_pick_config
from rlsched.agents.recipe import RECIPES, recipe_of
from rlsched.agents.router_train import learn_router, load_router_config
from rlsched.errors import ConfigError
from rlsched.resources import data_dir


def test_each_shipped_preset_reaches_its_own_recipe() -> None:
    assert recipe_of(data_dir("agents") / "pick.yaml") == (load_pick_config, learn)  # no kind: the candidate policy
    assert recipe_of(data_dir("agents") / "router.yaml") == (load_router_config, learn_router)


def test_an_unknown_kind_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    bad = tmp_path / "knob.yaml"
    bad.write_text("kind: ppo\n")
    with pytest.raises(ConfigError, match=f"'ppo' is not a recipe \\(one of {', '.join(RECIPES)}\\)"):
        recipe_of(bad)


def test_the_learn_command_reads_a_router_preset_as_the_router_recipe(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from rlsched.cli import main

    preset = tmp_path / "x.yaml"
    preset.write_text("kind: router\npools: [default]\n")  # without its replica policies
    assert main(["learn", "--agent", str(preset), "--run-dir", str(tmp_path / "run")]) != 0
    # the router's config asks for its pools' replica policies; the candidate policy's would refuse "pools"
    assert "static: required key is missing" in capsys.readouterr().err


def test_the_knob_preset_reaches_the_knob_recipe() -> None:
    from rlsched.agents.train import learn_knob, load_knob_config

    assert recipe_of(data_dir("agents") / "ppo.yaml") == (load_knob_config, learn_knob)
    assert load_knob_config(data_dir("agents") / "ppo.yaml").name == "ppo-default"


def test_the_knob_policy_end_to_end_through_learn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``rlsched learn --agent KNOB_PRESET --out CK``: trained, validated, exported, served as ``rl:CK``."""
    import yaml

    from rlsched.cli import main
    from rlsched.policies import make_policy
    from tests.agents.test_training import TINY

    preset = tmp_path / "knob.yaml"
    preset.write_text(yaml.safe_dump({"kind": "knob", **TINY}))
    out = tmp_path / "ck"
    assert main(["learn", "--agent", str(preset), "--run-dir", str(tmp_path / "run"), "--out", str(out),
                 "--no-progress", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chosen"] == "best" and report["checkpoint"] == str(out)
    assert make_policy(f"rl:{out}").name.startswith("rl")


def test_a_knob_preset_refuses_another_kind_and_the_worker_options() -> None:
    from rlsched.agents.config import agent_config_from_dict
    from rlsched.agents.train import load_knob_config

    with pytest.raises(ConfigError, match=r"kind 'router': a PPO agent preset is the knob policy's \(kind: knob\)"):
        agent_config_from_dict({"kind": "router"}, "x.yaml")
    preset = data_dir("agents") / "ppo.yaml"
    for option in ({"workers": 2}, {"ray": "auto"}):
        with pytest.raises(ConfigError, match=r"the knob recipe steps its environments itself \(n_envs\)"):
            load_knob_config(preset, **option)


def test_train_on_a_scenario_without_a_tuned_action_says_how_to_make_one(tmp_path: Path) -> None:
    """Said before the environments start, with the command that makes the missing file."""
    from rlsched.agents.config import load_agent_config
    from rlsched.agents.train import train

    scenario = tmp_path / "my-shop.yaml"
    scenario.write_text((data_dir("envs") / "default.yaml").read_text().replace("name: default", "name: shop", 1))
    cfg = load_agent_config(data_dir("agents") / "ppo.yaml", scenarios=[str(scenario)])
    with pytest.raises(ConfigError, match=r"behaviour cloning needs a tuned action for .*my-shop.yaml") as err:
        train(cfg, tmp_path / "run", progress=False)
    assert str(err.value).endswith("make one with rlsched tune --scenario SCENARIO --out agents/tuned/NAME.json "
                                   "(NAME: the scenario's file stem) and list it here, or set "
                                   "ppo.bc_steps_per_scenario: 0")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("preset", ["pick.yaml", "router.yaml", "ppo.yaml"])
def test_smoke_cuts_every_budget_of_each_shipped_recipe_and_keeps_its_inputs(preset: str) -> None:
    """``learn --smoke`` (issue 48: how to cut a recipe's budget lived only in a test)."""
    from rlsched.agents.recipe import SMOKE, recipe_kind, with_smoke

    path = data_dir("agents") / preset
    load, _ = recipe_of(path)
    full = load(path)
    smoke = with_smoke(full, recipe_kind(path))
    cut, kept = smoke.model_dump(mode="json"), full.model_dump(mode="json")
    for key, value in SMOKE[recipe_kind(path)].items():
        if not isinstance(value, dict):
            assert cut[key] == value, key
            cut[key] = kept[key] = None
            continue
        for field, small in value.items():
            assert cut[key][field] == small, (key, field)
            cut[key][field] = kept[key][field] = None
    assert cut == kept  # scenarios, pools, tuned files, seeds of the run: the user's


def test_learn_smoke_runs_the_shipped_knob_recipe_end_to_end_and_says_so(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from rlsched.cli import main

    out = tmp_path / "ck"
    assert main(["learn", "--agent", str(data_dir("agents") / "ppo.yaml"), "--smoke", "--run-dir",
                 str(tmp_path / "run"), "--out", str(out), "--no-progress", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["smoke"] is True and (out / "policy.json").exists()
