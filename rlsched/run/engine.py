"""One run: a policy (``POLICY[@ROUTER]``) on a seeded scenario workload — what ``rlsched simulate`` runs,
and what training, tuning, labels and validation run to score a policy (``RunSpec``, ``prepare``,
``prepare_stage``, ``simulate``). The spec is parsed once into a ``StageSpec`` (``rlsched.routing.spec``).
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
from rlsched.errors import ConfigError
from rlsched.policies import make_policy
from rlsched.policies.base import calibrates
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


__all__ = ["RECORD_FIELDS", "RunSpec", "prepare", "prepare_stage", "simulate", "sp_cost", "write_records"]
