"""The three envs as a Gymnasium user makes them: ``gymnasium.make("rlsched.envs:ID")`` (the module form
imports and registers them) with no keyword arguments, and a scenario file whose YAML name is not its
file name."""

from __future__ import annotations

from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium")

from rlsched.envs import ENV_ID, PICK_ENV_ID, ROUTE_ENV_ID  # noqa: E402
from rlsched.resources import data_dir  # noqa: E402


@pytest.mark.parametrize("env_id", [ENV_ID, PICK_ENV_ID, ROUTE_ENV_ID])
def test_every_env_is_made_by_its_module_form_with_defaults(env_id: str) -> None:
    env = gym.make(f"rlsched.envs:{env_id}")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs) and isinstance(reward, float)
    env.close()


def test_the_pick_env_on_a_scenario_file_named_otherwise(tmp_path: Path) -> None:
    """The tuned action is keyed by the scenario as given (the file), not by the YAML's ``name``
    (a KeyError at the first reset before)."""
    scenario = tmp_path / "my-images.yaml"
    scenario.write_text((data_dir("envs") / "default.yaml").read_text().replace("name: default", "name: shop", 1))
    env = gym.make(PICK_ENV_ID, scenario=str(scenario), static={str(scenario): "agents/tuned/default.json"},
                   window_s=(900.0, 1200.0))
    obs, info = env.reset(seed=0)
    assert info["scenario"] == "shop" and env.observation_space.contains(obs)
    env.close()


def test_the_docs_block_runs() -> None:
    """docs/learning.md's Gymnasium block, executed as written."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "learning.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S)
    assert block and "gym.make" in block.group(1)
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "docs/learning.md", "exec"), namespace)  # noqa: S102
    namespace["env"].reset(seed=0)  # type: ignore[attr-defined]


# What each id stands for: its observation schema and spaces. A change here is a new environment for
# a Gymnasium user (a policy trained on the old spaces no longer fits): bump the id's version with it.
SPACES = {ENV_ID: ("dit-batch-obs/2", (149,), "Box(-1.0, 1.0, (9,), float32)"),
          PICK_ENV_ID: ("dit-pick-obs/1", (149,), "Discrete(8)"),
          ROUTE_ENV_ID: ("dit-route-obs/3", (122,), "Discrete(8)")}


@pytest.mark.parametrize("env_id", list(SPACES))
def test_an_ids_spaces_are_what_its_version_stands_for(env_id: str) -> None:
    from rlsched.learned.observation import SCHEMA_VERSION
    from rlsched.learned.pick import PICK_SCHEMA
    from rlsched.learned.router import ROUTE_SCHEMA

    schema = {ENV_ID: SCHEMA_VERSION, PICK_ENV_ID: PICK_SCHEMA, ROUTE_ENV_ID: ROUTE_SCHEMA}[env_id]
    env = gym.make(f"rlsched.envs:{env_id}")
    assert (schema, env.observation_space.shape, str(env.action_space)) == SPACES[env_id], \
        f"{env_id}'s spaces changed: register it as the next version (-v1, ...) and update SPACES"
    env.close()
