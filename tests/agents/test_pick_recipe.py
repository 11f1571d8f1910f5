"""Teacher labels and the candidate policy's recipe (labels → imitation → DAgger → PPO → export)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from rlsched.agents.labels import LabelTask, generate, label_episode, label_tasks  # noqa: E402
from rlsched.errors import ConfigError  # noqa: E402
from rlsched.learned.pick import K  # noqa: E402

STATIC = "agents/tuned/{scenario}.json"


def test_labels_are_reproducible_and_the_same_in_worker_processes() -> None:
    tasks = label_tasks(["default", "bursty"], STATIC, 2, 5, (1.0, 1.5), 300.0, 3, 1200.0)
    local = generate(tasks, workers=1, progress=False)
    pooled = generate(tasks, workers=2, progress=False)
    assert sum(len(p["q"]) for p in local) > 0
    for a, b in zip(local, pooled, strict=True):
        for key in ("glob", "cand", "q"):
            np.testing.assert_array_equal(a[key], b[key])
    q = np.concatenate([p["q"] for p in local])
    assert q.shape[1] == K and np.isfinite(q[:, 0]).all() and np.isfinite(q[:, 1]).all()


def test_hindsight_labels_count_future_arrivals_realizable_ones_do_not() -> None:
    task = LabelTask("default", 3, 1.5, "agents/tuned/default.json", 0.0, 4, 1200.0)
    blind = label_episode(task)
    seeing = label_episode(LabelTask("default", 3, 1.5, "agents/tuned/default.json", 900.0, 4, 1200.0))
    np.testing.assert_array_equal(blind["cand"], seeing["cand"])  # same visited states
    assert (seeing["q"][:, 0] >= blind["q"][:, 0]).all() and (seeing["q"][:, 0] > blind["q"][:, 0]).any()


def test_labels_refuse_validation_and_evaluation_seeds() -> None:
    with pytest.raises(ConfigError, match="training seeds"):
        LabelTask("default", 1000, 1.0, "agents/tuned/default.json")


def test_the_recipe_runs_end_to_end_and_exports_a_loadable_scorer(tmp_path: Path) -> None:
    from rlsched.agents.pick_train import learn, load_pick_config
    from rlsched.policies import make_policy

    cfg_file = tmp_path / "tiny.yaml"
    cfg_file.write_text(
        "scenarios: [default]\n"
        "labels: {episodes_per_scenario: 2, dagger_rounds: 1, dagger_episodes_per_scenario: 1, duration_s: 1200}\n"
        "imitation: {epochs: 2, margins: [1.0]}\n"
        "ppo: {timesteps: 256, n_steps: 64, batch_size: 64, window_s: [600, 900], burn_in_s: 120}\n"
        "validation: {seeds: [900], rate_scales: [1.0], duration_s: 900}\n")
    report = learn(load_pick_config(cfg_file), tmp_path / "run", tmp_path / "ck", progress=False)
    assert set(report["validation"]) == {"imitation@1", "ppo"}
    assert report["chosen"] in report["validation"]
    assert (tmp_path / "run" / "labels" / "dagger1.npz").is_file()
    assert any((tmp_path / "run" / "tb").rglob("events.out.tfevents*"))
    meta = json.loads((tmp_path / "ck" / "policy.json").read_text())
    assert meta["kind"] == "pick" and meta["stage"] == report["chosen"]
    policy = make_policy(f"pick:{tmp_path / 'ck'};static=agents/tuned/default.json")
    assert policy.name.startswith("pick:")


def test_a_recipe_with_an_evaluation_seed_or_an_unknown_key_is_refused(tmp_path: Path) -> None:
    from rlsched.agents.pick_train import load_pick_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("validation: {seeds: [1000]}\n")
    with pytest.raises(ConfigError, match="validation.seeds"):
        load_pick_config(bad)
    bad.write_text("labelz: {}\n")
    with pytest.raises(ConfigError, match="labelz"):
        load_pick_config(bad)
