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
``rlsched.agents.recipe.learn`` runs the stages every learned recipe shares; this module holds what
the candidate policy adds: its config and ``PickTask`` (label task, validation cell, PPO environment, review, export).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

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


class PickLabelConfig(LabelConfig):
    episodes_per_scenario: int = Field(default=24, ge=1)
    future_s: float = Field(default=600.0, ge=0)
    """Hindsight horizon of the teacher (0: realizable, present requests only)."""
    every: int = Field(default=2, ge=1)
    duration_s: float = Field(default=7200.0, gt=0)
    dagger_episodes_per_scenario: int = Field(default=12, ge=1)

    @property
    def episodes(self) -> int:
        return self.episodes_per_scenario

    @property
    def dagger_episodes(self) -> int:
        return self.dagger_episodes_per_scenario


class PickConfig(Strict):
    name: str = "pick"
    kind: str = "pick"
    scenarios: tuple[str, ...] = ("default", "omni-mix", "trace-azure", "bursty")
    """Request-mode scenarios (step mode runs the heuristic's proposal)."""
    static: str = "agents/tuned/{scenario}.json"
    """The strengthened heuristic per scenario (proposal, rollouts, shadow)."""
    rate_scale: LoadRange = (0.5, 1.5)
    labels: PickLabelConfig = PickLabelConfig()
    imitation: ImitationConfig = ImitationConfig()
    ppo: MaskablePPOConfig = MaskablePPOConfig()
    validation: ValidationConfig = ValidationConfig()
    workers: int = Field(default=2, ge=1)
    ray: str | None = None
    """Ray cluster for labels and validation (``rlsched.parallel``); None: ``workers`` local processes."""
    seed: int = 0

    def check_inputs(self, where: str) -> None:
        """Every scenario and each scenario's tuned file (``static``), read before any work."""
        check_inputs(where, {"scenarios": self.scenarios},
                     {f"static ({sc})": self.static.format(scenario=sc) for sc in self.scenarios})


def load_pick_config(path: str | Path, **overrides: Any) -> PickConfig:
    return load_config(PickConfig, path, **overrides)


# ------------------------------------------------------------------ what the candidate policy's recipe adds
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
    from rlsched.learned.pick import PickPolicy
    from rlsched.policies.static import load_static
    from rlsched.run import RunSpec, prepare
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
    v = cfg.validation
    cells = [(sc, cfg.static.format(scenario=sc), s, rs, v.duration_s) for sc, s, rs in _cells(cfg)]
    return recipe.paired_differences(_validate_one, cells, scorers, cfg.workers, cfg.ray)


def _cells(cfg: PickConfig) -> list[tuple[str, int, float]]:
    v = cfg.validation
    return [(sc, s, rs) for sc in cfg.scenarios for rs in v.rate_scales for s in v.seeds]


def summarize_validation(cfg: PickConfig, diffs: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Mean and 95 % interval of each stage's paired difference, its mean per scenario, its worst cell."""
    cells = _cells(cfg)
    groups = {sc: np.array([c[0] == sc for c in cells]) for sc in cfg.scenarios}
    bands = [np.array([c[0] == sc and c[2] == rs for c in cells])
             for sc in cfg.scenarios for rs in cfg.validation.rate_scales]
    return recipe.summarize_differences(diffs, groups, bands)


SELECTION_RULE = ("stages in order of complexity (imitation at the largest proposal margin first, then smaller "
                  "margins, then PPO); a later stage replaces the one kept only if its paired difference to it "
                  "on the validation cells has a 95 % interval above zero (mean > ci95)")


def _ppo(cfg: PickConfig, net: Any, run: Path, progress: bool) -> Any:
    from rlsched.agents.scorer_net import policy_class
    from rlsched.envs.pick import DiTPickEnv

    p = cfg.ppo
    static = {sc: cfg.static.format(scenario=sc) for sc in cfg.scenarios}
    return recipe.maskable_ppo(p, cfg.seed, net,
                               lambda: DiTPickEnv(list(cfg.scenarios), static, cfg.rate_scale, p.window_s, p.burn_in_s),
                               policy_class(), run, progress, tag="pick", shadow="shadow heuristic (static)")


class PickTask(recipe.Task[PickConfig]):
    """The candidate policy as a ``recipe.RecipeTask``."""

    tag = "imitation"
    rule = SELECTION_RULE

    def __init__(self, cfg: PickConfig) -> None:
        super().__init__(cfg, recipe.Steps(_label, validation_differences, summarize_validation, _ppo))
        self.dims: dict[str, int] = {}  # CandidateNet's defaults: the candidate policy's observation

    def review(self, nets: dict[str, Any], files: list[Path], validation: dict[str, dict[str, float]],
               log: Any) -> dict[str, Any]:
        return {}

    def export(self, net: Any, out: Path, report: dict[str, Any], origin: dict[str, Any]) -> Path:
        from rlsched.agents.pretrain import read_tuned_actions

        cfg = self.cfg
        statics = tuple(cfg.static.format(scenario=sc) for sc in cfg.scenarios)
        base_action = np.mean(list(read_tuned_actions(statics).values()), axis=0, dtype=np.float64)
        chosen = report["chosen"]
        return export_scorer(net, out, {
            "base_action": base_action.tolist(), "projection": {}, "scenarios": list(cfg.scenarios),
            "stage": chosen, "validation": report["validation"][chosen], "selection": report["selection"],
            **recipe.recorded(cfg, report, origin)})


def learn(cfg: PickConfig, run: Path, out: Path | None = None, progress: bool = True) -> dict[str, Any]:
    """The whole recipe (see the module docstring; ``recipe.learn`` over ``PickTask``); returns the report
    also written to RUN/report.json."""
    return recipe.learn(PickTask(cfg), run, out, progress)


def export_scorer(net: Any, out: Path, meta: dict[str, Any]) -> Path:
    """``net`` (a ``CandidateNet``) as ``policy.safetensors`` + ``policy.json`` (kind ``pick``), read back
    by ``rlsched.learned.pick.load_scorer``."""
    from rlsched.learned.checkpoint import save_checkpoint
    from rlsched.learned.observation import GLOBAL_DIM, SCHEMA_VERSION
    from rlsched.learned.pick import PICK_SCHEMA, K, load_scorer

    tensors = net.tensors()
    full = {"kind": "pick", "pick_schema": PICK_SCHEMA, "obs_schema": SCHEMA_VERSION, "global_dim": GLOBAL_DIM,
            "global_out": int(tensors["glob.weight"].shape[0]), "k": K, "layers": ["glob", "hidden.0", "hidden.1",
                                                                                   "out"], **meta}
    save_checkpoint(out, tensors, full)
    load_scorer(out)  # what serving will read, checked now
    return out


def load_net(folder: Path) -> Any:
    """A ``CandidateNet`` with the weights of a frozen scorer (to continue training from it)."""
    import torch

    from rlsched.agents.scorer_net import CandidateNet
    from rlsched.learned.checkpoint import read_safetensors

    t = read_safetensors(Path(folder) / "policy.safetensors")
    net = CandidateNet()
    net.load_state_dict({k: torch.as_tensor(v) for k, v in t.items()})
    return net


__all__ = ["PickConfig", "PickLabelConfig", "PickTask", "export_scorer", "learn", "load_net", "load_pick_config",
           "validate", "validation_differences"]
