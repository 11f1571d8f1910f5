"""The candidate-batch policy: candidates are feasible, slot 0 is the heuristic, the frozen scorer is checked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlsched.errors import CheckpointError, PolicyOutputError
from rlsched.evaluation import RunSpec, prepare
from rlsched.learned.pick import CAND_FIELDS, F, K, PickPolicy, load_scorer
from rlsched.policies import make_policy
from rlsched.policies.static import load_static
from rlsched.sim.metrics import summarize

STATIC = "agents/tuned/default.json"


def _always(j: int):  # type: ignore[no-untyped-def]
    def score(g: np.ndarray, cand: np.ndarray) -> np.ndarray:
        s = np.zeros(K)
        s[j] = 1.0
        return s
    return score


def _started(scorer):  # type: ignore[no-untyped-def]
    """A pick policy over the tuned heuristic, reset on an overloaded default workload."""
    sim = prepare(RunSpec("default", "x", 11, 1.5, 2400.0))
    policy = PickPolicy(scorer, load_static(STATIC))
    policy.reset(sim)
    return sim, policy


def _run(policy, load: float = 1.25, duration: float = 2400.0):  # type: ignore[no-untyped-def]
    sim = prepare(RunSpec("default", "x", 11, load, duration))
    sim.run(policy)
    return sim


def test_picking_slot_zero_is_the_heuristic_batch_for_batch() -> None:
    pick = _run(PickPolicy(_always(0), load_static(STATIC)))
    static = _run(load_static(STATIC))
    assert pick.batch_sizes == static.batch_sizes
    assert {r: x.finish_s for r, x in pick.records.items()} == {r: x.finish_s for r, x in static.records.items()}
    assert pick.batches > 0


def test_every_candidate_is_feasible_distinct_and_the_proposal_comes_first() -> None:
    sim, policy = _started(_always(0))
    seen = 0
    while sim.advance_to_next_decision():
        decision, view = policy.propose(sim)
        if view is not None:
            seen += 1
            assert tuple(sorted(decision.batch)) == view.batches[0]
            assert len(set(view.batches)) == len(view.batches) <= K
            for batch in view.batches:
                recs = [sim.waiting[i] for i in batch]
                assert len({r.key for r in recs}) == 1
                assert len(recs) <= sim.config.max_num_seqs
                assert sim.cost.batch_memory_gb(recs) <= sim.cost.gpu_memory_gb
            assert view.features.shape == (K, F)
            assert view.mask.sum() == len(view.batches) and view.mask[:len(view.batches)].all()
            assert view.features[0, CAND_FIELDS.index("proposal")] == 1.0
            assert np.isfinite(view.features).all() and np.abs(view.features).max() <= 5.0
        sim.apply(decision)
    assert seen > 20


def test_the_scorer_choice_is_what_starts() -> None:
    sim, policy = _started(_always(1))
    changed = 0
    while sim.advance_to_next_decision():
        decision = policy.decide(sim)
        if policy.view is not None:
            assert tuple(sorted(decision.batch)) == policy.view.batches[1]
            changed += 1
        sim.apply(decision)
    assert changed > 0 and policy.picked == changed
    assert summarize(sim)["requests_completed"] == len(sim.records)


def test_non_finite_scores_are_refused() -> None:
    policy = PickPolicy(lambda g, c: np.full(K, np.nan), load_static(STATIC))
    with pytest.raises(PolicyOutputError):
        _run(policy)


def test_step_mode_runs_the_heuristic() -> None:
    sim = prepare(RunSpec("video-mix", "x", 3, 1.0, 1800.0))
    sim.run(PickPolicy(_always(1), load_static("agents/tuned/video-mix.json")))
    ref = prepare(RunSpec("video-mix", "x", 3, 1.0, 1800.0))
    ref.run(load_static("agents/tuned/video-mix.json"))
    assert sim.batch_sizes == ref.batch_sizes


@pytest.fixture(scope="module")
def scorer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    from rlsched.agents.pick_train import export_scorer
    from rlsched.agents.scorer_net import CandidateNet

    torch.manual_seed(0)
    net = CandidateNet()
    with torch.no_grad():
        net.proposal_bias.fill_(0.3)
    out = tmp_path_factory.mktemp("pick") / "ck"
    export_scorer(net, out, {"base_action": json.loads(Path(STATIC).read_text())["action"], "projection": {}})
    return out


def test_the_frozen_scorer_computes_the_torch_forward(scorer_dir: Path) -> None:
    import torch

    from rlsched.agents.pick_train import load_net
    from rlsched.learned.observation import GLOBAL_DIM

    net = load_net(scorer_dir)
    frozen = load_scorer(scorer_dir)
    rng = np.random.default_rng(0)
    g, cand = rng.normal(size=GLOBAL_DIM).astype(np.float32), rng.normal(size=(K, F)).astype(np.float32)
    with torch.no_grad():
        ref, _ = net(torch.as_tensor(g[None]), torch.as_tensor(cand[None]))
    np.testing.assert_allclose(frozen(g, cand), ref[0].numpy(), rtol=1e-5, atol=1e-5)
    assert frozen.proposal_bias == pytest.approx(0.3)


def test_pick_policy_loads_by_name_with_and_without_a_tuned_heuristic(scorer_dir: Path) -> None:
    for spec in (f"pick:{scorer_dir}", f"pick:{scorer_dir};static={STATIC}"):
        sim = _run(make_policy(spec), duration=900.0)
        assert summarize(sim)["requests_completed"] == len(sim.records)


def test_a_tampered_or_mismatched_scorer_is_refused(scorer_dir: Path, tmp_path: Path) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(scorer_dir, bad)
    meta = json.loads((bad / "policy.json").read_text())
    meta["pick_schema"] = "dit-pick-obs/0"
    from rlsched.learned.checkpoint import content_hash

    meta["content_sha256"] = content_hash((bad / "policy.safetensors").read_bytes(), meta)
    (bad / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="retrain"):
        load_scorer(bad)
    (bad / "policy.json").write_text(json.dumps({**meta, "pick_schema": "dit-pick-obs/1"}))
    with pytest.raises(CheckpointError, match="hash"):
        load_scorer(bad)
    with pytest.raises(CheckpointError, match="kind"):
        load_scorer("checkpoints/default")
    # the pick loader used to skip the format-version check the knob loader makes
    future = {**meta, "pick_schema": "dit-pick-obs/1", "format_version": 99}
    future["content_sha256"] = content_hash((bad / "policy.safetensors").read_bytes(), future)
    (bad / "policy.json").write_text(json.dumps(future))
    with pytest.raises(CheckpointError, match="format version 99"):
        load_scorer(bad)


def test_a_relative_tuned_file_is_found_from_another_working_directory(tmp_path: Path, monkeypatch) -> None:
    # a vLLM server started elsewhere gets the same policy spec as the deploy command
    monkeypatch.chdir(tmp_path)
    policy = load_static(STATIC)
    assert policy.name == "static"
    with pytest.raises(Exception, match="not found"):
        load_static("agents/tuned/no-such-scenario.json")
