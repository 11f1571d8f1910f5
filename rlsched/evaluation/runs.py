"""Runs: one policy (``POLICY[@ROUTER]``) on a seeded scenario workload, and the grid of them.

``simulate`` is what ``rlsched simulate`` runs; ``run_grid`` is ``rlsched eval``'s runner (its
report is ``rlsched.evaluation.report``). A stage spec is parsed once into a ``StageSpec``
(``rlsched.routing.spec``).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from rlsched import bounds
from rlsched.atomic import atomic_open
from rlsched.errors import ConfigError, RlschedError
from rlsched.parallel import progress_bar, run_tasks
from rlsched.policies import make_policy
from rlsched.policies.base import calibrates
from rlsched.routing.routers import check_spec
from rlsched.routing.spec import StageSpec
from rlsched.sim import Scenario, Simulator, load_scenario
from rlsched.sim.classes import report_names
from rlsched.sim.metrics import summarize
from rlsched.sim.truth import BELIEFS, decided_on


@dataclass(frozen=True)
class RunSpec:
    """One simulated run: scenario × policy × seed × load."""

    scenario: str
    policy: str
    seed: int = 0
    rate_scale: float = 1.0
    duration_s: float | None = None
    """Arrival window; None: the scenario's."""
    mode: str | None = None
    """Override the scenario's execution mode (request|step)."""
    trace: str | None = None
    """Replace the scenario's arrivals/shapes with a trace file."""
    replicas: int = 1
    """Replicas of the scenario's GPU (a multi-replica ``Stage``); arrivals scaled × replicas."""
    sp_degree: int = 1
    """GPUs per replica (sequence parallelism at the profile's ``sp`` coefficients)."""
    belief: str = "profile"
    """What decisions read where the scenario's ``truth:`` differs from its profile: ``profile`` (as
    deployed) or ``truth`` (deployed with the true profile: the reference a calibration aims at)."""

    def __post_init__(self) -> None:  # the flags' own bounds, for a run built in code too
        bounds.REPLICAS.check(self.replicas, "--replicas")
        bounds.SP_DEGREE.check(self.sp_degree, "--sp")
        if self.belief not in BELIEFS:
            raise ConfigError("--belief", f"{self.belief!r}: one of {', '.join(BELIEFS)}")

    @cached_property
    def stage(self) -> StageSpec:
        """``policy`` parsed (once, at first use)."""
        return StageSpec.parse(self.policy)

    @property
    def staged(self) -> bool:
        """Run as a multi-replica stage: more than one replica, more than one GPU each, or a
        ``POLICY@ROUTER`` spec."""
        return self.replicas > 1 or self.sp_degree > 1 or self.stage.routed


def prepare(spec: RunSpec, scenario: Scenario | None = None) -> Simulator:
    """A fresh simulator holding the seeded workload of ``spec`` (not yet run): one GPU, so a
    scenario that declares ``replicas`` is refused (``simulate`` runs it as a stage)."""
    sc = scenario or load_scenario(spec.scenario)
    sc.require_one_gpu("a one-GPU simulator")
    if spec.mode:
        sc = sc.with_serving(mode=spec.mode)
    cost = sc.cost()
    reqs = sc.requests(spec.seed, spec.rate_scale, spec.duration_s, spec.trace, cost=cost)
    cost, truth = decided_on(spec.belief, cost, sc.true_cost(cost))
    return Simulator(reqs, cost, sc.serving, truth=truth, calibrate=calibrates(spec.policy))


def simulate(spec: RunSpec, scenario: Scenario | None = None) -> tuple[Any, dict[str, Any]]:
    """Run one policy; returns the finished simulator (a ``Stage`` for a multi-replica spec or
    scenario) and its metrics (with ``per_replica`` for a stage)."""
    sc = scenario or load_scenario(spec.scenario)
    if spec.staged or sc.replicas:
        return _simulate_stage(spec, sc)
    sim = prepare(spec, sc).run(make_policy(spec.policy))
    metrics = summarize(sim, report_names(sc.class_table))
    return sim, {"policy": spec.policy, "scenario": spec.scenario, "seed": spec.seed,
                 "rate_scale": spec.rate_scale, "mode": sim.config.mode, **metrics}


