"""The candidate policy's recipe, one command: labels → imitation → DAgger → MaskablePPO → validation → export.

1. Label states the heuristic visits with the look-ahead teacher (``rlsched.agents.labels``).
2. Imitate: regress score(candidate) − score(proposal) on the label advantage.
3. DAgger: label states the imitated policy visits itself, aggregate, imitate again.
4. Fine-tune with sb3-contrib's ``MaskablePPO`` on ``rlsched/DiTPick-v0`` (reward: SLO credit
   minus a shadow heuristic's on the same workload), TensorBoard in ``RUN/tb``.
5. Validate every stage's policy paired against the heuristic on validation seeds (900+),
   choose a stage by ``choose_stage`` (the simplest, unless a later one wins by more than the
   paired 95 % interval) and export it as a frozen scorer (``kind: pick``).

Workload seeds: labels and PPO below 900, validation 900-999, evaluation (``rlsched eval``) >= 1000.
The recipe is deterministic for its ``seed`` (``rlsched.agents.reproducible``): the same config
gives the same labels, weights and checkpoint content hash, however many workers ran it.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlsched.atomic import atomic_open, write_atomic
from rlsched.errors import ConfigError
from rlsched.evaluation.seeds import TRAIN_SEEDS, VALIDATION_SEEDS
from rlsched.sim.yamlio import read_yaml

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """A recipe config block: unknown keys refused, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LabelConfig(Strict):
    episodes_per_scenario: int = Field(default=24, ge=1)
    seed0: int = Field(default=0, ge=0, lt=TRAIN_SEEDS.stop)
    future_s: float = Field(default=600.0, ge=0)
    """Hindsight horizon of the teacher (0: realizable, present requests only)."""
    every: int = Field(default=2, ge=1)
    duration_s: float = Field(default=7200.0, gt=0)
    dagger_rounds: int = Field(default=1, ge=0)
    dagger_episodes_per_scenario: int = Field(default=12, ge=1)


class ImitationConfig(Strict):
    epochs: int = Field(default=40, ge=1)
    learning_rate: float = Field(default=3e-3, gt=0)
    weight_decay: float = Field(default=1e-4, ge=0)
    margins: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    """Proposal margins (class-weighted requests) tried on the validation seeds; the best is kept."""
    dagger_margin: float = Field(default=1.0, ge=0)
    """Margin of the policy that visits the states of a DAgger round."""


class PPOStage(Strict):
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


