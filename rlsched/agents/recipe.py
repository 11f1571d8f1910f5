"""The learned recipes' common machinery, as SB3's ``common/`` is to its algorithm folders.

``learn`` is the one recipe driver. A recipe (``rlsched.agents.pick_train``: the candidate policy;
``rlsched.agents.router_train``: the learned router) is a ``RecipeTask``: it supplies only what
differs (what to label, how one validation cell runs, its PPO environment, what it reviews and
how it exports). The stages ``learn`` runs through this module:

1. ``imitation_rounds``: round-0 labels and fit, then DAgger rounds (labels of the states the
   imitated network visits), every network a ``CandidateNet`` seeded by ``initial_net``.
2. ``select_stage``: one network per proposal margin (``with_margin``), each validated paired
   against the recipe's heuristic (``paired_differences``), one kept by ``choose_stage``; then
   ``maskable_ppo`` from the stage kept, validated and chosen the same way.
3. The report's ``summarize_differences`` and ``weights_digest``; the checkpoint's ``recorded``
   config and provenance.

Config blocks are pydantic models on the one ``Strict`` base (unknown keys refused, frozen),
read by ``load_config``; ``RECIPES`` maps a preset's declared ``kind`` to its recipe, which
``rlsched learn --agent PRESET`` runs (``recipe_of``).
"""

from __future__ import annotations

import copy
import importlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Generic, Protocol, TypeVar

import numpy as np
from pydantic import AfterValidator, BaseModel, Field, field_validator

from rlsched import bounds
from rlsched.agents.config import check_inputs, load_range, rate_scales, read_preset, validated
from rlsched.agents.paths import preset_paths_beside
from rlsched.atomic import atomic_open, write_atomic
from rlsched.errors import ConfigError
from rlsched.run.seeds import TRAIN_SEEDS, VALIDATION_SEEDS
from rlsched.sim.schema import Strict

M = TypeVar("M", bound=BaseModel)


def load_config(model: type[M], path: str | Path, **overrides: Any) -> M:
    """A recipe preset (YAML) as ``model``, with ``overrides`` that are not None; an invalid
    field is a ``ConfigError`` naming the file and the field."""
    data = preset_paths_beside(read_preset(path), Path(path).parent)
    data.update({k: v for k, v in overrides.items() if v is not None})
    return validated(model, data, str(path))


RECIPES: dict[str, tuple[str, str]] = {
    "pick": ("rlsched.agents.pick_train:load_pick_config", "rlsched.agents.pick_train:learn"),
    "router": ("rlsched.agents.router_train:load_router_config", "rlsched.agents.router_train:learn_router"),
    "knob": ("rlsched.agents.train:load_knob_config", "rlsched.agents.train:learn_knob"),
}
"""A recipe preset's ``kind`` -> its config loader and its ``learn`` (entry points, imported when asked)."""


def with_timesteps(cfg: BaseModel, timesteps: int) -> Any:
    """``cfg`` with ``timesteps`` PPO steps (``rlsched learn --timesteps``), validated again: a recipe's
    config keeps them in its ``ppo`` block, the knob's ``AgentConfig`` at its top (at least 1 there)."""
    if "timesteps" in type(cfg).model_fields:
        return validated(type(cfg), {**dict(cfg), "timesteps": timesteps}, "--timesteps")
    ppo = dict(cfg)["ppo"]
    return cfg.model_copy(update={"ppo": validated(type(ppo), {**dict(ppo), "timesteps": timesteps}, "--timesteps")})


