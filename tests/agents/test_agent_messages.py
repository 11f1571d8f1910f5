"""Each training-side message of docs/errors.md (tuning, labelling, the pick and route environments,
``export``), triggered by the smallest input that earns it (``tests/test_errors_doc.py`` checks every
message has such a test)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from rlsched.errors import CheckpointError, ConfigError


@pytest.mark.parametrize("kwargs, message", [
    ({"seeds": ()}, "tune.seeds: give at least one training seed"),
    ({"seeds": (10**6,)}, "are validation seeds and seeds >="),
    ({"rate_scales": (0.0,)}, "tune.rate_scales: give at least one load, each > 0"),
    ({"init": (0.0,)}, "numbers, got 1"),
])
def test_a_tune_spec_is_checked(kwargs: dict, message: str) -> None:
    from rlsched.agents.tune import TuneSpec

    with pytest.raises(ConfigError) as err:
        TuneSpec("default", **kwargs)
    assert message in str(err.value)


def test_labels_use_training_seeds() -> None:
    from rlsched.agents.labels import LabelTask

    with pytest.raises(ConfigError, match=r"label.seeds: labels use training seeds \[0"):
        LabelTask("default", 10**6, 1.0, "agents/tuned/default.json")


def test_the_environments_need_a_policy_for_each_scenario_or_pool() -> None:
    pytest.importorskip("gymnasium")
    from rlsched.envs.pick import DiTPickEnv
    from rlsched.envs.route import DiTRouteEnv

    with pytest.raises(ConfigError, match=r"pick.static: no tuned action file for \['default'\]"):
        DiTPickEnv(["default"], {})
    with pytest.raises(ConfigError, match=r"router.static: no replica policy for \['qwen-image-8gpu'\]"):
        DiTRouteEnv(["qwen-image-8gpu"], {})
    with pytest.raises(ConfigError, match="is a one-GPU scenario; the router needs replicas"):
        DiTRouteEnv(["default"], {"default": "agents/tuned/default.json"})  # at construction (issue 47)


def test_export_names_what_is_missing(tmp_path: Path) -> None:
    from rlsched.agents.export import actor_tensors, export_run

    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file; name the checkpoint folder to write"):
        export_run(tmp_path, tmp_path / "f")
    with pytest.raises(CheckpointError, match="not a run dir written by `rlsched train` \\(no config.yaml"):
        export_run(tmp_path, tmp_path / "out")
    (tmp_path / "config.yaml").write_text("{}\n")
    with pytest.raises(CheckpointError, match="no model.zip \\(--source: best, last or steps_N"):
        export_run(tmp_path, tmp_path / "out")
    with zipfile.ZipFile(tmp_path / "m.zip", "w") as zf:
        zf.writestr("other", b"")
    with pytest.raises(CheckpointError, match="not an SB3 model zip"):
        actor_tensors(tmp_path / "m.zip")


@pytest.mark.parametrize("data, message", [
    ({"ppo": {"activation": "gelu"}}, "ppo.activation: must be tanh or relu, not 'gelu'"),  # was at model build
    ({"ppo": {"n_steps": "512"}}, "x.yaml: ppo.n_steps: must be a number, got '512'"),
    ({"env": {"rate_scale_range": [0.5, 1.0, 1.5]}}, "x.yaml: env.rate_scale_range: Tuple should have at most 2"),
    ({"env": {"scenarios": "default"}}, "x.yaml: env.scenarios: Input should be a valid tuple"),  # was 7 one-letter
    ({"subproc": "no"}, "x.yaml: subproc: Input should be a valid boolean, got 'no'"),
    ({"eval_seeds": [900, True]}, "x.yaml: eval_seeds[1]: must be a number, got True"),
    ({"ppo": {"n_stpes": 512}}, "x.yaml: ppo.n_stpes: unknown key (value 512)"),
    ({"checkpoint_every": 0}, "agent.checkpoint_every: must be an integer >= 1, not 0"),
])
def test_a_knob_preset_is_checked_when_it_loads(data: dict, message: str) -> None:
    """The preset's pydantic models check every field's type at load, before anything is built (a
    string scenario was read as its letters, ``n_steps: "512"`` reached SB3); each refusal is a
    ConfigError naming the file and the field, never a pydantic ValidationError."""
    from rlsched.agents.config import agent_config_from_dict

    with pytest.raises(ConfigError) as err:
        agent_config_from_dict(data, "x.yaml")
    assert message in str(err.value)


def test_learn_timesteps_on_a_knob_preset_is_validated_again() -> None:
    from rlsched.agents.config import load_agent_config
    from rlsched.agents.recipe import with_timesteps

    assert with_timesteps(load_agent_config("ppo"), 64).timesteps == 64
    with pytest.raises(ConfigError, match=r"agent.timesteps \(--timesteps\): must be an integer >= 1, not 0"):
        with_timesteps(load_agent_config("ppo"), 0)
