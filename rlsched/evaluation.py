"""Run policies on seeded scenario workloads and collect their metrics side by side."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched.policies import make_policy
from rlsched.sim import Scenario, Simulator, load_scenario
from rlsched.sim.metrics import summarize


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


def prepare(spec: RunSpec, scenario: Scenario | None = None) -> Simulator:
    """A fresh simulator holding the seeded workload of ``spec`` (not yet run)."""
    sc = scenario or load_scenario(spec.scenario)
    if spec.mode:
        sc = sc.with_serving(mode=spec.mode)
    cost = sc.cost()
    reqs = sc.requests(spec.seed, spec.rate_scale, spec.duration_s, spec.trace, cost=cost)
    return Simulator(reqs, cost, sc.serving)


def simulate(spec: RunSpec, scenario: Scenario | None = None) -> tuple[Simulator, dict[str, Any]]:
    """Run one policy; returns the finished simulator and its metrics."""
    sim = prepare(spec, scenario).run(make_policy(spec.policy))
    metrics = summarize(sim)
    return sim, {"policy": spec.policy, "scenario": spec.scenario, "seed": spec.seed,
                 "rate_scale": spec.rate_scale, "mode": sim.config.mode, **metrics}


RECORD_FIELDS = ("id", "arrival_s", "first_scheduled_s", "finish_s", "status", "slo_met", "batch_id",
                 "priority", "modality", "height", "width", "num_frames", "num_inference_steps",
                 "slo_s", "preemptions")


def write_records(sim: Simulator, path: str | Path) -> None:
    """One CSV row per request (unfinished ones too) so anyone can check what happened."""
    with Path(path).open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(RECORD_FIELDS)
        for rec in sorted(sim.records.values(), key=lambda r: r.request.id):
            q = rec.request
            out.writerow([q.id, _f(q.arrival_s), _f(rec.first_scheduled_s), _f(rec.finish_s), rec.status,
                          int(rec.slo_met), rec.batch_id, q.priority, q.modality, q.height, q.width,
                          q.num_frames, q.num_inference_steps, _f(q.slo_s), rec.preemptions])


def _f(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.6f}"