def prepare_stage(spec: RunSpec, sc: Scenario) -> Any:
    """A fresh ``Stage`` holding the seeded workload of ``spec`` (not yet run): the scenario's own
    replicas, or ``spec.replicas`` replicas of ``spec.sp_degree`` GPUs of a one-GPU scenario
    (arrivals scaled × replicas)."""
    from rlsched.sim.stage import Stage

    if sc.replicas and (spec.replicas, spec.sp_degree) != (1, 1):
        raise ConfigError("--replicas", f"scenario {sc.name!r} declares its own replicas ({sc.gpus} GPUs); "
                                        "--replicas/--sp apply to one-GPU scenarios")
    if spec.mode:
        sc = sc.with_serving(mode=spec.mode)
    cost = sc.cost()
    scale = spec.rate_scale * (1 if sc.replicas else spec.replicas)
    reqs = sc.requests(spec.seed, scale, spec.duration_s, spec.trace, cost=cost)
    calibrate = calibrates(spec.stage.policy)
    if sc.replicas:
        return Stage(reqs, sc.replica_specs(cost, spec.belief), seed=spec.seed, calibrate=calibrate)
    truth = sc.true_cost(cost)
    wide, true_wide = decided_on(spec.belief, sp_cost(sc, cost, spec.sp_degree),
                                 sp_cost(sc, truth, spec.sp_degree) if truth is not None else None)
    return Stage.uniform(reqs, spec.replicas, wide, sc.serving, seed=spec.seed, truth=true_wide, calibrate=calibrate)


def sp_cost(sc: Scenario, cost: Any, sp_degree: int) -> Any:
    """``cost`` split over ``sp_degree`` GPUs (``--sp``); a profile without the coefficients is an
    error naming the flag, the scenario and its profile (the model's own message said neither)."""
    from rlsched.sim.layout import at_layout

    try:
        return at_layout(cost, sp_degree)
    except ConfigError as exc:
        raise ConfigError("--sp", f"{sp_degree} GPUs per replica on scenario {sc.name!r}: its profile "
                                  f"{sc.profile!r} cannot split a request over GPUs ({exc}); use --sp 1, or a "
                                  "scenario whose profile has an 'sp' block (e.g. qwen-image-h200-vllm-omni)") from None


def _simulate_stage(spec: RunSpec, sc: Scenario) -> tuple[Any, dict[str, Any]]:
    """``prepare_stage`` run under ``POLICY@ROUTER`` (bare: round-robin, as vLLM-Omni routes;
    ``@central``: late binding)."""
    from rlsched.routing.routers import run_spec
    from rlsched.sim.metrics import summarize_stage

    stage = run_spec(prepare_stage(spec, sc), spec.stage)
    layout = {"gpus": sc.gpus} if sc.replicas else {"gpus": spec.replicas * spec.sp_degree,
                                                     "sp_degree": spec.sp_degree}
    return stage, {"policy": spec.policy, "scenario": spec.scenario, "seed": spec.seed,
                   "rate_scale": spec.rate_scale, "mode": stage.specs[0].serving.mode,
                   "replicas": len(stage.replicas), **layout, **summarize_stage(stage, report_names(sc.class_table))}


RECORD_FIELDS = ("id", "arrival_s", "first_scheduled_s", "finish_s", "status", "slo_met", "batch_id",
                 "priority", "modality", "height", "width", "num_frames", "num_inference_steps",
                 "slo_s", "preemptions")


def write_records(sim: Any, path: str | Path, flag: str | None = "--records") -> None:
    """One CSV row per request (unfinished ones too) so anyone can check what happened;
    written whole or not at all (``atomic_open``; ``flag`` names the path in an error)."""
    with atomic_open(Path(path), "w", flag, newline="") as fh:
        out = csv.writer(fh)
        out.writerow(RECORD_FIELDS)
        for rec in sorted(sim.records.values(), key=lambda r: r.request.id):
            q = rec.request
            out.writerow([q.id, _f(q.arrival_s), _f(rec.first_scheduled_s), _f(rec.finish_s), rec.status,
                          int(rec.slo_met), rec.batch_id, q.priority, q.modality, q.height, q.width,
                          q.num_frames, q.num_inference_steps, _f(q.slo_s), rec.preemptions])


def _f(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.6f}"


# ------------------------------------------------------------- grid runner


@dataclass
class Grid:
    """Raw rows (one per run) plus what the plots need."""

    rows: list[dict[str, Any]]
    latency_ratio: dict[tuple[str, str, str], list[float]]
    """(scenario, policy, class) → e2e latency / SLO at the reference load (1.0 or nearest)."""
    batch_sizes: dict[str, list[int]]
    """policy → batch sizes at the reference load, all scenarios."""
    reference_load: float


