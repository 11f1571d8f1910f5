"""The grid of runs: every (scenario, policy, seed, load), ``rlsched eval``'s runner (``run_grid``; its
report is ``rlsched.evaluation.report``). One run is ``rlsched.run`` (``RunSpec``, ``simulate``),
re-exported here for the callers that import it from ``rlsched.evaluation.runs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched.errors import ConfigError, RlschedError
from rlsched.parallel import progress_bar, run_tasks
from rlsched.routing.routers import check_spec
from rlsched.routing.spec import StageSpec
from rlsched.run.engine import RECORD_FIELDS, RunSpec, prepare, prepare_stage, simulate, sp_cost, write_records
from rlsched.sim import load_scenario

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


__all__ = ["RECORD_FIELDS", "Grid", "RunSpec", "StageSpec", "check_grid", "prepare", "prepare_stage", "run_grid",
           "simulate", "sp_cost", "spec_for", "write_records"]
