"""The learned router's recipe, one command: labels → imitation → DAgger → MaskablePPO → validation → export.

1. Label arrivals on the multi-replica pools with the realizable look-ahead teacher
   (``LookaheadRouter.replica_gain``: the request tried on a fork of each replica it fits on,
   the pool's replica policy finishing the fork over ``horizon_s``; the gain in
   class-weighted SLOs met). rlsched's router drives the stage (round 0) or, in DAgger
   rounds, the imitated router itself.
2. Imitate: regress score(replica) − score(proposal) on the label advantage
   (``rlsched.agents.scorer_net.imitate``, the candidate policy's loss; proposal = rlsched's choice).
3. Validate each proposal margin paired against ``static@rlsched`` (the strongest heuristic
   router on every pool: results/router-ceiling) on validation seeds (900+) and keep one by
   ``choose_stage`` (the largest, unless a smaller one wins by more than the paired 95 % interval).
4. Fine-tune it with sb3-contrib's ``MaskablePPO`` on ``rlsched/DiTRoute-v0`` (reward: SLO
   credit minus rlsched's router's on an identical copy of the workload, after a burn-in;
   loads drawn over ``rate_scale``), TensorBoard in ``RUN/tb``; PPO replaces the imitation
   stage only if it wins on the validation cells by more than the paired interval.
5. Export the stage kept as a frozen scorer (``kind: router``) that ``POLICY@router:FOLDER`` serves.

Workload seeds: labels and PPO below 900, validation 900-999, evaluation >= 1000.
Deterministic for its ``seed``: the same config gives the same labels, weights and content
hash, whichever number of workers ran it (each label task is one seeded episode).
``rlsched.agents.recipe.learn`` runs the stages every learned recipe shares; this module holds what
the router adds: its config and ``RouterTask`` (label task, validation cell, PPO environment, review, export).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from rlsched.agents import recipe
from rlsched.agents.recipe import (
    ImitationConfig,
    LabelConfig,
    LoadRange,
    MaskablePPOConfig,
    Strict,
    ValidationConfig,
    check_inputs,
    load_config,
)
from rlsched.errors import ConfigError


class RouteLabelConfig(LabelConfig):
    episodes_per_pool: int = Field(default=12, ge=1)
    horizon_s: float = Field(default=180.0, gt=0)
    """How far each teacher fork runs (the ceiling's H)."""
    every: int = Field(default=1, ge=1)
    """Label one arrival with a choice in this many."""
    dagger_episodes_per_pool: int = Field(default=6, ge=1)

    @property
    def episodes(self) -> int:
        return self.episodes_per_pool

    @property
    def dagger_episodes(self) -> int:
        return self.dagger_episodes_per_pool


class RouteImitationConfig(ImitationConfig):
    margins: tuple[float, ...] = (2.0, 1.0, 0.5, 0.25)
    """Proposal margins (class-weighted requests) tried on the validation seeds, largest first."""
    dagger_margin: float = Field(default=0.5, ge=0)


class RouteValidationConfig(ValidationConfig):
    duration_s: float = Field(default=3600.0, gt=0)


class LearnedRouterConfig(Strict):
    kind: Literal["router"]
    name: str = "router"
    pools: tuple[str, ...]
    static: dict[str, str]
    """Pool -> tuned action file of its replica policy (``static``), the one it is evaluated with."""
    durations: dict[str, float] = Field(default_factory=dict)
    """Pool -> arrival window (s) for labels and validation where the default is too sparse (traces)."""
    rate_scale: LoadRange = (0.5, 1.5)
    labels: RouteLabelConfig = RouteLabelConfig()
    imitation: RouteImitationConfig = RouteImitationConfig()
    ppo: MaskablePPOConfig = MaskablePPOConfig(timesteps=60_000)
    """The candidate policy's PPO settings (``timesteps: 0`` skips PPO)."""
    validation: RouteValidationConfig = RouteValidationConfig()
    workers: int = Field(default=2, ge=1)
    ray: str | None = None
    seed: int = Field(default=0, ge=0)

    @field_validator("static")
    @classmethod
    def _every_pool(cls, v: dict[str, str], info: Any) -> dict[str, str]:
        missing = [p for p in info.data.get("pools", ()) if p not in v]
        if missing:
            raise ValueError(f"no replica policy for pool(s) {', '.join(missing)}")
        return v

    def check_inputs(self, where: str) -> None:
        """Every pool and each pool's tuned replica policy (``static``), read before any work."""
        check_inputs(where, {"pools": self.pools}, {f"static.{pool}": path for pool, path in self.static.items()})


def load_router_config(path: str | Path, **overrides: Any) -> LearnedRouterConfig:
    return load_config(LearnedRouterConfig, path, **overrides)


# ------------------------------------------------------------------ labels
@dataclass(frozen=True)
class RouteLabelTask:
    """One labelled episode: a seeded workload on a pool, who routes it, how far the teacher looks."""

    pool: str
    seed: int
    rate_scale: float
    static: str
    horizon_s: float
    every: int
    duration_s: float
    scorer: Any = None
    """A ``Scorer`` (DAgger: the learned router routes) or None (rlsched's router does)."""

    def __post_init__(self) -> None:
        from rlsched.run.seeds import VALIDATION_SEED_BASE

        if not 0 <= self.seed < VALIDATION_SEED_BASE:
            raise ConfigError("router.labels.seeds", f"labels use training seeds [0, {VALIDATION_SEED_BASE}), "
                                                     f"not {self.seed}")


def label_route_episode(task: RouteLabelTask) -> dict[str, np.ndarray]:
    """Arrays ``glob`` (N, RG), ``cand`` (N, MAX_REPLICAS, RF) and ``q`` (N, MAX_REPLICAS; NaN where
    invalid or absent) of one episode; the proposal is slot 0 of every state."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from rlsched.learned.router import MAX_REPLICAS, RF, RG, RouteFeatures
    from rlsched.policies import make_policy
    from rlsched.routing.teachers import LookaheadRouter, is_idle
    from rlsched.run import RunSpec, prepare_stage
    from rlsched.sim import load_scenario

    sc = load_scenario(task.pool)
    stage = prepare_stage(RunSpec(task.pool, "label", task.seed, task.rate_scale, task.duration_s), sc)
    if len(stage.replicas) > MAX_REPLICAS:
        raise ConfigError("router.pools", f"{task.pool}: {len(stage.replicas)} replicas, labels hold {MAX_REPLICAS}")
    spec = f"static:{task.static}"
    teacher = LookaheadRouter(spec, task.horizon_s)
    kinds = [(id(s.cost), s.serving) for s in stage.specs]
    glob, cand, qs = [], [], []

    class Labeller:
        name, seen = "labeller", 0

        def reset(self, st: Any) -> None:
            self.features = RouteFeatures()
            self.features.reset(st)

        def route(self, request: Any, st: Any) -> int:
            proposal, g, c = self.features.describe(request, st)
            valid = np.flatnonzero(c[:, 0] > 0)
            choice = proposal
            if task.scorer is not None:
                scores = np.where(c[:, 0] > 0, task.scorer(g, c), -np.inf)
                choice = int(np.argmax(scores))
            if len(valid) > 1:
                self.seen += 1
                if self.seen % task.every == 0:
                    order = [proposal, *(i for i in range(len(c)) if i != proposal)]
                    q = np.full(MAX_REPLICAS, np.nan)
                    empty: dict[Any, float] = {}  # idle replicas of one kind score alike: one fork per kind
                    for slot, i in enumerate(order):
                        if not c[i, 0]:
                            continue
                        idle = is_idle(st, i)
                        if idle and kinds[i] in empty:
                            q[slot] = empty[kinds[i]]
                            continue
                        q[slot] = teacher.replica_gain(st, request, i)
                        if idle:
                            empty[kinds[i]] = q[slot]
                    rows = np.zeros((MAX_REPLICAS, RF), np.float32)
                    rows[:len(c)] = c[order]
                    glob.append(g)
                    cand.append(rows)
                    qs.append(q)
            return choice

    router = Labeller()
    teacher.reset(stage)
    stage.run([make_policy(spec) for _ in stage.replicas], router)
    return {"glob": np.asarray(glob, np.float32).reshape(-1, RG),
            "cand": np.asarray(cand, np.float32).reshape(-1, MAX_REPLICAS, RF), "q": np.asarray(qs).reshape(-1,
                                                                                                          MAX_REPLICAS)}


def route_label_tasks(cfg: LearnedRouterConfig, episodes: int, seed0: int, scorer: Any = None) -> list[RouteLabelTask]:
    """``episodes`` per pool on consecutive training seeds from ``seed0``, loads spread evenly over
    ``rate_scale`` (stratified: every load band gets labels)."""
    lc = cfg.labels
    loads = np.linspace(*cfg.rate_scale, episodes) if episodes > 1 else np.array([np.mean(cfg.rate_scale)])
    return [RouteLabelTask(p, seed0 + i, float(loads[i]), cfg.static[p], lc.horizon_s, lc.every,
                           cfg.durations.get(p, lc.duration_s), scorer)
            for p in cfg.pools for i in range(episodes)]


def _label(cfg: LearnedRouterConfig, run: Path, name: str, episodes: int, seed0: int, scorer: Any,
           progress: bool) -> Path:
    from rlsched.agents.labels import generate, save_labels

    tasks = route_label_tasks(cfg, episodes, seed0, scorer)
    parts = generate(tasks, cfg.workers, progress, cfg.ray, label_route_episode, f"labelling {name}")
    meta = {"round": name, "episodes": len(tasks), "seeds": [seed0, seed0 + episodes - 1],
            "horizon_s": cfg.labels.horizon_s}
    return save_labels(run / "labels" / f"{name}.npz", parts, meta)


# ------------------------------------------------------------------ validation
def _validate_one(task: tuple[str, str, int, float, float, Any]) -> float:
    from rlsched.learned.router import LearnedRouter
    from rlsched.policies import make_policy
    from rlsched.routing.routers import RlschedRouter
    from rlsched.run import RunSpec, prepare_stage
    from rlsched.sim import load_scenario
    from rlsched.sim.metrics import summarize_stage

    pool, static, seed, load, duration, scorer = task
    stage = prepare_stage(RunSpec(pool, "validate", seed, load, duration), load_scenario(pool))
    router = RlschedRouter() if scorer is None else LearnedRouter(scorer)
    stage.run([make_policy(f"static:{static}") for _ in stage.replicas], router)
    return float(summarize_stage(stage)["weighted_slo_attainment"])


def _cells(cfg: LearnedRouterConfig) -> list[tuple[str, int, float]]:
    v = cfg.validation
    return [(p, s, rs) for p in cfg.pools for rs in v.rate_scales for s in v.seeds]


def validation_differences(cfg: LearnedRouterConfig, scorers: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per stage, its paired difference (points) to ``static@rlsched`` in every validation cell
    (pool × load × seed), in task order whichever worker ran a cell."""
    v = cfg.validation
    cells = [(p, cfg.static[p], s, rs, cfg.durations.get(p, v.duration_s)) for p, s, rs in _cells(cfg)]
    return recipe.paired_differences(_validate_one, cells, scorers, cfg.workers, cfg.ray)


def summarize_validation(cfg: LearnedRouterConfig, diffs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Mean and 95 % interval of each stage's paired difference, its mean per pool and load, its worst cell."""
    cells = _cells(cfg)
    groups = {f"{p} x{rs:g}": np.array([c[0] == p and c[2] == rs for c in cells])
              for p in cfg.pools for rs in cfg.validation.rate_scales}
    return recipe.summarize_differences(diffs, groups, list(groups.values()))


SELECTION_RULE = ("proposal margins in decreasing order (the largest keeps closest to rlsched's router), then "
                  "PPO; a later stage replaces the one kept only if its paired difference to it on the validation "
                  "cells has a 95 % interval above zero (mean > ci95)")


def _ppo(cfg: LearnedRouterConfig, net: Any, run: Path, progress: bool) -> Any:
    """MaskablePPO on ``rlsched/DiTRoute-v0`` from the chosen imitation stage (paired reward against
    rlsched's router on an identical copy of each episode's workload)."""
    from rlsched.agents.scorer_net import policy_class
    from rlsched.envs.route import DiTRouteEnv
    from rlsched.learned.router import MAX_REPLICAS, RF, RG

    p = cfg.ppo
    pools, static = list(cfg.pools), dict(cfg.static)
    return recipe.maskable_ppo(p, cfg.seed, net,
                               lambda: DiTRouteEnv(pools, static, cfg.rate_scale, p.window_s, p.burn_in_s),
                               policy_class(RG, MAX_REPLICAS, RF), run, progress, tag="router",
                               shadow="rlsched's router (static@rlsched)")


class RouterTask(recipe.Task[LearnedRouterConfig]):
    """The learned router as a ``recipe.RecipeTask``."""

    tag = "router"
    rule = SELECTION_RULE

    def __init__(self, cfg: LearnedRouterConfig) -> None:
        from rlsched.learned.router import RF, RG

        super().__init__(cfg, recipe.Steps(_label, validation_differences, summarize_validation, _ppo))
        self.dims = {"g_dim": RG, "f_dim": RF}

    def review(self, nets: dict[str, Any], files: list[Path], validation: dict[str, dict[str, float]],
               log: Any) -> dict[str, Any]:
        """Every stage against the teacher on the states the imitated router visited (the last round's)."""
        from rlsched.agents.labels import load_labels
        from rlsched.agents.scorer_net import evaluate_labels

        rounds = [load_labels([f]) for f in files]
        visited = rounds[-1]
        teacher = {name: evaluate_labels(net, visited, np.arange(len(visited["q"]))) for name, net in nets.items()}
        for i, row in enumerate(teacher.values()):
            for key in ("agreement", "regret", "deviate"):
                log.add_scalar(f"stages/teacher_{key}", row[key], i)
        for i, row in enumerate(validation.values()):
            log.add_scalar("validation/mean_vs_rlsched_router", row["mean"], i)
            log.add_scalar("validation/worst_cell_vs_rlsched_router", row["worst_cell"], i)
        return {"teacher": teacher, "states": sum(len(r["q"]) for r in rounds)}

    def export(self, net: Any, out: Path, report: dict[str, Any], origin: dict[str, Any]) -> Path:
        return export_router(self.cfg, net, out, report, origin)


def learn_router(cfg: LearnedRouterConfig, run: Path, out: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """The whole recipe (module docstring; ``recipe.learn`` over ``RouterTask``); returns the report also
    written to RUN/report.json."""
    return recipe.learn(RouterTask(cfg), run, out, progress)


def export_router(cfg: LearnedRouterConfig, net: Any, out: Path, report: dict[str, Any],
                  origin: dict[str, Any]) -> Path:
    """``policy.safetensors`` + ``policy.json`` (kind ``router``), read back by ``load_router``."""
    from rlsched.learned.checkpoint import save_checkpoint
    from rlsched.learned.router import MAX_REPLICAS, RG, ROUTE_FIELDS, ROUTE_SCHEMA, load_router

    tensors = net.tensors()
    chosen = report["chosen"]
    save_checkpoint(out, tensors, {
        "kind": "router", "route_schema": ROUTE_SCHEMA, "global_dim": RG,
        "global_out": int(tensors["glob.weight"].shape[0]), "replica_fields": list(ROUTE_FIELDS),
        "max_labelled_replicas": MAX_REPLICAS, "layers": ["glob", "hidden.0", "hidden.1", "out"],
        "pools": list(cfg.pools), "replica_policies": dict(cfg.static), "stage": chosen,
        "validation": report["validation"][chosen], "selection": report["selection"],
        **recipe.recorded(cfg, report, origin)})
    load_router(out)  # what serving will read, checked now
    return out


__all__ = ["LearnedRouterConfig", "RouteLabelConfig", "RouteLabelTask", "RouterTask", "export_router",
           "label_route_episode", "learn_router", "load_router_config", "route_label_tasks", "validation_differences"]
