"""Recipes are deterministic for their seed, choose stages robustly, and shipped files say where they came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from rlsched.agents.config import agent_config_from_dict, load_agent_config  # noqa: E402
from rlsched.agents.pick_train import learn, load_pick_config  # noqa: E402
from rlsched.agents.recipe import choose_stage, initial_net, recipe_config  # noqa: E402
from rlsched.agents.reproducible import command_line, provenance  # noqa: E402
from rlsched.learned.checkpoint import META, WEIGHTS, content_hash, read_checkpoint, save_checkpoint  # noqa: E402
from rlsched.resources import data_dir  # noqa: E402

TINY_PICK = ("scenarios: [default]\n"
             "labels: {episodes_per_scenario: 2, dagger_rounds: 1, dagger_episodes_per_scenario: 1, duration_s: 600,\n"
             "         every: 3}\n"
             "imitation: {epochs: 2, margins: [1.0, 0.5]}\n"
             "ppo: {timesteps: 128, n_steps: 64, batch_size: 64, n_epochs: 1, window_s: [300, 600], burn_in_s: 60}\n"
             "validation: {seeds: [900, 901], rate_scales: [1.0], duration_s: 300}\n")
TINY_KNOB = {
    "env": {"scenarios": ["default", "omni-mix"], "rate_scale_range": [0.8, 1.2], "episode_s": 900.0,
            "max_episode_steps": 24},
    "ppo": {"n_steps": 64, "batch_size": 64, "n_epochs": 1, "net_arch": [16, 16], "bc_steps_per_scenario": 32,
            "bc_epochs": 2, "init_action_from": ["agents/tuned/default.json", "agents/tuned/omni-mix.json"]},
    "n_envs": 2, "timesteps": 128, "checkpoint_every": 64, "eval_every": 64, "eval_seeds": [900],
    "eval_baselines": ["fifo"], "eval_duration_s": 600.0,
}
COMMIT = re.compile(r"[0-9a-f]{40}")


def _meta(folder: Path) -> dict:
    return json.loads((folder / META).read_text())


def test_a_tiny_pick_recipe_run_twice_gives_one_content_hash(tmp_path: Path) -> None:
    """Bug: the first imitation round's network was built before any seed (torch seeds its generator
    from the OS), so each run fitted other weights on identical labels; the export time was hashed.
    The second run here is in the same process, after the first drew from every global generator,
    and on another number of workers."""
    (tmp_path / "tiny.yaml").write_text(TINY_PICK)
    cfg = load_pick_config(tmp_path / "tiny.yaml")
    runs = [learn(cfg.model_copy(update={"workers": w}), tmp_path / f"run{w}", tmp_path / f"ck{w}", progress=False)
            for w in (1, 2)]
    a, b = (_meta(tmp_path / f"ck{w}") for w in (1, 2))
    assert set(runs[0]["weights_sha256"]) == {"imitation@1", "imitation@0.5", "ppo"}
    assert runs[0]["weights_sha256"] == runs[1]["weights_sha256"]  # every stage, PPO included
    assert runs[0]["imitation"] == runs[1]["imitation"]  # each round's fit (round 0's is hidden behind DAgger's)
    assert runs[0]["validation"] == runs[1]["validation"]
    assert a["content_sha256"] == b["content_sha256"]
    assert (tmp_path / "ck1" / WEIGHTS).read_bytes() == (tmp_path / "ck2" / WEIGHTS).read_bytes()
    assert a["provenance"]["execution"]["workers"] == 1 and b["provenance"]["execution"]["workers"] == 2
    assert a["training_config"] == recipe_config(cfg) and "workers" not in a["training_config"]
    assert a["selection"] == runs[0]["selection"] and a["stage"] == runs[0]["chosen"]


def test_a_tiny_knob_training_and_export_run_twice_give_one_content_hash(tmp_path: Path) -> None:
    from rlsched.agents.export import export_run
    from rlsched.agents.train import train

    for i in (1, 2):
        cfg = agent_config_from_dict(json.loads(json.dumps(TINY_KNOB)), "test")
        train(cfg, tmp_path / f"run{i}", seed=3, progress=False)
        export_run(tmp_path / f"run{i}", tmp_path / f"ck{i}", source="last")
    a, b = _meta(tmp_path / "ck1"), _meta(tmp_path / "ck2")
    assert a["content_sha256"] == b["content_sha256"]
    assert (tmp_path / "ck1" / WEIGHTS).read_bytes() == (tmp_path / "ck2" / WEIGHTS).read_bytes()
    assert a["obs_norm"] == b["obs_norm"]
    assert len(a["provenance"]["training"]) == 1 and "command" in a["provenance"]["training"][0]


def test_each_imitation_round_starts_from_the_same_weights_whatever_drew_before() -> None:
    import torch

    first = initial_net(4).tensors()
    torch.rand(1000)
    again = initial_net(4).tensors()
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["glob.weight"], initial_net(5).tensors()["glob.weight"])


def test_a_later_stage_replaces_the_simpler_one_only_beyond_the_paired_interval() -> None:
    rng = np.random.default_rng(0)
    noise = rng.normal(0.0, 1.0, 40)
    diffs = {"imitation@4": np.zeros(40), "imitation@1": 0.2 + noise,  # higher mean, inside its interval
             "ppo": 1.0 + 0.1 * noise}  # clearly above imitation@4
    chosen, steps = choose_stage(["imitation@4", "imitation@1"], diffs)
    assert diffs["imitation@1"].mean() > 0 and chosen == "imitation@4"
    mean = pytest.approx(diffs["imitation@1"].mean())
    assert steps == [{"stage": "imitation@1", "against": "imitation@4", "mean": mean, "ci95": steps[0]["ci95"],
                      "won": False}] and steps[0]["ci95"] > 0.2
    chosen, steps = choose_stage(["imitation@4", "imitation@1", "ppo"], diffs)
    assert chosen == "ppo" and [s["won"] for s in steps] == [False, True] and steps[1]["against"] == "imitation@4"
    assert choose_stage(["a", "b"], {"a": np.zeros(1), "b": np.ones(1)})[0] == "a"  # one cell: no interval, no win


def test_provenance_is_outside_the_content_hash(tmp_path: Path) -> None:
    tensors = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    base = {"kind": "test", "training_config": {"seed": 0}}
    save_checkpoint(tmp_path / "a", tensors, {**base, "provenance": provenance(["rlsched", "learn"])})
    save_checkpoint(tmp_path / "b", tensors, {**base, "provenance": {"commit": "unknown", "created_at": "later"}})
    save_checkpoint(tmp_path / "c", tensors, {**base, "training_config": {"seed": 1}})
    a, b, c = (_meta(tmp_path / x)["content_sha256"] for x in "abc")
    assert a == b != c
    read_checkpoint(tmp_path / "a")  # verifies
    meta = _meta(tmp_path / "a")
    assert meta["content_sha256"] == content_hash((tmp_path / "a" / WEIGHTS).read_bytes(), meta)


def test_provenance_names_the_commit_and_the_command() -> None:
    p = provenance(["/x/.venv/bin/rlsched", "learn", "--run-dir", "runs/a b"])
    assert p["command"] == "rlsched learn --run-dir 'runs/a b'"
    assert p["commit"] == "unknown" or COMMIT.fullmatch(p["commit"])
    assert p["dirty"] in (True, False, "unknown")
    assert command_line(["/usr/lib/python3/site-packages/rlsched/__main__.py", "tune"]) == "rlsched tune"


def test_provenance_names_the_cpu_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: weights are bit-reproducible only on the same kind of CPU, so a checkpoint says which."""
    from rlsched.agents import reproducible

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n")
    assert reproducible.cpu_model(info) == "AMD EPYC 7B13"
    assert provenance(["rlsched"])["cpu"] == reproducible.cpu_model()
    monkeypatch.setattr(reproducible.platform, "processor", lambda: "")
    assert reproducible.cpu_model(tmp_path / "none") == "unknown"