SMOKE: dict[str, dict[str, Any]] = {
    "pick": {"labels": {"episodes_per_scenario": 2, "dagger_rounds": 1, "dagger_episodes_per_scenario": 1,
                        "duration_s": 600, "every": 3},
             "imitation": {"epochs": 2, "margins": [1.0]},
             "ppo": {"timesteps": 128, "n_steps": 64, "batch_size": 64, "n_epochs": 1, "window_s": [300, 600],
                     "burn_in_s": 60},
             "validation": {"seeds": [900, 901], "rate_scales": [1.0], "duration_s": 300}},
    "router": {"labels": {"episodes_per_pool": 1, "duration_s": 600, "dagger_rounds": 1,
                          "dagger_episodes_per_pool": 1},
               "imitation": {"epochs": 2, "margins": [1.0]},
               "ppo": {"timesteps": 128, "n_steps": 64, "batch_size": 32, "n_epochs": 1, "n_envs": 1,
                       "window_s": [600, 900]},
               "validation": {"seeds": [900], "rate_scales": [1.0], "duration_s": 600}},
    "knob": {"env": {"episode_s": 900.0, "max_episode_steps": 24},
             "ppo": {"n_steps": 64, "batch_size": 64, "n_epochs": 1, "bc_steps_per_scenario": 32, "bc_epochs": 2},
             "n_envs": 1, "timesteps": 128, "checkpoint_every": 64, "eval_every": 64, "eval_seeds": [900],
             "eval_duration_s": 600.0},
}
"""``rlsched learn --smoke``: every budget of a recipe kind cut to minutes (labels, epochs, margins, PPO steps,
validation seeds and windows), its scenarios, pools and files kept: a check that the recipe runs end to end on
the user's inputs, not a policy to serve. The numbers are the tiny recipes the test suite runs."""


def with_smoke(cfg: BaseModel, kind: str) -> Any:
    """``cfg`` with ``SMOKE[kind]``'s budgets merged in (block by block), validated again."""
    data = cfg.model_dump()
    for key, value in SMOKE[kind].items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
    return validated(type(cfg), data, "--smoke")


def recipe_kind(path: str | Path) -> str:
    """The recipe a preset declares by ``kind`` (none: ``pick``), checked."""
    kind = read_preset(path).get("kind", "pick")
    if kind not in RECIPES:
        raise ConfigError(f"{path}: kind", f"{kind!r} is not a recipe (one of {', '.join(RECIPES)})")
    return str(kind)


def recipe_of(path: str | Path) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The config loader and ``learn`` of the recipe a preset declares by ``kind`` (none: ``pick``)."""
    kind = recipe_kind(path)
    load, learn = (getattr(importlib.import_module(m), f) for m, f in (e.split(":") for e in RECIPES[kind]))
    return load, learn


LoadRange = Annotated[tuple[float, float], AfterValidator(load_range)]
"""A load range ``[low, high]`` of rate scales (``rlsched.bounds.SCALE``), ``low <= high``."""


# ------------------------------------------------------------------ config blocks
class LabelConfig(Strict):
    """The labels block every recipe shares: round 0, then ``dagger_rounds`` DAgger rounds, on
    consecutive training seeds from ``seed0``. A recipe names its episode counts for what an
    episode runs on (``episodes_per_scenario``, ``episodes_per_pool``); ``episodes`` and
    ``dagger_episodes`` read them under one name."""

    seed0: int = Field(default=0, ge=0, lt=TRAIN_SEEDS.stop)
    every: int = Field(default=1, ge=1)
    """Label one decision with a choice in this many."""
    duration_s: float = Field(default=1800.0, gt=0)
    dagger_rounds: int = Field(default=1, ge=0)

    @property
    def episodes(self) -> int:
        """Round 0's episodes per scenario or pool."""
        raise NotImplementedError

    @property
    def dagger_episodes(self) -> int:
        """Each DAgger round's episodes per scenario or pool."""
        raise NotImplementedError


