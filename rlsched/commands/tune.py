"""``rlsched tune``: search the fixed action of the ``static`` policy on training seeds.

A plain search over the 9-dim action of ``ProjectedPolicy`` (the projection's own
knobs — starvation, lateness, batching efficiency — are shared by every projection
policy and are not tuned per scenario): trial 0 is the default action, trial 1
earliest-deadline-first among savable requests, trial 2 ``--init`` if given, then
``explore`` of the trials draw uniformly from [-1, 1]^9, and the rest perturb the best
so far with a Gaussian whose width shrinks from 0.5 to 0.05. The objective is the
mean ``weighted_slo_attainment`` over the given seeds and loads (the shipped vectors
are tuned over loads 0.5-1.5 so that one vector serves light load and overload).
Tuning and training use seeds below ``VALIDATION_SEED_BASE`` (900); evaluation
(``rlsched eval``) uses seeds >= 1000, so a tuned action is never scored on the
workloads it was tuned on.

    rlsched tune --scenario default --trials 30 --seeds 0,1,2,3,4,5 --rate-scales 0.5,1,1.5
    rlsched simulate --scenario default --policy static:agents/tuned/default.json --seed 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.cli import command, print_json
from rlsched.errors import ConfigError
from rlsched.evaluation import EVAL_SEED_BASE, VALIDATION_SEED_BASE, RunSpec, prepare
from rlsched.policies.projected import (
    ACTION_DIM,
    ActionParams,
    ProjectedPolicy,
    ProjectionConfig,
    decode_action,
    encode_params,
)
from rlsched.sim import Scenario, load_scenario
from rlsched.sim.metrics import summarize

SEARCH_DIM = ACTION_DIM


@dataclass(frozen=True)
class TuneSpec:
    """One search: where, on which seeds, how many trials."""

    scenario: str
    """Scenario name or path."""
    seeds: tuple[int, ...] = (0, 1)
    """Training seeds (each < EVAL_SEED_BASE)."""
    rate_scales: tuple[float, ...] = (1.0,)
    """Loads the objective averages over."""
    duration_s: float | None = None
    """Arrival window per run; None: the scenario's."""
    trials: int = 40
    search_seed: int = 0
    """Seed of the search's own random draws (not a workload seed)."""
    explore: float = 0.5
    """Fraction of trials drawn uniformly at random; the rest refine the best."""
    init: tuple[float, ...] | None = None
    """An action to try third (e.g. an earlier tuned one), after the two anchors."""

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ConfigError("tune.seeds", "give at least one training seed")
        if max(self.seeds) >= VALIDATION_SEED_BASE or min(self.seeds) < 0:
            raise ConfigError("tune.seeds", f"training seeds must be in [0, {VALIDATION_SEED_BASE}); "
                              f"{VALIDATION_SEED_BASE}-{EVAL_SEED_BASE - 1} are validation seeds and "
                              f"seeds >= {EVAL_SEED_BASE} are kept for evaluation")
        if self.trials < 1:
            raise ConfigError("tune.trials", "must be >= 1")
        if not 0 <= self.explore <= 1:
            raise ConfigError("tune.explore", "must be in [0, 1]")
        if not self.rate_scales or min(self.rate_scales) <= 0:
            raise ConfigError("tune.rate_scales", "give at least one load, each > 0")


@dataclass(frozen=True)
class TuneResult:
    """The best vector found and how it scored."""

    vector: np.ndarray
    score: float
    default_score: float
    scores: tuple[float, ...]
    """Score of every trial, in order."""

    @property
    def action(self) -> np.ndarray:
        return self.vector[:ACTION_DIM]


def default_vector() -> np.ndarray:
    return encode_params(ActionParams())


def deadline_vector() -> np.ndarray:
    """Earliest deadline first among savable requests: equal class weights and urgency
    exponent 1 make the utility w / (deadline − now); full caps, no admission wait."""
    return encode_params(ActionParams((1 / 3, 1 / 3, 1 / 3), (1.0, 1.0, 1.0, 1.0), 0.0, 1.0))


def policy_for(vector: np.ndarray) -> ProjectedPolicy:
    return ProjectedPolicy(decode_action(vector[:ACTION_DIM]), ProjectionConfig())