# ------------------------------------------------------------------ what is shipped


def _shipped_provenance(p: dict, command: str) -> None:
    """A commit that is a commit (or honestly unknown), a dirty flag, the producing command (or unknown)."""
    assert p["commit"] == "unknown" or COMMIT.fullmatch(p["commit"]), p["commit"]
    assert p["command"] == "unknown" or p["command"].startswith(command), p["command"]
    assert p["dirty"] in (True, False, "unknown")


def test_the_shipped_pick_checkpoint_records_the_preset_it_was_learned_with() -> None:
    meta = _meta(data_dir("checkpoints") / "pick")
    assert meta["training_config"] == recipe_config(load_pick_config(data_dir("agents") / "pick.yaml"))
    _shipped_provenance(meta["provenance"], "rlsched learn --agent agents/pick.yaml")
    _kept_by_the_selection_rule(meta)
    read_checkpoint(data_dir("checkpoints") / "pick")  # its content hash verifies


def _kept_by_the_selection_rule(meta: dict) -> None:
    comparisons = meta["selection"]["comparisons"]
    kept = comparisons[0]["against"]
    for c in comparisons:  # the rule, replayed on the recorded comparisons
        assert c["against"] == kept and c["won"] == (c["mean"] - c["ci95"] > 0)
        kept = c["stage"] if c["won"] else kept
    assert meta["stage"] == kept


@pytest.mark.parametrize("name", ["router", "router-video"])
def test_each_shipped_router_checkpoint_records_the_preset_it_was_learned_with(name: str) -> None:
    from rlsched.agents.router_train import load_router_config

    meta = _meta(data_dir("checkpoints") / name)
    assert meta["training_config"] == recipe_config(load_router_config(data_dir("agents") / f"{name}.yaml"))
    _shipped_provenance(meta["provenance"], f"rlsched learn --agent agents/{name}.yaml")
    _kept_by_the_selection_rule(meta)
    read_checkpoint(data_dir("checkpoints") / name)  # its content hash verifies


def test_the_shipped_knob_checkpoint_records_the_preset_it_was_trained_with() -> None:
    meta = _meta(data_dir("checkpoints") / "default")
    preset = json.loads(json.dumps(load_agent_config("ppo").to_dict()))  # tuples as the JSON lists
    assert meta["training_config"] == {"agent": preset, "seed": 0}
    # byte for byte as hashed (7200 and 7200.0 compare equal, but hash apart)
    assert json.dumps(meta["training_config"]["agent"], sort_keys=True) == json.dumps(preset, sort_keys=True)
    _shipped_provenance(meta["provenance"], "rlsched export")
    read_checkpoint(data_dir("checkpoints") / "default")


@pytest.mark.parametrize("name", ["default", "video-mix", "omni-mix", "trace-azure", "bursty"])
def test_every_shipped_tuned_file_records_its_provenance(name: str) -> None:
    data = json.loads((data_dir("agents") / "tuned" / f"{name}.json").read_text())
    assert data["scenario"] == name and data["trials"] == 40
    _shipped_provenance(data["provenance"], f"rlsched tune --scenario {name} ")
