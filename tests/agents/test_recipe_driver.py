"""One recipe driver: ``recipe.learn`` runs every learned recipe through its ``RecipeTask``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sb3_contrib")

from rlsched.agents import recipe  # noqa: E402
from rlsched.agents.pick_train import PickTask, load_pick_config  # noqa: E402
from rlsched.agents.router_train import RouterTask, load_router_config  # noqa: E402
from rlsched.resources import data_dir  # noqa: E402

TINY = ("scenarios: [default]\n"
        "labels: {episodes_per_scenario: 2, dagger_rounds: 1, dagger_episodes_per_scenario: 1, duration_s: 600,\n"
        "         every: 3}\n"
        "imitation: {epochs: 2, margins: [1.0]}\n"
        "ppo: {timesteps: 64, n_steps: 64, batch_size: 64, n_epochs: 1, window_s: [300, 600], burn_in_s: 60}\n"
        "validation: {seeds: [900], rate_scales: [1.0], duration_s: 300}\nworkers: 1\n")


class Recording(PickTask):
    """The candidate policy's task, each hook the driver calls recorded in order."""

    rule = "a rule of this test's own"

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.calls: list[str] = []

    def label(self, run: Path, name: str, episodes: int, seed0: int, scorer: Any, progress: bool) -> Path:
        self.calls.append(f"label {name} {episodes}@{seed0} {'dagger' if scorer else 'heuristic'}")
        return super().label(run, name, episodes, seed0, scorer, progress)

    def validate(self, scorers: dict[str, Any]) -> Any:
        self.calls.append("validate " + ",".join(scorers))
        return super().validate(scorers)

    def fine_tune(self, net: Any, run: Path, progress: bool) -> Any:
        self.calls.append("fine_tune")
        return super().fine_tune(net, run, progress)

    def review(self, nets: dict[str, Any], files: list[Path], validation: Any, log: Any) -> dict[str, Any]:
        self.calls.append(f"review {','.join(nets)} {len(files)} files")
        return {"reviewed": sorted(validation)}

    def export(self, net: Any, out: Path, report: dict[str, Any], origin: dict[str, Any]) -> Path:
        self.calls.append(f"export {report['chosen']}")
        return super().export(net, out, report, origin)


def test_the_driver_runs_a_task_s_hooks_in_recipe_order_and_reports_what_it_adds(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    task = Recording(load_pick_config(tmp_path / "tiny.yaml"))
    report = recipe.learn(task, tmp_path / "run", tmp_path / "ck", progress=False)
    assert task.calls == ["label round0 2@0 heuristic", "label dagger1 1@2 dagger", "validate imitation@1",
                          "fine_tune", "validate ppo", "review imitation@1,ppo 2 files", f"export {report['chosen']}"]
    assert report["reviewed"] == ["imitation@1", "ppo"] and report["selection"]["rule"] == Recording.rule
    assert report["labels"] == ["round0.npz", "dagger1.npz"] and (tmp_path / "run" / "report.json").is_file()
    assert (tmp_path / "ck" / "policy.json").is_file()
    assert any((tmp_path / "run" / "tb" / "imitation").iterdir())  # the task's TensorBoard folder


def test_no_ppo_steps_no_fine_tuning(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(TINY)
    cfg = load_pick_config(tmp_path / "tiny.yaml")
    task = Recording(cfg.model_copy(update={"ppo": cfg.ppo.model_copy(update={"timesteps": 0})}))
    report = recipe.learn(task, tmp_path / "run", None, progress=False)
    assert "fine_tune" not in task.calls and not any(c.startswith("export") for c in task.calls)
    assert set(report["validation"]) == {"imitation@1"}


def test_both_recipes_are_tasks_of_the_one_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rlsched.agents import pick_train, router_train

    seen: list[Any] = []
    monkeypatch.setattr(recipe, "learn", lambda task, run, out, progress: seen.append(task) or {})
    pick = load_pick_config(data_dir("agents") / "pick.yaml")
    router = load_router_config(data_dir("agents") / "router.yaml")
    pick_train.learn(pick, tmp_path)
    router_train.learn_router(router, tmp_path)
    assert [type(t) for t in seen] == [PickTask, RouterTask] and seen[0].cfg is pick and seen[1].cfg is router
    assert seen[0].tag != seen[1].tag and seen[1].dims and not seen[0].dims  # the router's own network shape


def test_one_label_config_reads_each_recipe_s_episode_counts() -> None:
    pick = load_pick_config(data_dir("agents") / "pick.yaml").labels
    router = load_router_config(data_dir("agents") / "router.yaml").labels
    assert isinstance(pick, recipe.LabelConfig) and isinstance(router, recipe.LabelConfig)
    assert (pick.episodes, pick.dagger_episodes) == (pick.episodes_per_scenario, pick.dagger_episodes_per_scenario)
    assert (router.episodes, router.dagger_episodes) == (router.episodes_per_pool, router.dagger_episodes_per_pool)
    assert (pick.episodes, router.episodes) == (24, 12)  # agents/pick.yaml, agents/router.yaml