def _one(task: tuple[str, str, int, float, float | None, float, int, int]) -> tuple[dict[str, Any], dict, list[int]]:
    scenario, policy, seed, rs, duration, ref, replicas, sp = task
    sim, metrics = simulate(RunSpec(scenario, spec_for(policy, scenario), seed, rs, duration,
                                    replicas=replicas, sp_degree=sp))
    metrics["policy"] = policy  # the template, so per-scenario specs group as one policy
    ratios: dict[str, list[float]] = {}
    sizes: list[int] = []
    if rs == ref:
        for rec in sim.records.values():
            q = rec.request
            value = (rec.finish_s - q.arrival_s) / q.slo_s if rec.status == "completed" else math.inf
            ratios.setdefault(q.priority, []).append(value)
        sizes = list(sim.batch_sizes)
    return metrics, ratios, sizes


def spec_for(policy: str, scenario: str) -> str:
    """The policy spec run on ``scenario``: ``{scenario}`` replaced by its name (file stem)."""
    return policy.replace("{scenario}", Path(scenario).stem)


def check_grid(scenarios: list[str], policies: list[str]) -> None:
    """Load every scenario and build every policy spec for every scenario, before any run.

    A grid with ``static:agents/tuned/{scenario}.json`` and a scenario without a tuned file
    used to run every other cell first (minutes to hours) and then fail with nothing
    written. Building a policy is cheap (a checkpoint or a JSON file is read); each
    distinct spec is built once. Every spec that fails is listed in one ``ConfigError``."""
    for sc in dict.fromkeys(scenarios):
        load_scenario(sc)
    problems: list[str] = []
    built: set[str] = set()
    for sc in dict.fromkeys(scenarios):
        for pol in dict.fromkeys(policies):
            spec = spec_for(pol, sc)
            if spec in built:
                continue
            built.add(spec)
            try:
                check_spec(StageSpec.parse(spec))
            except RlschedError as exc:
                where = f" (scenario {Path(sc).stem!r})" if spec != pol else ""
                problems.append(f"{spec!r}{where}: {exc}")
    if problems:
        raise ConfigError("--policies", "; ".join(problems) + " (checked before the first run; nothing was run)")


def run_grid(scenarios: list[str], policies: list[str], seeds: list[int], loads: list[float],
             duration: float | None = None, workers: int = 1, progress: bool = True,
             ray: str | None = None, grid: Grid | None = None, replicas: int = 1, sp_degree: int = 1) -> Grid:
    """Run every (scenario, policy, seed, load); same seed → same workload for all policies.

    ``workers`` and ``ray`` choose where the runs happen (``rlsched.parallel.run_tasks``);
    the rows are the same, in the same order, wherever they ran. Every scenario and policy
    spec is checked first (``check_grid``). ``grid``: an empty ``Grid`` to fill in place, so
    a caller keeps the runs that finished when a later one fails or is interrupted.
    ``replicas`` × ``sp_degree``: run one-GPU scenarios as a stage of that many replicas
    (arrivals × replicas); scenarios that declare ``replicas`` run their own (and refuse these)."""
    check_grid(scenarios, policies)
    if (replicas, sp_degree) != (1, 1):
        own = [sc for sc in dict.fromkeys(scenarios) if load_scenario(sc).replicas]
        if own:
            raise ConfigError("--replicas", f"{', '.join(own)} declare their own replicas; --replicas/--sp "
                                            "apply to one-GPU scenarios")
        for name in dict.fromkeys(scenarios):  # before the first run, not at the first run of that scenario
            sc = load_scenario(name)
            sp_cost(sc, sc.cost(), sp_degree)
    ref = min(loads, key=lambda x: abs(x - 1.0))
    tasks = [(sc, pol, seed, rs, duration, ref, replicas, sp_degree) for sc in scenarios for rs in loads
             for seed in seeds for pol in policies]
    if grid is None:
        grid = Grid([], {}, {}, ref)
    grid.reference_load = ref
    with progress_bar(disable=not progress) as bar:
        job = bar.add_task("evaluating", total=len(tasks))
        for task, (metrics, ratios, sizes) in zip(tasks, run_tasks(_one, tasks, workers, ray)):
            grid.rows.append(metrics)
            for cls, vals in ratios.items():
                grid.latency_ratio.setdefault((task[0], task[1], cls), []).extend(vals)
            grid.batch_sizes.setdefault(task[1], []).extend(sizes)
            bar.advance(job)
    return grid

