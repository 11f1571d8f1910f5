"""The learned router (``POLICY@router:CHECKPOINT``): features, masking, checkpoints, the recipe."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlsched.errors import CheckpointError, ConfigError
from rlsched.evaluation import RunSpec, prepare_stage
from rlsched.learned.router import RF, RG, ROUTE_FIELDS, ROUTE_SCHEMA, LearnedRouter, RouteFeatures, load_router
from rlsched.policies import make_policy
from rlsched.routing.routers import RlschedRouter, check_spec, make_router
from rlsched.sim import load_scenario
from rlsched.sim.request import Request
from rlsched.sim.stage import Stage

STATIC = "static:agents/tuned/default.json"
PROPOSAL = ROUTE_FIELDS.index("proposal")


def pool(name: str = "qwen-image-hetero", seed: int = 3, load: float = 1.3, duration: float = 900.0) -> Stage:
    return prepare_stage(RunSpec(name, "t", seed, load, duration), load_scenario(name))


def run(stage: Stage, router: Any) -> dict[int, tuple]:
    stage.run([make_policy(STATIC) for _ in stage.replicas], router)
    return {rid: (r.status, r.finish_s, stage.routed[rid]) for rid, r in stage.records.items()}


def proposal_only(g: np.ndarray, cand: np.ndarray) -> np.ndarray:
    return cand[:, PROPOSAL].astype(np.float64)


def test_a_router_that_keeps_the_proposal_is_rlscheds_router() -> None:
    assert run(pool(), LearnedRouter(proposal_only)) == run(pool(), RlschedRouter())


class Proposals:
    """``proposal_only`` as a checkpoint of the given feature schema."""

    def __init__(self, schema: str) -> None:
        self.meta = {"route_schema": schema}

    def __call__(self, g: np.ndarray, cand: np.ndarray) -> np.ndarray:
        return proposal_only(g, cand)


def test_a_checkpoint_is_served_with_the_proposer_of_its_schema() -> None:
    """dit-route-obs/2 was trained beside plain deadline order; /3 beside savable first (RlschedRouter)."""
    def overload() -> Stage:
        return pool("qwen-image-8gpu", 0, 2.0, 1200.0)

    deadline_order, savable_first = run(overload(), RlschedRouter(False)), run(overload(), RlschedRouter())
    assert deadline_order != savable_first
    assert run(overload(), LearnedRouter(Proposals("dit-route-obs/2"))) == deadline_order
    assert run(overload(), LearnedRouter(Proposals(ROUTE_SCHEMA))) == savable_first


class Recorder:
    name = "recorder"

    def reset(self, stage: Stage) -> None:
        self.features = RouteFeatures()
        self.features.reset(stage)
        self.rows: list[tuple[int, np.ndarray, np.ndarray]] = []

    def route(self, request: Request, stage: Stage) -> int:
        proposal, g, c = self.features.describe(request, stage)
        self.rows.append((proposal, g, c))
        return proposal


def test_features_flag_the_proposal_and_describe_every_replica() -> None:
    stage = pool()
    rec = Recorder()
    run(stage, rec)
    assert len(rec.rows) == stage.total_requests
    for proposal, g, c in rec.rows:
        assert g.shape == (RG,) and c.shape == (len(stage.replicas), RF)
        assert np.isfinite(g).all() and np.isfinite(c).all()
        assert c[:, PROPOSAL].sum() == 1 and c[proposal, PROPOSAL] == 1 and c[proposal, 0] == 1
        assert g[:3].sum() == 1  # one class
    fit = np.array([c[:, ROUTE_FIELDS.index("fit")] for _, _, c in rec.rows])
    assert (fit >= 0).all() and (fit.min(axis=1) == 0).all()  # the fastest replica's own time is the unit
    # the hetero pool's SP2 replicas are faster for some shapes: layout fit differs between replicas
    assert (fit.max(axis=1) > 0).any()
    loads = np.array([g[-3:] for _, g, _ in rec.rows])
    assert (loads[len(loads) // 2:] > 0).all()  # once requests arrived, every horizon sees them


def test_the_router_never_picks_a_masked_replica() -> None:
    class Masked(LearnedRouter):
        def describe(self, request: Request, stage: Stage) -> tuple[int, np.ndarray, np.ndarray]:
            proposal, g, c = super().describe(request, stage)
            c[:, 0] = 0
            c[proposal, 0] = 1
            c[(proposal + 1) % len(c), 0] = 1
            return proposal, g, c

    wants_masked = lambda g, c: np.where(c[:, 0] > 0, 0.0, 100.0) + c[:, PROPOSAL]  # noqa: E731
    # the masked replicas score 100, the proposal 1, the other valid one 0: every request goes to the proposal
    assert run(pool(), Masked(wants_masked)) == run(pool(), RlschedRouter())


@pytest.fixture(scope="module")
def tiny_router(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    pytest.importorskip("sb3_contrib")
    from rlsched.agents.router_train import learn_router, load_router_config

    tmp = tmp_path_factory.mktemp("router")
    cfg_file = tmp / "tiny.yaml"
    cfg_file.write_text(
        "kind: router\npools: [qwen-image-8gpu]\nstatic: {qwen-image-8gpu: agents/tuned/default.json}\n"
        "labels: {episodes_per_pool: 2, duration_s: 600, dagger_rounds: 1, dagger_episodes_per_pool: 1}\n"
        "imitation: {epochs: 3, margins: [1.0, 0.25]}\n"
        "ppo: {timesteps: 128, n_steps: 64, batch_size: 32, n_epochs: 1, n_envs: 1, window_s: [600, 900]}\n"
        "validation: {seeds: [900, 901], rate_scales: [1.5], duration_s: 600}\nworkers: 1\n")
    cfg = load_router_config(cfg_file)
    out = tmp / "ckpt"
    report = learn_router(cfg, tmp / "run", out, progress=False)
    return out, report


def test_the_recipe_exports_a_router_that_serves(tiny_router: tuple[Path, dict[str, Any]]) -> None:
    out, report = tiny_router
    assert report["chosen"] in ("imitation@1", "imitation@0.25", "ppo") and report["states"] > 0
    assert set(report["validation"]) == {"imitation@1", "imitation@0.25", "ppo"} and "ppo_s" in report["timing"]
    assert set(report["teacher"]["ppo"]) >= {"agreement", "regret"}
    meta = json.loads((out / "policy.json").read_text())
    assert meta["kind"] == "router" and meta["stage"] == report["chosen"] and meta["pools"] == ["qwen-image-8gpu"]
    assert (out.parent / "run" / "labels" / "dagger1.npz").is_file()
    assert any((out.parent / "run" / "tb" / "router").iterdir()) and (out.parent / "run" / "ppo_curve.csv").is_file()
    router = make_router(f"router:{out}")
    recs = run(pool("qwen-image-8gpu"), router)
    assert len(recs) == pool("qwen-image-8gpu").total_requests
    check_spec(f"{STATIC}@router:{out}")


def test_the_recipe_is_deterministic(tiny_router: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    from rlsched.agents.router_train import learn_router, load_router_config

    out, report = tiny_router
    cfg = load_router_config(out.parent / "tiny.yaml", workers=2)
    again = learn_router(cfg, tmp_path / "run", tmp_path / "ckpt", progress=False)
    assert again["weights_sha256"] == report["weights_sha256"]
    a, b = (json.loads((p / "policy.json").read_text())["content_sha256"] for p in (out, tmp_path / "ckpt"))
    assert a == b


def test_bad_router_checkpoints_are_refused(tiny_router: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    from rlsched.learned.checkpoint import content_hash

    out, _ = tiny_router
    with pytest.raises(CheckpointError, match="is not a learned router"):
        load_router("checkpoints/pick")
    refused = "do not match this rlsched \\(it serves dit-route-obs/2 and"
    for key, value, match in (("route_schema", "dit-route-obs/0", refused), ("global_dim", RG + 1, "global_dim")):
        bad = tmp_path / key
        bad.mkdir()
        (bad / "policy.safetensors").write_bytes((out / "policy.safetensors").read_bytes())
        meta = json.loads((out / "policy.json").read_text())
        meta[key] = value
        meta["content_sha256"] = content_hash((bad / "policy.safetensors").read_bytes(), meta)
        (bad / "policy.json").write_text(json.dumps(meta))
        with pytest.raises(CheckpointError, match=match):
            load_router(bad)
    with pytest.raises(CheckpointError, match="expected policy.safetensors"):
        make_router(f"router:{tmp_path / 'missing'}")
    with pytest.raises(ConfigError, match="takes no options"):
        make_router(f"router:{out};margin=2")


def test_labels_hold_the_proposal_in_slot_zero_and_refuse_held_out_seeds() -> None:
    from rlsched.agents.router_train import RouteLabelTask, label_route_episode

    part = label_route_episode(RouteLabelTask("qwen-image-hetero", 4, 1.4, "agents/tuned/default.json", 120.0, 2,
                                              600.0))
    assert len(part["q"]) > 0
    assert (part["cand"][:, 0, PROPOSAL] == 1).all() and (part["cand"][:, 1:, PROPOSAL] == 0).all()
    valid = part["cand"][:, :, 0] > 0
    assert (np.isfinite(part["q"]) == valid).all()
    with pytest.raises(ConfigError, match="training seeds"):
        RouteLabelTask("qwen-image-8gpu", 900, 1.0, "agents/tuned/default.json", 120.0, 1, 600.0)


def test_made_late_counts_the_requests_an_insertion_pushes_past_their_deadline() -> None:
    """Class-weighted: each request made late counts its class's weight. The queue's deadlines trail its
    cumulative work by a few seconds, so most draws make some requests late, of every class. Caught: the
    draws of a queue where every request was already late expected 0 every time (the weight replaced by 1
    passed)."""
    from rlsched.routing.routers import QueueWork
    from rlsched.sim import ServingConfig
    from rlsched.sim.cost import load_profile
    from rlsched.sim.metrics import CLASS_WEIGHTS
    from rlsched.sim.stage import ReplicaSpec

    cost = load_profile("qwen-image-h200")
    rng = np.random.default_rng(0)
    stage = Stage([], [ReplicaSpec("r0", cost, ServingConfig("request", 1))])
    done = 0.0
    for i in range(24):
        size, cls = int(rng.choice([512, 768, 1024])), str(rng.choice(["realtime", "batch", "background"]))
        probe = Request(i, 0.0, "qwen-image", "image", size, size, 1, 20, True, cls, 1.0)
        done += cost.record(probe).work_s
        stage.bind(dataclasses.replace(probe, slo_s=done + float(rng.uniform(0.0, 8.0))), 0)
    sim = stage.replicas[0]
    work = QueueWork()
    work.sync(sim)
    queue = sorted(sim.waiting.values(), key=lambda rec: (rec.deadline_s, rec.request.id))
    weighted, counted = [], []
    for _ in range(30):
        deadline = float(rng.uniform(queue[0].deadline_s, queue[-1].deadline_s))
        start, extra = float(rng.uniform(0, 4)), float(rng.uniform(1, 30))
        t, expected, count = start, 0.0, 0
        for rec in queue:
            t += rec.remaining_s
            if rec.deadline_s > deadline and t <= rec.deadline_s < t + extra:
                expected += CLASS_WEIGHTS[rec.request.priority]
                count += 1
        assert work.made_late(deadline, start, extra) == pytest.approx(expected)
        weighted.append(expected)
        counted.append(count)
    # the draws check something: most make requests late, and the class weights change the count
    assert sum(w > 0 for w in weighted) >= 15
    assert sum(w != c for w, c in zip(weighted, counted)) >= 10
    assert work.due_after(-1.0) == len(queue) and work.due_after(float("inf")) == 0


def test_a_request_is_never_routed_to_a_replica_it_does_not_fit_on() -> None:
    """Two one-GPU replicas and one SP2 replica; a 5120x5120 image fits the SP2 replica's memory only. A
    scorer that prefers the narrowest replica, and any replica to the proposal, still sends every such
    request to a replica that holds it: the fit mask offers a replica only where the request fits alone.
    Caught: the fit mask removed (every replica offered)."""
    from rlsched.sim import ServingConfig
    from rlsched.sim.cost import load_profile
    from rlsched.sim.layout import at_layout
    from rlsched.sim.stage import ReplicaSpec

    base = load_profile("qwen-image-h200-vllm-omni")
    wide = at_layout(base, 2)
    specs = [ReplicaSpec("a", base, ServingConfig("request", 2)), ReplicaSpec("b", base, ServingConfig("request", 2)),
             ReplicaSpec("wide", wide, ServingConfig("request", 2))]
    # a big one every 300 s (the wide replica runs one in 281 s): it is idle at each, so it is the proposal
    sizes = [5120 if i % 15 == 7 else (512, 1024)[i % 2] for i in range(60)]
    reqs = [Request(i, 20.0 * i, "qwen-image", "image", int(s), int(s), 1, 20, True, "batch", 3600.0)
            for i, s in enumerate(sizes)]
    big = {q.id for q in reqs if not base.fits([base.record(q)])}
    assert big and all(wide.fits([wide.record(q)]) for q in reqs)
    gpus = ROUTE_FIELDS.index("gpus")

    class Watched(LearnedRouter):
        def describe(self, request: Request, stage: Stage) -> tuple[int, np.ndarray, np.ndarray]:
            self.proposal, g, c = super().describe(request, stage)
            return self.proposal, g, c

        def route(self, request: Request, stage: Stage) -> int:
            choice = super().route(request, stage)
            self.log.append((request.id, self.proposal, choice))
            return choice

    router = Watched(lambda g, c: -10.0 * c[:, gpus] - c[:, PROPOSAL])
    router.log = []
    stage = Stage(reqs, specs)
    stage.run([make_policy(STATIC) for _ in specs], router)
    # the scorer's wish is followed where the mask allows it: the small requests go to the narrow replicas
    assert {stage.routed[i] for i in stage.routed if i not in big} <= {0, 1}
    # every big request is routed to the wide replica, though the scorer would rather go elsewhere: the mask
    # stops it (the proposal is always offered: here it holds the request too)
    assert [proposal for rid, proposal, _ in router.log if rid in big] == [2] * len(big)
    assert {rid: stage.routed[rid] for rid in big} == {rid: 2 for rid in big}
    assert all(r.status == "completed" for r in stage.records.values())
