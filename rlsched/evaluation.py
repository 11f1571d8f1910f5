"""Run policies on seeded scenario workloads and collect their metrics side by side."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched import bounds
from rlsched.atomic import atomic_open, write_atomic
from rlsched.errors import ConfigError, RlschedError
from rlsched.parallel import run_tasks
from rlsched.policies import make_policy
from rlsched.policies.base import parse_spec
from rlsched.policies.routers import check_spec, split_pair, split_view
from rlsched.sim import Scenario, Simulator, load_scenario
from rlsched.sim.metrics import json_safe, summarize


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

    def __post_init__(self) -> None:  # the flags' own bounds, for a run built in code too
        bounds.REPLICAS.check(self.replicas, "--replicas")
        bounds.SP_DEGREE.check(self.sp_degree, "--sp")

    @property
    def staged(self) -> bool:
        """Run as a multi-replica stage: more than one replica, more than one GPU each, or a
        ``POLICY@ROUTER`` spec."""
        return self.replicas > 1 or self.sp_degree > 1 or "@" in self.policy


def prepare(spec: RunSpec, scenario: Scenario | None = None) -> Simulator:
    """A fresh simulator holding the seeded workload of ``spec`` (not yet run): one GPU, so a
    scenario that declares ``replicas`` is refused (``simulate`` runs it as a stage)."""
    sc = scenario or load_scenario(spec.scenario)
    sc.require_one_gpu("a one-GPU simulator")
    if spec.mode:
        sc = sc.with_serving(mode=spec.mode)
    cost = sc.cost()
    reqs = sc.requests(spec.seed, spec.rate_scale, spec.duration_s, spec.trace, cost=cost)
    return Simulator(reqs, cost, sc.serving)


def simulate(spec: RunSpec, scenario: Scenario | None = None) -> tuple[Any, dict[str, Any]]:
    """Run one policy; returns the finished simulator (a ``Stage`` for a multi-replica spec or
    scenario) and its metrics (with ``per_replica`` for a stage)."""
    sc = scenario or load_scenario(spec.scenario)
    if spec.staged or sc.replicas:
        return _simulate_stage(spec, sc)
    sim = prepare(spec, sc).run(make_policy(spec.policy))
    metrics = summarize(sim)
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
    if sc.replicas:
        return Stage(reqs, sc.replica_specs(cost), seed=spec.seed)
    return Stage.uniform(reqs, spec.replicas, sp_cost(sc, cost, spec.sp_degree), sc.serving, seed=spec.seed)


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
    from rlsched.policies.routers import run_spec
    from rlsched.sim.metrics import summarize_stage

    stage = run_spec(prepare_stage(spec, sc), spec.policy)
    layout = {"gpus": sc.gpus} if sc.replicas else {"gpus": spec.replicas * spec.sp_degree,
                                                     "sp_degree": spec.sp_degree}
    return stage, {"policy": spec.policy, "scenario": spec.scenario, "seed": spec.seed,
                   "rate_scale": spec.rate_scale, "mode": stage.specs[0].serving.mode,
                   "replicas": len(stage.replicas), **layout, **summarize_stage(stage)}


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


# ------------------------------------------------------------------ the grid

EVAL_SEED_BASE = 1000
"""Evaluation seeds start here; nothing trains, tunes or selects checkpoints on them."""
VALIDATION_SEED_BASE = 900
"""Seeds [900, 1000) choose checkpoints during training; training and tuning use seeds below."""


@dataclass(frozen=True)
class Cell:
    """Aggregate of one (scenario, policy, rate_scale) over seeds."""

    scenario: str
    policy: str
    rate_scale: float
    n: int
    mean: dict[str, float]
    ci95: dict[str, float]


SUMMARY_KEYS = ("weighted_slo_attainment", "slo_attainment", "goodput_rps", "latency_p99_s",
                "gpu_compute_util", "batch_size_mean", "requests_failed",
                "per_class.realtime.slo_attainment", "per_class.batch.slo_attainment",
                "per_class.background.slo_attainment")


def flat(metrics: dict[str, Any], key: str) -> float:
    value: Any = metrics
    for part in key.split("."):
        value = value[part]
    return float(value)


def aggregate(rows: list[dict[str, Any]]) -> list[Cell]:
    """Mean and 95 % t-interval half-width over seeds, per (scenario, policy, load)."""
    import numpy as np

    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["scenario"], row["policy"], row["rate_scale"]), []).append(row)
    cells = []
    for (sc, pol, rs), group in groups.items():
        mean, ci = {}, {}
        for key in SUMMARY_KEYS:
            vals = np.array([flat(r, key) for r in group])
            vals = vals[~np.isnan(vals)]
            mean[key] = float(vals.mean()) if vals.size else math.nan
            ci[key] = ci95_half_width(vals)
        cells.append(Cell(sc, pol, rs, len(group), mean, ci))
    return cells


def ci95_half_width(values: Any) -> float:
    """Half-width of the two-sided 95 % t-interval of the mean of ``values`` (NaN below 2)."""
    n = len(values)
    if n < 2:
        return math.nan
    import numpy as np

    return _t95(n) * float(np.std(values, ddof=1)) / math.sqrt(n)


def _t95(n: int) -> float:
    """Two-sided 95 % Student-t quantile for n samples (n−1 dof)."""
    table = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}
    return table.get(n, 1.96 + 2.5 / max(n - 1, 1))


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
                check_spec(spec)
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
    from rich.progress import Progress

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
    with Progress(disable=not progress) as bar:
        job = bar.add_task("evaluating", total=len(tasks))
        for task, (metrics, ratios, sizes) in zip(tasks, run_tasks(_one, tasks, workers, ray)):
            grid.rows.append(metrics)
            for cls, vals in ratios.items():
                grid.latency_ratio.setdefault((task[0], task[1], cls), []).extend(vals)
            grid.batch_sizes.setdefault(task[1], []).extend(sizes)
            bar.advance(job)
    return grid


def headline(cells: list[Cell], target: str, band: tuple[float, float] = (0.4, 0.8)) -> dict[str, Any]:
    """``target`` vs fifo and vs the best other policy, at loads where fifo attains ``band``
    (fifo: ``fifo``, else ``fifo@round-robin`` — vLLM-Omni's own on a multi-replica stage)."""
    key = "weighted_slo_attainment"
    by = {(c.scenario, c.policy, c.rate_scale): c for c in cells}
    base = "fifo" if any(c.policy == "fifo" for c in cells) else BASELINE_STAGED
    out: dict[str, Any] = {"target": target, "per_scenario": {}}
    if base != "fifo":
        out["baseline"] = base
    ratios_fifo, ratios_best = [], []
    for sc in sorted({c.scenario for c in cells}):
        loads = [c.rate_scale for c in cells if c.scenario == sc and c.policy == base
                 and band[0] <= c.mean["slo_attainment"] <= band[1]]
        rows = []
        for rs in sorted(loads):
            tgt, fifo = by[(sc, target, rs)].mean[key], by[(sc, base, rs)].mean[key]
            others = {c.policy: c.mean[key] for c in cells
                      if c.scenario == sc and c.rate_scale == rs and c.policy not in (target,)}
            best_pol = max((p for p in others if p != base), key=lambda p: others[p], default=base)
            rows.append({"rate_scale": rs, "target": tgt, "fifo": fifo, "best": best_pol,
                         "best_value": others[best_pol], "vs_fifo": tgt / fifo if fifo else math.nan,
                         "vs_best": tgt / others[best_pol] if others[best_pol] else math.nan})
            ratios_fifo.append(rows[-1]["vs_fifo"])
            ratios_best.append(rows[-1]["vs_best"])
        out["per_scenario"][sc] = rows
    out["mean_vs_fifo"] = float(sum(ratios_fifo) / len(ratios_fifo)) if ratios_fifo else math.nan
    out["mean_vs_best"] = float(sum(ratios_best) / len(ratios_best)) if ratios_best else math.nan
    return out


LEARNED = ("pick", "rl", "static")
"""Policy prefixes reported against the heuristics, in headline order."""
PLAIN_HEURISTICS = ("fifo", "sjf", "edf", "priority", "drr")
"""The heuristics a user could switch on without rlsched's projection or tuning."""
PLAIN_ROUTERS = ("round-robin", "random", "least-queue", "least-work", "affinity")
"""vLLM-Omni's routers and the plain heuristic routers (not rlsched's, not late binding)."""
BASELINE_STAGED = "fifo@round-robin"
"""vLLM-Omni 0.30 out of the box on a multi-replica stage."""


def _default_view(spec: str) -> str:
    """``POLICY@ROUTER;view=V`` -> ``POLICY@ROUTER`` (the router on its default view)."""
    policy, at, router = spec.rpartition("@")
    return f"{policy}@{split_view(parse_spec(router))[0]}" if at else spec


def is_ceiling(spec: str) -> bool:
    """A router on the replicas' true state (``;view=replica``): a ceiling no deployed router reaches."""
    policy, at, router = spec.rpartition("@")
    return bool(at) and split_view(parse_spec(router))[1].get("view") == "replica"


def plain_combinations(policies: list[str]) -> tuple[str, ...]:
    """The ``PLAIN_HEURISTIC@PLAIN_ROUTER`` specs among ``policies`` (what a user could switch on
    without rlsched): the rivals of a multi-replica grid."""
    out = []
    for p in policies:
        policy, at, router = p.rpartition("@")
        if at and policy in PLAIN_HEURISTICS and router in PLAIN_ROUTERS:
            out.append(p)
    return tuple(out)


def paired(rows: list[dict[str, Any]], target: str, against: tuple[str, ...] = PLAIN_HEURISTICS,
           key: str = "weighted_slo_attainment") -> list[dict[str, Any]]:
    """``target`` against the best of ``against`` at every (scenario, load), paired by seed.

    The best is the policy of ``against`` with the highest mean in that cell; the
    interval is the 95 % t-interval of the per-seed differences (target − best), which
    removes the workload's own variance (seeds differ far more than policies do).
    """
    import numpy as np

    value: dict[tuple[str, float, str], dict[int, float]] = {}
    for r in rows:
        value.setdefault((r["scenario"], r["rate_scale"], r["policy"]), {})[r["seed"]] = flat(r, key)
    out = []
    for sc, rs in sorted({(r["scenario"], r["rate_scale"]) for r in rows}):
        mine = value.get((sc, rs, target))
        rivals = {p: value[(sc, rs, p)] for p in against if (sc, rs, p) in value}
        if not mine or not rivals:
            continue
        best = max(rivals, key=lambda p: float(np.mean(list(rivals[p].values()))))
        seeds = sorted(set(mine) & set(rivals[best]))
        diff = np.array([mine[s] - rivals[best][s] for s in seeds])
        t_mean, b_mean = float(np.mean([mine[s] for s in seeds])), float(np.mean([rivals[best][s] for s in seeds]))
        out.append({"scenario": sc, "rate_scale": rs, "target": t_mean, "best": best, "best_value": b_mean,
                    "ratio": t_mean / b_mean if b_mean else math.nan, "diff": float(diff.mean()),
                    "diff_ci95": ci95_half_width(diff), "seeds": len(seeds)})
    return out


def worst_vs_any(cells: list[Cell], target: str,
                 rival: Callable[[str], bool] = lambda policy: True) -> dict[str, Any]:
    """The cell where ``target`` is lowest relative to the best other policy that ``rival``
    accepts (mean over seeds)."""
    key = "weighted_slo_attainment"
    worst: dict[str, Any] = {}
    for c in cells:
        if c.policy != target:
            continue
        rivals = [o for o in cells if o.scenario == c.scenario and o.rate_scale == c.rate_scale
                  and o.policy != target and rival(o.policy)]
        best = max(rivals, key=lambda o: o.mean[key], default=None)
        if best is None or not best.mean[key]:
            continue
        ratio = c.mean[key] / best.mean[key]
        if not worst or ratio < worst["ratio"]:
            worst = {"scenario": c.scenario, "rate_scale": c.rate_scale, "ratio": ratio, "best": best.policy}
    return worst


REPORT_FILES = ("results.json", "results.md", "slo_vs_load.png", "latency_cdf.png", "batch_sizes.png")
"""What ``write_report`` writes into its folder (``rlsched eval`` checks each before the first run)."""


def write_report(grid: Grid, out: Path, flag: str | None = "--out") -> dict[str, Any]:
    """results.md, results.json and plots under ``out`` (``REPORT_FILES``); returns the JSON summary."""
    out.mkdir(parents=True, exist_ok=True)
    cells = aggregate(grid.rows)
    names = list(dict.fromkeys(c.policy for c in cells))
    # the headline policy: the learned candidate policy, else the learned knob policy, else static
    target = next((p for prefix in LEARNED for p in names if p.startswith(prefix)), None)
    summary: dict[str, Any] = {
        "cells": [dataclasses.asdict(c) for c in cells],
        "seeds": sorted({r["seed"] for r in grid.rows}),
    }
    staged = any("@" in p for p in names)
    if target:
        summary["headline"] = headline(cells, target)
        rivals = plain_combinations(names) if staged else PLAIN_HEURISTICS
        if staged:
            summary["plain"] = list(rivals)
            # every rival a user can deploy: a router on the replicas' true state (view=replica) is a ceiling
            summary["worst_vs_any"] = worst_vs_any(cells, target, lambda p: not is_ceiling(p))
            summary["worst_vs_early"] = worst_vs_any(cells, target, lambda p: not p.endswith("@central")
                                                     and not is_ceiling(p))
            # the default (deployed) view against the same spec on another view: what the router gives up to
            # the replicas' true state (view=replica), what the replicas' published states add over the ledger
            summary["views"] = {p: paired(grid.rows, _default_view(p), (p,)) for p in names
                                if _default_view(p) != p and _default_view(p) in names}
            # late vs early binding: each POLICY@central against the same policy behind rlsched's router
            summary["late_vs_early"] = {p: paired(grid.rows, p, (p[:-len("central")] + "rlsched",)) for p in names
                                        if p.endswith("@central") and p[:-len("central")] + "rlsched" in names}
            # the learned router against rlsched's router behind the same replica policy (issue 20)
            learned = {p: split_pair(p)[0] + "@rlsched" for p in names if split_pair(p)[1].split(":")[0] == "router"}
            summary["router_vs_rlsched"] = {p: paired(grid.rows, p, (twin,)) for p, twin in learned.items()
                                            if twin in names}
        summary["paired"] = {p: paired(grid.rows, p, rivals) for p in names if p.startswith(LEARNED)}
        static = [p for p in names if p.startswith("static")]
        summary["paired_vs_static"] = {p: paired(grid.rows, p, tuple(static)) for p in names
                                       if p.startswith(LEARNED[:2]) and static}
    write_atomic(out / "results.json", json.dumps(json_safe(summary), indent=1), flag)
    shown = labels(names)
    write_atomic(out / "results.md", _markdown(cells, summary.get("headline"), shown, summary.get("worst_vs_any"))
                 + _paired_markdown(summary, shown), flag)
    _plots(grid, cells, out, shown)
    return summary


def label(policy: str) -> str:
    """Short display name: ``static:agents/tuned/{scenario}.json`` → ``static (tuned)``."""
    inner, at, router = policy.rpartition("@")
    if at and inner:
        return f"{label(inner)}@{router}"
    name, _, arg = policy.partition(":")
    if name == "static" and arg:
        return "static (tuned)"
    if name == "rl":
        return f"rl ({Path(arg).name})" if arg else "rl (default)"
    if name == "pick":
        return f"pick ({Path(arg.split(';')[0]).name or 'default'})"
    return policy


_SEPARATORS = re.compile(r"([/:;=,.])")


def labels(policies: list[str]) -> dict[str, str]:
    """Display name of every spec in ``policies``, each one distinct.

    A spec keeps its short ``label`` when no other spec shares it; specs that would share
    one get the part of the spec where they differ added, e.g. ``static:agents/tuned/default.json``
    and ``static:agents/tuned/bursty.json`` → ``static (tuned: default)``, ``static (tuned: bursty)``."""
    specs = list(dict.fromkeys(policies))
    groups: dict[str, list[str]] = {}
    for spec in specs:
        groups.setdefault(label(spec), []).append(spec)
    out: dict[str, str] = {}
    for short, group in groups.items():
        if len(group) == 1:
            out[group[0]] = short
            continue
        for spec, part in zip(group, _differing_parts(group)):
            out[spec] = f"{short[:-1]}: {part})" if short.endswith(")") else f"{short} ({part})"
    taken = list(out.values())
    # a disambiguated name that met another spec's name: those specs are shown as written
    return {spec: spec if taken.count(name) > 1 else name for spec, name in out.items()}


def _differing_parts(specs: list[str]) -> list[str]:
    """Per spec, what remains once the separator-delimited head and tail all ``specs`` share are
    cut off (the whole spec where nothing remains)."""
    tokens = [_SEPARATORS.split(s) for s in specs]
    shortest = min(len(t) for t in tokens)
    head = 0
    while head < shortest and len({t[head] for t in tokens}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({t[-1 - tail] for t in tokens}) == 1:
        tail += 1
    parts = ["".join(t[head:len(t) - tail]).strip("/:;=,.") for t in tokens]
    return [part or spec for part, spec in zip(parts, specs)]


def _pm(cell: Cell, key: str, pct: bool = True) -> str:
    m, ci = cell.mean[key], cell.ci95[key]
    if math.isnan(m):
        return "-"
    scale = 100 if pct else 1
    half = "" if math.isnan(ci) else f" ± {scale * ci:.1f}"
    return f"{scale * m:.1f}{half}"


def _markdown(cells: list[Cell], head: dict[str, Any] | None, shown: dict[str, str],
              worst: dict[str, Any] | None = None) -> str:
    """``shown``: each policy spec's display name (``labels``); ``worst``: ``worst_vs_any``."""
    lines = ["Class-weighted SLO attainment (%), mean ± 95 % interval over seeds.", ""]
    for sc in sorted({c.scenario for c in cells}):
        loads = sorted({c.rate_scale for c in cells if c.scenario == sc})
        lines += [f"### {sc}", "", "| policy | " + " | ".join(f"load ×{x:g}" for x in loads) + " |",
                  "|---|" + "---|" * len(loads)]
        for pol in dict.fromkeys(c.policy for c in cells):
            row = {c.rate_scale: c for c in cells if c.scenario == sc and c.policy == pol}
            lines.append(f"| {shown[pol]} | " + " | ".join(_pm(row[x], "weighted_slo_attainment") for x in loads)
                         + " |")
        lines.append("")
    if head:
        base = head.get("baseline")
        lines += [f"### {shown[head['target']]} at loads where {base or 'FIFO'} meets 40–80 % of SLOs", "",
                  f"| scenario | load | target | {base or 'fifo'} | best other | ×{base or 'fifo'} | ×best |",
                  "|---|---|---|---|---|---|---|"]
        for sc, rows in head["per_scenario"].items():
            for r in rows:
                lines.append(f"| {sc} | ×{r['rate_scale']:g} | {100 * r['target']:.1f} | {100 * r['fifo']:.1f} | "
                             f"{shown[r['best']]} {100 * r['best_value']:.1f} | {r['vs_fifo']:.2f} | "
                             f"{r['vs_best']:.2f} |")
        lines += ["", f"Mean ratio: ×{head['mean_vs_fifo']:.2f} vs {base or 'fifo'}, "
                      f"×{head['mean_vs_best']:.2f} vs the best other policy.", ""]
    if worst:
        lines += [f"Lowest ratio of {shown[head['target']]} to the best other policy in any cell: "
                  f"×{worst['ratio']:.3f} ({worst['scenario']} ×{worst['rate_scale']:g}, vs {shown[worst['best']]}).",
                  ""]
    return "\n".join(lines)


def _paired_markdown(summary: dict[str, Any], shown: dict[str, str]) -> str:
    """Every load: each projection policy ÷ the best plain heuristic (and each learned policy ÷
    the tuned ``static``), with the paired difference."""
    lines = []
    plain = (f"the best plain router × heuristic ({', '.join(shown[p] for p in summary['plain'])})"
             if "plain" in summary else f"the best plain heuristic ({', '.join(PLAIN_HEURISTICS)})")
    tables = [(pol, rows, plain) for pol, rows in summary.get("paired", {}).items()]
    statics = [name for spec, name in shown.items() if spec.startswith("static")]
    vs_static = ("static (tuned), the strengthened heuristic" if len(statics) < 2
                 else f"the best of {', '.join(statics)}, the strengthened heuristic")
    tables += [(pol, rows, vs_static) for pol, rows in summary.get("paired_vs_static", {}).items()]
    for pol, rows, rival in tables:
        if not rows:
            continue
        lines += [f"### {shown[pol]} vs {rival}, every load", "",
                  "Paired by seed: difference in points, mean ± 95 % interval of the per-seed differences.", "",
                  "| scenario | load | policy | rival | ratio | difference (points) |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            ci = "" if math.isnan(r["diff_ci95"]) else f" ± {100 * r['diff_ci95']:.1f}"
            mark = "**" if r["ratio"] < 0.98 else ""
            lines.append(f"| {r['scenario']} | ×{r['rate_scale']:g} | {100 * r['target']:.1f} | "
                         f"{shown[r['best']]} {100 * r['best_value']:.1f} | {mark}{r['ratio']:.3f}{mark} | "
                         f"{100 * r['diff']:+.1f}{ci} |")
        ratios = [r["ratio"] for r in rows]
        lines += ["", f"Lowest ratio ×{min(ratios):.3f}; mean ×{sum(ratios) / len(ratios):.2f} over {len(rows)} cells "
                  "(bold: below ×0.98).",
                  ""]
    return "\n".join(lines)


def _plots(grid: Grid, cells: list[Cell], out: Path, shown: dict[str, str], keep: bool = False) -> dict[str, Any]:
    """slo_vs_load.png, latency_cdf.png and batch_sizes.png, every policy in its fixed style
    (``rlsched.plotstyle``); returns the figures when ``keep`` (else they are closed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from rlsched.plotstyle import styles_for

    scenarios = sorted({c.scenario for c in cells})
    policies = list(dict.fromkeys(c.policy for c in cells))
    styles = styles_for(policies)
    cols = min(3, len(scenarios))
    rows = -(-len(scenarios) // cols)
    alone = len(scenarios) == 1  # one panel: the legend goes beside it, not over the curves
    size = (8.4, 4.2) if alone else (4.6 * cols, 3.6 * rows + 0.4)
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
    for ax in axes.flat[len(scenarios):]:
        ax.axis("off")
    curves: dict[str, list[float]] = {pol: [] for pol in policies}
    for ax, sc in zip(axes.flat, scenarios):
        for pol in policies:
            pts = sorted((c.rate_scale, c.mean["weighted_slo_attainment"], c.ci95["weighted_slo_attainment"])
                         for c in cells if c.scenario == sc and c.policy == pol)
            x, y, e = (np.array(v, dtype=float) for v in zip(*pts))
            curves[pol] += list(y)
            ax.errorbar(x, 100 * y, yerr=100 * np.nan_to_num(e), capsize=3, label=shown[pol], markersize=5,
                        **styles[pol].line())
        ax.set(title=sc, xlabel="load (× nominal rate)", ylabel="class-weighted SLO attainment %", ylim=(0, 100))
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    if alone:
        fig.legend(handles, names, loc="center right", fontsize=8, ncol=1)
    else:
        fig.legend(handles, names, loc="lower right", fontsize=8, ncol=2, bbox_to_anchor=(0.98, 0.05))
    same = _coinciding(curves, shown)
    if same:
        fig.text(0.01, 0.005, "Lines that coincide (within 1.5 points at every scenario and load): " + "; ".join(same),
                 fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03 if same else 0, 0.62 if alone else 1, 1))
    _savefig(fig, out / "slo_vs_load.png", dpi=100)
    figures = {"slo_vs_load": fig, "latency_cdf": _cdf_plot(grid, scenarios, policies, shown, styles, out, plt, np)}
    fig, ax = plt.subplots(figsize=(6, 3.6))
    top = max((max(v) for v in grid.batch_sizes.values() if v), default=1)
    for pol in policies:
        sizes = grid.batch_sizes.get(pol)
        if sizes:
            share = np.bincount(np.asarray(sizes), minlength=top + 1)[1:] / len(sizes)
            ax.plot(np.arange(1, top + 1), share, drawstyle="steps-mid", label=shown[pol], **styles[pol].line())
    ax.set(title=f"batch sizes at load ×{grid.reference_load:g}, all scenarios", xlabel="batch size",
           ylabel="fraction of batches")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _savefig(fig, out / "batch_sizes.png", dpi=110)
    figures["batch_sizes"] = fig
    if not keep:
        for f in figures.values():
            plt.close(f)
    return figures


def _coinciding(curves: dict[str, list[float]], shown: dict[str, str], points: float = 1.5) -> list[str]:
    """Pairs of policies whose curves never differ by more than ``points``: a reader must be told
    one line hides another rather than see it vanish."""
    names = list(curves)
    return [f"{shown[a]} and {shown[b]}" for i, a in enumerate(names) for b in names[i + 1:]
            if curves[a] and len(curves[a]) == len(curves[b])
            and max(abs(x - y) for x, y in zip(curves[a], curves[b])) * 100 <= points]


def _savefig(fig: Any, path: Path, dpi: int) -> None:
    with atomic_open(path, "wb", "--out") as fh:
        fig.savefig(fh, format="png", dpi=dpi)


def _cdf_plot(grid: Grid, scenarios: list[str], policies: list[str], shown: dict[str, str], styles: dict[str, Any],
              out: Path, plt: Any, np: Any) -> Any:
    classes = ("realtime", "batch", "background")
    fig, axes = plt.subplots(len(scenarios), 3, figsize=(12, 2.8 * len(scenarios)), squeeze=False)
    for row, sc in zip(axes, scenarios):
        for ax, cls in zip(row, classes):
            for pol in policies:
                vals = np.sort(np.asarray(grid.latency_ratio.get((sc, pol, cls), []), dtype=float))
                if vals.size:
                    ax.step(vals, np.arange(1, vals.size + 1) / vals.size, where="post", label=shown[pol],
                            markevery=max(1, vals.size // 6), markersize=4, **styles[pol].line())
            ax.axvline(1.0, color="grey", linestyle=":")
            ax.set(xscale="log", xlim=(0.3, 30), ylim=(0, 1), title=f"{sc} — {cls}",
                   xlabel="latency / SLO", ylabel="CDF")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    _savefig(fig, out / "latency_cdf.png", dpi=100)
    return fig