def objective(spec: TuneSpec, scenario: Scenario, vector: np.ndarray) -> float:
    """Mean weighted SLO attainment of the vector's policy over the spec's seeds and loads."""
    total = 0.0
    for seed in spec.seeds:
        for rate_scale in spec.rate_scales:
            sim = prepare(RunSpec(spec.scenario, "static", seed, rate_scale, spec.duration_s), scenario)
            total += summarize(sim.run(policy_for(vector)))["weighted_slo_attainment"]
    return total / (len(spec.seeds) * len(spec.rate_scales))


def search(spec: TuneSpec, on_trial: Callable[[int, float, float], None] | None = None) -> TuneResult:
    """Random search, then local refinement around the best; ``on_trial(i, score, best)`` reports progress."""
    scenario = load_scenario(spec.scenario)
    rng = np.random.default_rng(spec.search_seed)
    explore = max(1, round(spec.explore * spec.trials))
    best, best_score, scores = default_vector(), -np.inf, []
    for i in range(spec.trials):
        vector = np.asarray(spec.init) if i == 2 and spec.init else _candidate(rng, best, i, explore, spec.trials)
        score = objective(spec, scenario, vector)
        scores.append(score)
        if score > best_score:
            best, best_score = vector, score
        if on_trial:
            on_trial(i, score, best_score)
    return TuneResult(best, best_score, scores[0], tuple(scores))


def _candidate(rng: np.random.Generator, best: np.ndarray, i: int, explore: int, trials: int) -> np.ndarray:
    if i == 0:
        return default_vector()
    if i == 1:
        return deadline_vector()
    if i < explore:
        return rng.uniform(-1.0, 1.0, SEARCH_DIM)
    width = 0.5 * 0.1 ** ((i - explore) / max(1, trials - explore - 1))
    return np.clip(best + rng.normal(0.0, width, SEARCH_DIM), -1.0, 1.0)


def to_json(spec: TuneSpec, result: TuneResult) -> dict[str, Any]:
    """What ``static:PATH`` reads (``action``), plus provenance."""
    return {"scenario": spec.scenario, "seeds": list(spec.seeds), "rate_scales": list(spec.rate_scales),
            "duration_s": spec.duration_s, "trials": spec.trials, "search_seed": spec.search_seed,
            "score": result.score, "default_score": result.default_score,
            "action": [round(float(x), 6) for x in result.action],
            "params": dataclasses.asdict(decode_action(result.action))}


# ------------------------------------------------------------------ CLI


@command("tune", "Search a fixed action for the `static` policy on training seeds (< 1000).")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="default", help="scenario name (envs/NAME.yaml) or path")
    p.add_argument("--trials", type=int, default=40, help="candidate vectors to simulate")
    p.add_argument("--seeds", default="0,1", help=f"training seeds, each < {VALIDATION_SEED_BASE}")
    p.add_argument("--rate-scales", default="1.0", help="comma-separated loads (x nominal rate) to average over")
    p.add_argument("--duration", type=float, help="arrival window per run (default: the scenario's)")
    p.add_argument("--search-seed", type=int, default=0, help="seed of the search's own draws")
    p.add_argument("--init", help="tuned JSON whose action is tried third (e.g. the previous tune)")
    p.add_argument("--out", help="JSON file to write (default: agents/tuned/SCENARIO.json)")
    p.add_argument("--json", action="store_true", help="print the result as JSON, no progress bar")
    p.set_defaults(handler=run)


def _init_action(path: str | None) -> tuple[float, ...] | None:
    if not path:
        return None
    from rlsched.policies.seed import load_static

    return tuple(encode_params(load_static(path).params).tolist())


def run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    spec = TuneSpec(args.scenario, tuple(int(s) for s in args.seeds.split(",")),
                    tuple(float(x) for x in args.rate_scales.split(",")),
                    args.duration, args.trials, args.search_seed, init=_init_action(args.init))
    with Progress(disable=args.json) as bar:
        job = bar.add_task("tuning", total=spec.trials)
        result = search(spec, lambda i, score, best: bar.update(
            job, advance=1, description=f"tuning (best {100 * best:.1f} %)"))
    out = Path(args.out or f"agents/tuned/{Path(spec.scenario).stem}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = to_json(spec, result)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    if args.json:
        print_json(payload)
    else:
        print(f"best weighted SLO attainment {100 * result.score:.2f} % (default action "
              f"{100 * result.default_score:.2f} %) on seeds {list(spec.seeds)}; wrote {out}")
    return 0