class ValidationConfig(Strict):
    seeds: tuple[int, ...] = tuple(VALIDATION_SEEDS[:10])
    rate_scales: tuple[float, ...] = (0.5, 1.0, 1.5)
    duration_s: float = Field(default=7200.0, gt=0)

    @field_validator("seeds")
    @classmethod
    def _validation_seeds(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or not all(s in VALIDATION_SEEDS for s in v):
            raise ValueError("validation seeds must be in [900, 1000) (evaluation uses >= 1000)")
        return v


class PickConfig(Strict):
    name: str = "pick"
    kind: str = "pick"
    scenarios: tuple[str, ...] = ("default", "omni-mix", "trace-azure", "bursty")
    """Request-mode scenarios (step mode runs the heuristic's proposal)."""
    static: str = "agents/tuned/{scenario}.json"
    """The strengthened heuristic per scenario (proposal, rollouts, shadow)."""
    rate_scale: tuple[float, float] = (0.5, 1.5)
    labels: LabelConfig = LabelConfig()
    imitation: ImitationConfig = ImitationConfig()
    ppo: PPOStage = PPOStage()
    validation: ValidationConfig = ValidationConfig()
    workers: int = Field(default=2, ge=1)
    ray: str | None = None
    """Ray cluster for labels and validation (``rlsched.parallel``); None: ``workers`` local processes."""
    seed: int = 0


def load_pick_config(path: str | Path, **overrides: Any) -> PickConfig:
    return load_config(PickConfig, path, **overrides)


def load_config(model: type[M], path: str | Path, **overrides: Any) -> M:
    """A recipe preset (YAML) as ``model``, with ``overrides`` that are not None; the first
    invalid field is a ``ConfigError`` naming the file and the field."""
    from pydantic import ValidationError

    data = read_yaml(Path(path)) or {}
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return model(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"{path}: {'.'.join(str(x) for x in err['loc'])}", err["msg"]) from None


# ------------------------------------------------------------------ stages
def _label(cfg: PickConfig, run: Path, name: str, episodes: int, seed0: int, scorer: Any,
           progress: bool) -> Path:
    from rlsched.agents.labels import generate, label_tasks, save_labels

    lc = cfg.labels
    tasks = label_tasks(list(cfg.scenarios), cfg.static, episodes, seed0, cfg.rate_scale, lc.future_s, lc.every,
                        lc.duration_s, scorer)
    parts = generate(tasks, cfg.workers, progress, cfg.ray)
    meta = {"round": name, "episodes": len(tasks), "seeds": [seed0, seed0 + episodes - 1], "future_s": lc.future_s}
    return save_labels(run / "labels" / f"{name}.npz", parts, meta)


def _validate_one(task: tuple[str, str, int, float, float, Any]) -> float:
    from rlsched.evaluation import RunSpec, prepare
    from rlsched.learned.pick import PickPolicy
    from rlsched.policies.static import load_static
    from rlsched.sim.metrics import summarize

    scenario, static, seed, load, duration, scorer = task
    sim = prepare(RunSpec(scenario, "validate", seed, load, duration))
    base = load_static(static)
    sim.run(base if scorer is None else PickPolicy(scorer, base))
    return float(summarize(sim)["weighted_slo_attainment"])


def validate(cfg: PickConfig, scorers: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Paired mean difference (points) vs the heuristic per stage, per scenario and overall."""
    return summarize_validation(cfg, validation_differences(cfg, scorers))


def validation_differences(cfg: PickConfig, scorers: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per stage, its paired difference to the heuristic (points) in every validation cell
    (scenario × load × seed, in that order), gathered in task order whichever worker ran a cell."""
    from rlsched.parallel import run_tasks

    v = cfg.validation
    names: list[str | None] = [None, *scorers]  # None: the heuristic itself
    tasks = [(sc, cfg.static.format(scenario=sc), s, rs, v.duration_s, scorers[n] if n else None)
             for sc, s, rs in _cells(cfg) for n in names]
    res = np.array(list(run_tasks(_validate_one, tasks, cfg.workers, cfg.ray))).reshape(-1, len(names))
    return {name: 100 * (res[:, i] - res[:, 0]) for i, name in enumerate(scorers, start=1)}


def _cells(cfg: PickConfig) -> list[tuple[str, int, float]]:
    v = cfg.validation
    return [(sc, s, rs) for sc in cfg.scenarios for rs in v.rate_scales for s in v.seeds]


def summarize_validation(cfg: PickConfig, diffs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Mean and 95 % interval of each stage's paired difference, its mean per scenario, its worst cell."""
    from rlsched.evaluation import ci95_half_width

    v, cells = cfg.validation, _cells(cfg)
    out: dict[str, dict[str, float]] = {}
    for name, d in diffs.items():
        row = {"mean": float(d.mean()), "ci95": float(ci95_half_width(d))}
        for sc in cfg.scenarios:
            sel = np.array([c[0] == sc for c in cells])
            row[sc] = float(d[sel].mean())
        row["worst_cell"] = float(min(d[np.array([c[0] == sc and c[2] == rs for c in cells])].mean()
                                      for sc in cfg.scenarios for rs in v.rate_scales))
        out[name] = row
    return out


SELECTION_RULE = ("stages in order of complexity (imitation at the largest proposal margin first, then smaller "
                  "margins, then PPO); a later stage replaces the one kept only if its paired difference to it "
                  "on the validation cells has a 95 % interval above zero (mean > ci95)")


def choose_stage(order: list[str], diffs: dict[str, np.ndarray]) -> tuple[str, list[dict[str, Any]]]:
    """The first (simplest) stage of ``order``, unless a later one beats the stage kept so far by
    more than its paired 95 % interval; returns it and every comparison made.

    Validation differences between stages are mostly inside their intervals (a tenth of a point
    on ±0.3), so ``max`` of the means let noise pick the stage: a rerun with another network
    initialisation chose PPO where the shipped report said imitation@1."""
    from rlsched.evaluation import ci95_half_width

    kept, steps = order[0], []
    for name in order[1:]:
        d = diffs[name] - diffs[kept]
        mean, half = float(d.mean()), float(ci95_half_width(d))
        won = bool(mean - half > 0)  # a NaN interval (one cell) never wins
        steps.append({"stage": name, "against": kept, "mean": mean, "ci95": half, "won": won})
        kept = name if won else kept
    return kept, steps


def _ppo(cfg: PickConfig, net: Any, run: Path, progress: bool) -> Any:
    from rlsched.agents.pick import policy_class
    from rlsched.envs.pick import DiTPickEnv

    p = cfg.ppo
    static = {sc: cfg.static.format(scenario=sc) for sc in cfg.scenarios}
    return maskable_ppo(p, cfg.seed, net, lambda: DiTPickEnv(list(cfg.scenarios), static, cfg.rate_scale,
                                                             p.window_s, p.burn_in_s),
                        policy_class(), run, progress)


def maskable_ppo(p: PPOStage, seed: int, net: Any, make_env: Any, policy: Any, run: Path, progress: bool,
                 tag: str = "pick", shadow: str = "shadow heuristic (static)") -> Any:
    """Fine-tune ``net`` (a ``CandidateNet``) with sb3-contrib's ``MaskablePPO`` on ``p.n_envs``
    copies of ``make_env()`` (paired-reward environments: ``info`` carries deviations, decisions
    and both credits), TensorBoard in ``RUN/tb``, the differential-return curve in
    ``RUN/ppo_curve.*``; returns the trained network (a new one of ``net``'s shape)."""
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
            mod.net.load_state_dict(net.state_dict())  # type: ignore[union-attr]
    metrics = _PickMetrics(tag)
    model.learn(total_timesteps=p.timesteps, progress_bar=progress, tb_log_name="ppo", callback=metrics)
    venv.close()
    _write_curve(metrics.episodes, run, shadow)
    trained = copy.deepcopy(net)
    trained.load_state_dict(model.policy.pi_features_extractor.net.state_dict())  # type: ignore[union-attr]
    return trained


def _PickMetrics(tag: str = "pick") -> Any:  # noqa: N802  (a class built lazily: SB3 imports stay inside training)
    from stable_baselines3.common.callbacks import BaseCallback

    class PickMetrics(BaseCallback):
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

    return PickMetrics()


def _write_curve(episodes: list[tuple[int, float, float]], run: Path,
                 shadow: str = "shadow heuristic (static)") -> None:
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
    pick, static = style_of("pick"), style_of("static")
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(steps, ret, ".", color=pick.color, ms=2, alpha=0.3, label="episode")
    ax.plot(steps[k - 1:], roll, color=pick.color, lw=2, label=f"rolling mean ({k} episodes)")
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


def learn(cfg: PickConfig, run: Path, out: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """The whole recipe (see the module docstring); returns the report also written to RUN/report.json."""
    from torch.utils.tensorboard import SummaryWriter

    from rlsched.agents.pick import numpy_scorer
    from rlsched.agents.reproducible import provenance, seed_everything

    seed_everything(cfg.seed)
    origin = provenance()  # the commit and tree the recipe starts from, not those it ends at
    run.mkdir(parents=True, exist_ok=True)
    write_atomic(run / "config.json", cfg.model_dump_json(indent=1), "--run-dir")
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    log = SummaryWriter(str(run / "tb" / "imitation"))
    net, stats, files = _imitation_rounds(cfg, run, progress, timing, log)
    log.close()
    t = time.perf_counter()
    nets = {f"imitation@{m:g}": with_margin(net, m) for m in sorted(cfg.imitation.margins, reverse=True)}
    diffs = validation_differences(cfg, {n: numpy_scorer(v) for n, v in nets.items()})
    timing["validation_imitation_s"] = time.perf_counter() - t
    chosen, comparisons = choose_stage(list(nets), diffs)
    if cfg.ppo.timesteps:
        t = time.perf_counter()
        nets["ppo"] = _ppo(cfg, nets[chosen], run, progress)
        timing["ppo_s"] = time.perf_counter() - t
        t = time.perf_counter()
        diffs.update(validation_differences(cfg, {"ppo": numpy_scorer(nets["ppo"])}))
        timing["validation_ppo_s"] = time.perf_counter() - t
        chosen, more = choose_stage([chosen, "ppo"], diffs)
        comparisons += more
    report = {"imitation": stats, "validation": summarize_validation(cfg, diffs), "chosen": chosen,
              "selection": {"rule": SELECTION_RULE, "comparisons": comparisons},
              "weights_sha256": {n: weights_digest(v) for n, v in nets.items()}, "timing": timing,
              "labels": [f.name for f in files], "total_s": time.perf_counter() - t0}
    write_atomic(run / "report.json", json.dumps(report, indent=1), "--run-dir")
    if out is not None:
        _export(cfg, nets[chosen], out, report, origin)
    return report


EXECUTION_FIELDS = frozenset({"workers", "ray"})
"""Config fields that say where the recipe ran, not what it computes (results are the same for any)."""


def recipe_config(cfg: PickConfig) -> dict[str, Any]:
    """The config a checkpoint records as ``training_config``: everything but ``EXECUTION_FIELDS``
    (those go to its provenance), so ``--workers 1`` and ``--workers 2`` give one content hash."""
    return cfg.model_dump(mode="json", exclude=set(EXECUTION_FIELDS))


def _imitation_rounds(cfg: PickConfig, run: Path, progress: bool, timing: dict[str, float],
                      log: Any) -> tuple[Any, dict[str, dict[str, float]], list[Path]]:
    lc = cfg.labels
    return imitation_rounds(cfg.seed, cfg.imitation, lc.dagger_rounds, lc.episodes_per_scenario,
                            lc.dagger_episodes_per_scenario, lc.seed0,
                            lambda name, n, seed0, scorer: _label(cfg, run, name, n, seed0, scorer, progress),
                            timing, log)


def imitation_rounds(seed: int, ic: ImitationConfig, rounds: int, episodes: int, dagger_episodes: int, seed0: int,
                     label: Any, timing: dict[str, float], log: Any,
                     **dims: int) -> tuple[Any, dict[str, dict[str, float]], list[Path]]:
    """Round-0 labels (``label(name, episodes, seed0, None)`` -> labels file) and fit, then each
    DAgger round (labels of the states the imitated network visits, at ``ic.dagger_margin``, on
    the next seeds; all rounds' labels refit); returns the last network (``CandidateNet(**dims)``),
    each round's held-out statistics and the label files."""
    from rlsched.agents.labels import load_labels
    from rlsched.agents.pick import imitate, numpy_scorer

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

    from rlsched.agents.pick import CandidateNet

    torch.manual_seed(seed)
    return CandidateNet(**dims)


def weights_digest(net: Any) -> str:
    """SHA-256 over a network's tensors (name, then little-endian float32 bytes, sorted by name):
    each stage's weights in the report, so two runs can be compared stage by stage."""
    import hashlib

    h = hashlib.sha256()
    for name, value in sorted(net.tensors().items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(value, dtype="<f4").tobytes())
    return h.hexdigest()


def _export(cfg: PickConfig, net: Any, out: Path, report: dict[str, Any], origin: dict[str, Any]) -> None:
    from rlsched.agents.pick import export_scorer
    from rlsched.agents.pretrain import read_tuned_actions
    from rlsched.agents.reproducible import PROVENANCE

    statics = tuple(cfg.static.format(scenario=sc) for sc in cfg.scenarios)
    base_action = np.mean(list(read_tuned_actions(statics).values()), axis=0, dtype=np.float64)
    chosen = report["chosen"]
    export_scorer(net, out, {
        "base_action": base_action.tolist(), "projection": {}, "scenarios": list(cfg.scenarios),
        "stage": chosen, "validation": report["validation"][chosen], "selection": report["selection"],
        "training_config": recipe_config(cfg),
        PROVENANCE: {**origin, "execution": cfg.model_dump(mode="json", include=set(EXECUTION_FIELDS)),
                     "train_seconds": report["total_s"]}})


def with_margin(net: Any, margin: float) -> Any:
    import copy

    import torch

    out = copy.deepcopy(net)
    with torch.no_grad():
        out.proposal_bias.fill_(margin)
    return out


__all__ = ["EXECUTION_FIELDS", "ImitationConfig", "PPOStage", "PickConfig", "Strict", "ValidationConfig",
           "choose_stage", "imitation_rounds", "initial_net", "learn", "load_config", "load_pick_config",
           "maskable_ppo", "recipe_config", "validate", "weights_digest", "with_margin"]
