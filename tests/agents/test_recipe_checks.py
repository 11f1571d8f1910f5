"""``rlsched learn --agent``: every field of a recipe preset checked before any work (issue 47). Each
preset below used to fail only after minutes or hours of labelling (or with an AttributeError traceback);
here the recipe's ``learn`` is replaced by one that fails the test if it is ever reached."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlsched.cli import main

AGENTS = Path(__file__).resolve().parents[2] / "agents"
PICK = yaml.safe_load((AGENTS / "pick.yaml").read_text())
ROUTER = yaml.safe_load((AGENTS / "router.yaml").read_text())
KNOB = yaml.safe_load((AGENTS / "ppo.yaml").read_text())


def _with(base: dict, path: str, value: object) -> dict:
    out = yaml.safe_load(yaml.safe_dump(base))
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


@pytest.fixture(autouse=True)
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlsched.agents import pick_train, router_train, train

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the recipe started its work with a preset it should have refused")

    for module, name in ((pick_train, "learn"), (router_train, "learn_router"), (train, "learn_knob"),
                         (train, "train")):
        monkeypatch.setattr(module, name, work)


@pytest.mark.parametrize("preset, where, message", [
    ([PICK], "recipe.yaml", "a preset is a mapping of fields (name: value), not a list"),
    (_with(PICK, "imitation.margins", []), "imitation.margins",
     "must list at least one margin, each a finite number >= 0, not []"),
    (_with(PICK, "imitation.margins", [1.0, -2.0]), "imitation.margins", "each a finite number >= 0"),
    (_with(PICK, "rate_scale", [1.5, 0.5]), "rate_scale", "must be [low, high] with low <= high, not [1.5, 0.5]"),
    (_with(PICK, "rate_scale", [-1.0, 1.5]), "rate_scale", "must list rate scales, each a finite number >= 1e-09"),
    (_with(PICK, "validation.rate_scales", [-0.5, 1.0]), "validation.rate_scales", "must list rate scales"),
    (_with(PICK, "validation.rate_scales", []), "validation.rate_scales", "must list rate scales"),
    (_with(PICK, "ppo.window_s", [2400, 1200]), "ppo.window_s", "low <= high"),
    (_with(PICK, "static", "nowhere/{scenario}.json"), "static (default)", "tuned action file not found"),
    (_with(PICK, "scenarios", ["default", "no-such-scenario"]), "scenarios", "no-such-scenario"),
    (_with(ROUTER, "static.azure-8gpu", "nowhere.json"), "static.azure-8gpu", "tuned action file not found"),
    (_with(ROUTER, "rate_scale", [2.0, 1.0]), "rate_scale", "low <= high"),
    (_with(KNOB, "env.rate_scale_range", [1.5, -0.5]), "env.rate_scale_range", "must list rate scales"),
    (_with(KNOB, "eval_rate_scale", -1.0), "eval_rate_scale", "must list rate scales"),
    (_with(KNOB, "ppo.init_action_from", ["nowhere.json"]), "ppo.init_action_from[0]", "tuned action file"),
    (_with(KNOB, "eval_baselines", ["fifo", "edff"]), "eval_baselines", "unknown policy 'edff'"),
])
def test_a_bad_recipe_field_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       preset: object, where: str, message: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(preset))
    run = tmp_path / "run"
    assert main(["learn", "--agent", str(path), "--run-dir", str(run), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlsched: error: ") and where in err and message in err, err
    assert not run.exists()


def test_the_shipped_presets_pass_the_checks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for preset in ("pick.yaml", "router.yaml", "ppo.yaml"):
        with pytest.raises(AssertionError, match="started its work"):
            main(["learn", "--agent", str(AGENTS / preset), "--run-dir", str(tmp_path / "run"), "--json"])