class ImitationConfig(Strict):
    epochs: int = Field(default=40, ge=1)
    learning_rate: float = Field(default=3e-3, gt=0)
    weight_decay: float = Field(default=1e-4, ge=0)
    margins: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    """Proposal margins (class-weighted requests) tried on the validation seeds; the best is kept."""
    dagger_margin: float = Field(default=1.0, ge=0)
    """Margin of the policy that visits the states of a DAgger round."""

    @field_validator("margins")
    @classmethod
    def _some_margins(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        """``margins: []`` chose among no stage, after every label had been made."""
        if not value or not all(bounds.MILLIS.holds(m) for m in value):  # finite, >= 0 (class-weighted requests)
            raise ValueError(f"must list at least one margin, each a finite number >= 0, not {list(value)}")
        return value


class MaskablePPOConfig(Strict):
    """sb3-contrib ``MaskablePPO`` fine-tuning from the imitation stage kept (``timesteps: 0`` skips it)."""

    timesteps: int = Field(default=100_000, ge=0)
    learning_rate: float = Field(default=1e-4, gt=0)
    n_steps: int = Field(default=512, ge=8)
    batch_size: int = Field(default=256, ge=8)
    n_epochs: int = Field(default=4, ge=1)
    gamma: float = Field(default=0.99, gt=0, le=1)
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    clip_range: float = Field(default=0.1, gt=0)
    ent_coef: float = Field(default=0.001, ge=0)
    n_envs: int = Field(default=2, ge=1)
    window_s: tuple[float, float] = (1200.0, 2400.0)
    burn_in_s: float = Field(default=300.0, ge=0)

    @field_validator("window_s")
    @classmethod
    def _a_window(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not (all(bounds.DURATION_S.holds(v) for v in value) and value[0] <= value[1]):
            raise ValueError(f"must be [low, high] seconds, each {bounds.DURATION_S.describe()}, low <= high, "
                             f"not {list(value)}")
        return value


class ValidationConfig(Strict):
    seeds: tuple[int, ...] = tuple(VALIDATION_SEEDS[:10])
    rate_scales: tuple[float, ...] = (0.5, 1.0, 1.5)
    duration_s: float = Field(default=7200.0, gt=0)

    @field_validator("rate_scales")
    @classmethod
    def _rate_scales(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        return rate_scales(value)

    @field_validator("seeds")
    @classmethod
    def _validation_seeds(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or not all(s in VALIDATION_SEEDS for s in v):
            raise ValueError("validation seeds must be in [900, 1000) (evaluation uses >= 1000)")
        return v


EXECUTION_FIELDS = frozenset({"workers", "ray"})
"""Config fields that say where the recipe ran, not what it computes (results are the same for any)."""


def recipe_config(cfg: BaseModel) -> dict[str, Any]:
    """The config a checkpoint records as ``training_config``: everything but ``EXECUTION_FIELDS``
    (those go to its provenance), so ``--workers 1`` and ``--workers 2`` give one content hash."""
    return cfg.model_dump(mode="json", exclude=set(EXECUTION_FIELDS))


def recorded(cfg: BaseModel, report: dict[str, Any], origin: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's ``training_config`` and provenance (``origin``: where the recipe started)."""
    from rlsched.agents.reproducible import PROVENANCE

    return {"training_config": recipe_config(cfg),
            PROVENANCE: {**origin, "execution": cfg.model_dump(mode="json", include=set(EXECUTION_FIELDS)),
                         "train_seconds": report["total_s"]}}


class RecipeConfig(Protocol):
    """What ``learn`` reads of a recipe's config (a ``Strict`` model: ``PickConfig``, ``LearnedRouterConfig``)."""

    @property
    def seed(self) -> int: ...

    @property
    def labels(self) -> LabelConfig: ...

    @property
    def imitation(self) -> ImitationConfig: ...

    @property
    def ppo(self) -> MaskablePPOConfig: ...

    def model_dump_json(self, *, indent: int | None = None) -> str: ...


class RecipeTask(Protocol):
    """One learned recipe, as ``learn`` drives it: what it labels, how a stage is validated, how PPO
    fine-tunes, what the report adds and how the stage kept is exported."""

    @property
    def cfg(self) -> RecipeConfig:
        """Its validated config."""
        ...

    tag: str
    """Its TensorBoard folder under ``RUN/tb`` (imitation and review scalars)."""
    rule: str
    """Its stage selection rule, in words (the report's and the checkpoint's ``selection.rule``)."""
    dims: dict[str, int]
    """Its ``CandidateNet`` shape (empty: the candidate policy's)."""

    def label(self, run: Path, name: str, episodes: int, seed0: int, scorer: Any, progress: bool) -> Path:
        """One round's labels file (``RUN/labels/NAME.npz``); ``scorer`` None: the heuristic acts."""
        ...

    def validate(self, scorers: dict[str, Any]) -> dict[str, np.ndarray]:
        """Per stage, its paired differences to the heuristic in every validation cell."""
        ...

    def summarize(self, diffs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
        """The report's ``validation``: per stage, the mean, interval and groups of its differences."""
        ...

    def fine_tune(self, net: Any, run: Path, progress: bool) -> Any:
        """The network PPO trains from ``net`` (called only when ``cfg.ppo.timesteps``)."""
        ...

    def review(self, nets: dict[str, Any], files: list[Path], validation: dict[str, dict[str, float]],
               log: Any) -> dict[str, Any]:
        """What the report adds after ``validation`` (and ``log``, TensorBoard, records)."""
        ...

    def export(self, net: Any, out: Path, report: dict[str, Any], origin: dict[str, Any]) -> Path:
        """The stage kept as a frozen checkpoint in ``out``, read back as serving will."""
        ...


C = TypeVar("C", bound=RecipeConfig)


@dataclass(frozen=True)
class Steps(Generic[C]):
    """A recipe's four steps, written in its module as functions of its config (``RecipeTask``'s
    ``label``, ``validate``, ``summarize`` and ``fine_tune`` with the config first)."""

    label: Callable[[C, Path, str, int, int, Any, bool], Path]
    validate: Callable[[C, dict[str, Any]], dict[str, np.ndarray]]
    summarize: Callable[[C, dict[str, np.ndarray]], dict[str, dict[str, float]]]
    fine_tune: Callable[[C, Any, Path, bool], Any]


class Task(Generic[C]):
    """What every ``RecipeTask`` writes alike: its config, and its ``Steps`` called on it. A recipe's task
    adds ``tag``, ``rule``, ``dims``, ``review`` and ``export``."""

    def __init__(self, cfg: C, steps: Steps[C]) -> None:
        self.cfg, self._steps = cfg, steps

    def label(self, run: Path, name: str, episodes: int, seed0: int, scorer: Any, progress: bool) -> Path:
        return self._steps.label(self.cfg, run, name, episodes, seed0, scorer, progress)

    def validate(self, scorers: dict[str, Any]) -> dict[str, np.ndarray]:
        return self._steps.validate(self.cfg, scorers)

    def summarize(self, diffs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
        return self._steps.summarize(self.cfg, diffs)

    def fine_tune(self, net: Any, run: Path, progress: bool) -> Any:
        return self._steps.fine_tune(self.cfg, net, run, progress)


def learn(task: RecipeTask, run: Path, out: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """A recipe end to end: labels, imitation and DAgger (``imitation_rounds``), the stages validated and
    one kept (``select_stage``, PPO included unless ``ppo.timesteps`` is 0), the report written to
    ``RUN/report.json`` and, with ``out``, the stage kept exported; returns the report."""
    from torch.utils.tensorboard import SummaryWriter

    cfg, lc = task.cfg, task.cfg.labels
    origin = start(cfg, cfg.seed, run)
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    log = SummaryWriter(str(run / "tb" / task.tag))
    net, stats, files = imitation_rounds(
        cfg.seed, cfg.imitation, lc.dagger_rounds, lc.episodes, lc.dagger_episodes, lc.seed0,
        lambda name, n, seed0, scorer: task.label(run, name, n, seed0, scorer, progress), timing, log, **task.dims)
    fine_tune = (lambda net: task.fine_tune(net, run, progress)) if cfg.ppo.timesteps else None
    nets, diffs, chosen, comparisons = select_stage(net, cfg.imitation.margins, task.validate, fine_tune, timing)
    validation = task.summarize(diffs)
    review = task.review(nets, files, validation, log)
    log.close()
    report = {"imitation": stats, "validation": validation, **review, "chosen": chosen,
              "selection": {"rule": task.rule, "comparisons": comparisons},
              "weights_sha256": {n: weights_digest(v) for n, v in nets.items()}, "timing": timing,
              "labels": [f.name for f in files], "total_s": time.perf_counter() - t0}
    write_atomic(run / "report.json", json.dumps(report, indent=1), "--run-dir")
    if out is not None:
        task.export(nets[chosen], out, report, origin)
    return report


def start(cfg: RecipeConfig, seed: int, run: Path) -> dict[str, Any]:
    """Seed everything, create ``run`` with its ``config.json``; returns the provenance of the
    commit and tree the recipe starts from (not those it ends at)."""
    from rlsched.agents.reproducible import provenance, seed_everything

    seed_everything(seed)
    origin = provenance()
    run.mkdir(parents=True, exist_ok=True)
    write_atomic(run / "config.json", cfg.model_dump_json(indent=1), "--run-dir")
    return origin


# ------------------------------------------------------------------ imitation
def imitation_rounds(seed: int, ic: ImitationConfig, rounds: int, episodes: int, dagger_episodes: int, seed0: int,
                     label: Any, timing: dict[str, float], log: Any,
                     **dims: int) -> tuple[Any, dict[str, dict[str, float]], list[Path]]:
    """Round-0 labels (``label(name, episodes, seed0, None)`` -> labels file) and fit, then each
    DAgger round (labels of the states the imitated network visits, at ``ic.dagger_margin``, on
    the next seeds; all rounds' labels refit); returns the last network (``CandidateNet(**dims)``),
    each round's held-out statistics and the label files."""
    from rlsched.agents.labels import load_labels
    from rlsched.agents.scorer_net import imitate, numpy_scorer

    stats: dict[str, dict[str, float]] = {}

    def fit(files: list[Path], name: str) -> Any:
        net = initial_net(seed, **dims)
        stats[name] = imitate(net, load_labels(files), ic.epochs, ic.learning_rate, ic.weight_decay, seed, log,
                              f"imitation_{name}")
        return net

    t = time.perf_counter()
    files = [label("round0", episodes, seed0, None)]
    timing["labels_round0_s"] = time.perf_counter() - t
    net = fit(files, "round0")
    seed0 += episodes
    for r in range(1, rounds + 1):
        t = time.perf_counter()
        files.append(label(f"dagger{r}", dagger_episodes, seed0, numpy_scorer(with_margin(net, ic.dagger_margin))))
        seed0 += dagger_episodes
        timing[f"labels_dagger{r}_s"] = time.perf_counter() - t
        net = fit(files, f"dagger{r}")
    return net, stats, files


def initial_net(seed: int, **dims: int) -> Any:
    """The network an imitation round starts from, seeded here: torch seeds its default generator
    from the OS at start-up, so a network built before any ``manual_seed`` (as the first round's
    was) starts from other weights in every run."""
    import torch

    from rlsched.agents.scorer_net import CandidateNet

    torch.manual_seed(seed)
    return CandidateNet(**dims)


def with_margin(net: Any, margin: float) -> Any:
    """A copy of ``net`` whose proposal bias is ``margin``."""
    import torch

    out = copy.deepcopy(net)
    with torch.no_grad():
        out.proposal_bias.fill_(margin)
    return out


def weights_digest(net: Any) -> str:
    """SHA-256 over a network's tensors (name, then little-endian float32 bytes, sorted by name):
    each stage's weights in the report, so two runs can be compared stage by stage."""
    import hashlib

    h = hashlib.sha256()
    for name, value in sorted(net.tensors().items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(value, dtype="<f4").tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------ validation and the stage kept
def paired_differences(run_cell: Callable[[tuple[Any, ...]], float], cells: Sequence[tuple[Any, ...]],
                       scorers: dict[str, Any], workers: int, ray: str | None) -> dict[str, np.ndarray]:
    """Per stage, its paired difference (points) to the recipe's heuristic in every validation cell,
    in cell order whichever worker ran it. ``run_cell((*cell, scorer))`` is the attainment of one
    cell, the heuristic's where ``scorer`` is None."""
    from rlsched.parallel import run_tasks

    names: list[str | None] = [None, *scorers]  # None: the heuristic itself
    tasks = [(*cell, scorers[n] if n else None) for cell in cells for n in names]
    res = np.array(list(run_tasks(run_cell, tasks, workers, ray))).reshape(-1, len(names))
    return {name: 100 * (res[:, i] - res[:, 0]) for i, name in enumerate(scorers, start=1)}


def summarize_differences(diffs: dict[str, np.ndarray], groups: dict[str, np.ndarray],
                          bands: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    """Mean and 95 % interval of each stage's paired difference, its mean over each of ``groups``
    (name -> cell mask) and its worst mean over ``bands`` (cell masks) as ``worst_cell``."""
    from rlsched.run.interval import ci95_half_width

    out: dict[str, dict[str, float]] = {}
    for name, d in diffs.items():
        row = {"mean": float(d.mean()), "ci95": float(ci95_half_width(d))}
        row.update({key: float(d[sel].mean()) for key, sel in groups.items()})
        row["worst_cell"] = float(min(d[sel].mean() for sel in bands))
        out[name] = row
    return out


def choose_stage(order: list[str], diffs: dict[str, np.ndarray]) -> tuple[str, list[dict[str, Any]]]:
    """The first (simplest) stage of ``order``, unless a later one beats the stage kept so far by
    more than its paired 95 % interval; returns it and every comparison made.

    Validation differences between stages are mostly inside their intervals (a tenth of a point
    on ±0.3), so ``max`` of the means let noise pick the stage: a rerun with another network
    initialisation chose PPO where the shipped report said imitation@1."""
    from rlsched.run.interval import ci95_half_width

    kept, steps = order[0], []
    for name in order[1:]:
        d = diffs[name] - diffs[kept]
        mean, half = float(d.mean()), float(ci95_half_width(d))
        won = bool(mean - half > 0)  # a NaN interval (one cell) never wins
        steps.append({"stage": name, "against": kept, "mean": mean, "ci95": half, "won": won})
        kept = name if won else kept
    return kept, steps


def select_stage(net: Any, margins: Sequence[float], validate: Callable[[dict[str, Any]], dict[str, np.ndarray]],
                 fine_tune: Callable[[Any], Any] | None, timing: dict[str, float]
                 ) -> tuple[dict[str, Any], dict[str, np.ndarray], str, list[dict[str, Any]]]:
    """``net`` at each proposal margin (largest first) validated (``validate(scorers)`` -> paired
    differences) and one kept by ``choose_stage``; then, unless ``fine_tune`` is None, the network
    it trains from the stage kept, validated and chosen the same way. Returns every stage's
    network, every stage's differences, the stage chosen and the comparisons made."""
    from rlsched.agents.scorer_net import numpy_scorer

    t = time.perf_counter()
    nets = {f"imitation@{m:g}": with_margin(net, m) for m in sorted(margins, reverse=True)}
    diffs = validate({n: numpy_scorer(v) for n, v in nets.items()})
    timing["validation_imitation_s"] = time.perf_counter() - t
    chosen, comparisons = choose_stage(list(nets), diffs)
    if fine_tune is not None:
        t = time.perf_counter()
        nets["ppo"] = fine_tune(nets[chosen])
        timing["ppo_s"] = time.perf_counter() - t
        t = time.perf_counter()
        diffs.update(validate({"ppo": numpy_scorer(nets["ppo"])}))
        timing["validation_ppo_s"] = time.perf_counter() - t
        chosen, more = choose_stage([chosen, "ppo"], diffs)
        comparisons += more
    return nets, diffs, chosen, comparisons


# ------------------------------------------------------------------ MaskablePPO
def maskable_ppo(p: MaskablePPOConfig, seed: int, net: Any, make_env: Any, policy: Any, run: Path, progress: bool,
                 tag: str, shadow: str) -> Any:
    """Fine-tune ``net`` (a ``CandidateNet``) with sb3-contrib's ``MaskablePPO`` on ``p.n_envs``
    copies of ``make_env()`` (paired-reward environments: ``info`` carries deviations, decisions
    and both credits), TensorBoard in ``RUN/tb`` under ``tag/``, the differential-return curve
    against ``shadow`` in ``RUN/ppo_curve.*``; returns the trained network (a new one of ``net``'s shape)."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    def make(rank: int) -> Any:
        def thunk() -> Any:
            env = Monitor(make_env(), info_keywords=("deviations", "decisions", "agent_credit", "shadow_credit"))
            env.reset(seed=seed + 7919 * rank)
            return env
        return thunk

    venv = VecNormalize(DummyVecEnv([make(i) for i in range(p.n_envs)]), norm_obs=False, norm_reward=True,
                        gamma=p.gamma)
    model = MaskablePPO(policy, venv, learning_rate=p.learning_rate, n_steps=p.n_steps,
                        batch_size=p.batch_size, n_epochs=p.n_epochs, gamma=p.gamma, gae_lambda=p.gae_lambda,
                        clip_range=p.clip_range, ent_coef=p.ent_coef, seed=seed, device="cpu",
                        tensorboard_log=str(run / "tb"), verbose=0)
    with torch.no_grad():
        for mod in (model.policy.pi_features_extractor, model.policy.vf_features_extractor):
            mod.get_submodule("net").load_state_dict(net.state_dict())
    metrics = _differential_metrics(tag)
    model.learn(total_timesteps=p.timesteps, progress_bar=progress, tb_log_name="ppo", callback=metrics)
    venv.close()
    _write_curve(metrics.episodes, run, shadow)
    trained = copy.deepcopy(net)
    trained.load_state_dict(model.policy.pi_features_extractor.get_submodule("net").state_dict())
    return trained


def _differential_metrics(tag: str) -> Any:
    """A callback, its class built here: SB3 imports stay inside training."""
    from stable_baselines3.common.callbacks import BaseCallback

    class DifferentialMetrics(BaseCallback):
        """TensorBoard: the differential return (agent − shadow heuristic, SLO credits) and
        how often the agent leaves the heuristic's proposal, per finished episode."""

        episodes: list[tuple[int, float, float]] = []
        """(timesteps, differential return, deviation share) per finished episode."""

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                ep = info.get("episode")
                if ep is not None:
                    self.episodes.append((self.num_timesteps, float(ep["r"]),
                                          float(info["deviations"]) / max(1.0, float(info["decisions"]))))
                    self.logger.record_mean(f"{tag}/differential_return", float(ep["r"]))
                    self.logger.record_mean(f"{tag}/agent_credit", float(info["agent_credit"]))
                    self.logger.record_mean(f"{tag}/shadow_credit", float(info["shadow_credit"]))
                    self.logger.record_mean(f"{tag}/deviation_share",
                                            float(info["deviations"]) / max(1.0, float(info["decisions"])))
            return True

    return DifferentialMetrics()


def _write_curve(episodes: list[tuple[int, float, float]], run: Path, shadow: str) -> None:
    """``RUN/ppo_curve.csv`` and ``.png``: the differential return against the shadow heuristic
    (SLO credits, realtime = 1) per training episode, with a rolling mean."""
    import csv

    with atomic_open(run / "ppo_curve.csv", "w", "--run-dir", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timesteps", "differential_return", "deviation_share"])
        w.writerows(episodes)
    if len(episodes) < 2:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlsched.plotstyle import style_of

    steps, ret, dev = (np.asarray(x) for x in zip(*episodes))
    k = max(1, len(ret) // 20)
    roll = np.convolve(ret, np.ones(k) / k, mode="valid")
    agent, static = style_of("pick"), style_of("static")
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(steps, ret, ".", color=agent.color, ms=2, alpha=0.3, label="episode")
    ax.plot(steps[k - 1:], roll, color=agent.color, lw=2, label=f"rolling mean ({k} episodes)")
    ax.axhline(0, color=static.color, lw=1.2, linestyle="--", label=shadow)
    ax.set_xlabel("PPO timesteps")
    ax.set_ylabel("agent − shadow\n(SLO credits)")
    ax.set_title(f"deviation from the shadow's choice: {100 * dev[-k:].mean():.0f} % of decisions (last {k})",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_open(run / "ppo_curve.png", "wb", "--run-dir") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


__all__ = ["EXECUTION_FIELDS", "RECIPES", "ImitationConfig", "LabelConfig", "LoadRange", "MaskablePPOConfig",
           "RecipeConfig", "RecipeTask", "Steps", "Strict", "Task", "ValidationConfig", "check_inputs", "choose_stage",
           "imitation_rounds", "initial_net", "learn", "load_config", "maskable_ppo", "paired_differences",
           "recipe_config", "recipe_of", "recorded", "select_stage", "start", "summarize_differences",
           "weights_digest", "with_margin"]
