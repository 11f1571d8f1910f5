"""``rlsched plan``: which layout N GPUs should serve a scenario with.

A layout is R replicas of d GPUs each (R × d = N), every replica split by sequence
parallelism at degree d (the profile's ``sp`` method). vLLM-Omni 0.30 gives a stage one
``parallel_config``, so all replicas of a stage share one layout: mixed layouts (some
replicas wide, some narrow) would need two stages and a router between them, which the
engine does not do for one model — they are not enumerated. Each layout is simulated
as a ``Stage`` on paired training seeds (< 900; the same workloads for every layout) at
each load (× the scenario's nominal rate per GPU × N; a multi-replica scenario's rate is
its whole stage's, so × N / its GPUs) under one ``POLICY@ROUTER``. The recommendation is
the layout with the highest mean class-weighted SLO attainment over the loads (ties: the
narrower replicas, which lose less to communication; then no CFG parallelism). ``check_seeds`` (evaluation seeds)
re-runs every layout on workloads the choice never saw and reports what the
recommendation loses to the best layout in hindsight.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.atomic import atomic_open
from rlsched.errors import ConfigError
from rlsched.parallel import run_tasks
from rlsched.policies.base import portable_spec
from rlsched.routing.routers import check_spec, run_spec
from rlsched.routing.spec import StageSpec
from rlsched.run.seeds import EVAL_SEED_BASE, TRAIN_SEEDS
from rlsched.sim import load_scenario
from rlsched.sim.classes import report_names
from rlsched.sim.cost import CFG_DEGREES, SPLayout, load_profile, portable_profile
from rlsched.sim.layout import at_layout
from rlsched.sim.metrics import summarize_stage
from rlsched.sim.stage import Stage

DEGREES = (1, 2, 4, 8)
TRAINING_SEED_LIMIT = TRAIN_SEEDS.stop
"""Planning seeds must stay below the validation (900) and evaluation (1000) seeds."""


@dataclass(frozen=True)
class Layout:
    replicas: int
    degree: int
    """Sequence-parallel degree of each replica (of each CFG group)."""
    cfg: int = 1
    """CFG-parallel degree of each replica (1 or 2 groups of ``degree`` GPUs)."""

    @property
    def gpus_per_replica(self) -> int:
        return self.degree * self.cfg

    @property
    def name(self) -> str:
        if self.cfg == 1:
            return f"{self.replicas}x SP{self.degree}"
        sp = f"SP{self.degree}+" if self.degree > 1 else ""
        return f"{self.replicas}x {sp}CFG{self.cfg}"


def layouts(gpus: int, profile: Any, cfg_degrees: Sequence[int] = CFG_DEGREES) -> list[Layout]:
    """Every R × d × c = ``gpus`` the profile's models can run (degree > 1 needs an ``sp`` block,
    c = 2 a ``cfg_parallel`` block; c among ``cfg_degrees``), narrow replicas first, each SP degree
    without then with CFG."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError("--gpus", f"must be an integer >= 1, not {gpus!r}")
    bad = [c for c in cfg_degrees if c not in CFG_DEGREES]
    if bad or not cfg_degrees:
        raise ConfigError("--cfg-degrees", f"must be some of {list(CFG_DEGREES)}, not {list(cfg_degrees)}")
    out = []
    for d in DEGREES:
        for c in sorted(set(cfg_degrees)):
            if gpus % (d * c):
                continue
            try:
                at_layout(profile, d, c)
            except ConfigError:
                continue  # no sp / cfg_parallel coefficients: not a layout this profile can predict
            out.append(Layout(gpus // (d * c), d, c))
    return out


@dataclass(frozen=True)
class PlanTask:
    scenario: str
    profile: str
    layout: Layout
    spec: StageSpec
    seed: int
    rate_scale: float
    """× the scenario's own rate: the load × the nominal rate per GPU × the GPUs (or × ``--rate``)."""
    duration_s: float | None = None
    """The arrival window (None: the scenario's own)."""


def run_one(task: PlanTask) -> float:
    """Class-weighted SLO attainment of one layout, seed and load."""
    sc = load_scenario(task.scenario)
    cost = load_profile(task.profile)
    wide = at_layout(cost, task.layout.degree, task.layout.cfg)
    reqs = sc.requests(task.seed, rate_scale=task.rate_scale, duration_s=task.duration_s, cost=cost)
    stage = Stage.uniform(reqs, task.layout.replicas, wide, sc.serving, seed=task.seed)
    run_spec(stage, task.spec)
    return float(summarize_stage(stage)["weighted_slo_attainment"])


def profile_of(sc: Any) -> str:
    """The profile a scenario's layouts are planned on: its replicas' (a homogeneous pool), else its own."""
    return (sc.replicas[0].profile if sc.replicas else "") or sc.profile


def plan(scenario: str, gpus: int | None, spec: StageSpec | str, seeds: Sequence[int], loads: Sequence[float],
         profile: str | None = None, workers: int = 1, ray: str | None = None,
         progress: Callable[[], None] | None = None, check_seeds: Sequence[int] = (),
         cfg_degrees: Sequence[int] = CFG_DEGREES, routers: Sequence[str] = (),
         duration_s: float | None = None) -> dict[str, Any]:
    """Simulate every layout (see the module docstring); returns the table and the choice.
    ``gpus`` None: the scenario's own (a multi-replica scenario's GPU count, else 1);
    ``cfg_degrees``: the CFG-parallel degrees to consider ((1,): SP layouts only); ``routers``: routers
    to compare on the recommended layout, ``spec``'s policy behind each (``rlsched``, ``router``,
    ``central``), on the routers' deployed view — the winner's mean over the loads picks the router
    of the deploy line (``router_rows``, ``recommended_router``); ``duration_s``: each run's arrival window
    (None: the scenario's; hundreds of GPUs at the scenario's hours of arrivals take hours to plan)."""
    sized = _Sized.check(scenario, gpus, spec, seeds, loads, profile, check_seeds, cfg_degrees, routers,
                         duration_s=duration_s)
    return sized.finish(sized.simulate_layouts(workers, ray, progress), routers, check_seeds)


def plan_for_rate(scenario: str, gpu_counts: Sequence[int], rate_rps: float, spec: StageSpec | str,
                  seeds: Sequence[int], loads: Sequence[float], target: float, profile: str | None = None,
                  workers: int = 1, ray: str | None = None, progress: Callable[[], None] | None = None,
                  check_seeds: Sequence[int] = (), cfg_degrees: Sequence[int] = CFG_DEGREES,
                  routers: Sequence[str] = (), duration_s: float | None = None) -> dict[str, Any]:
    """"2 or 4 GPUs for *my* traffic?": every layout of every count in ``gpu_counts`` serves the same
    ``rate_rps`` (× ``loads``) of the scenario's mix; the recommendation is the fewest GPUs whose best
    layout reaches ``target`` class-weighted SLO attainment (mean over loads and seeds), else the count
    whose best layout comes closest. The result is that count's plan (its layouts, routers, re-check and
    deploy line) with ``by_gpus``: each count's best layout and mean."""
    if not gpu_counts or len(set(gpu_counts)) != len(gpu_counts):
        raise ConfigError("--gpus", f"with --rate, give distinct GPU counts, not {list(gpu_counts)}")
    if not (math.isfinite(target) and 0 < target <= 1):
        raise ConfigError("--target", f"must be a class-weighted SLO attainment in (0, 1], not {target!r}")
    counts = sorted(gpu_counts)
    sized = [_Sized.check(scenario, g, spec, seeds, loads, profile, check_seeds, cfg_degrees, routers, rate_rps,
                          duration_s) for g in counts]
    done = [s.simulate_layouts(workers, ray, progress) for s in sized]
    means = [d.rows[d.best]["mean"] for d in done]
    reach = [i for i, m in enumerate(means) if m >= target - 1e-9]
    pick = reach[0] if reach else max(range(len(counts)), key=lambda i: (round(means[i], 9), -counts[i]))
    out = sized[pick].finish(done[pick], routers, check_seeds)
    out.update(rate_rps=rate_rps, target=target, reaches_target=bool(reach),
               by_gpus=[{"gpus": g, "layout": d.rows[d.best]["layout"], "mean": m, "reaches_target": m >= target - 1e-9}
                        for g, d, m in zip(counts, done, means)])
    return out


@dataclass
class _Grid:
    """Every layout of one GPU count simulated: the rows, the best one's index, and how to simulate more."""

    options: list[Layout]
    rows: list[dict[str, Any]]
    best: int
    simulate: Callable[..., np.ndarray]


@dataclass
class _Sized:
    """One GPU count's plan, its arguments checked before anything is simulated."""

    scenario: str
    sc: Any
    gpus: int
    spec: StageSpec
    seeds: Sequence[int]
    loads: Sequence[float]
    profile: str
    cfg_degrees: Sequence[int]
    specs: list[StageSpec]
    scale: float
    """The rate scale of load 1 (× the scenario's own rate)."""
    rate_rps: float | None = None
    duration_s: float | None = None
    """Each run's arrival window (None: the scenario's)."""

    @classmethod
    def check(cls, scenario: str, gpus: int | None, spec: StageSpec | str, seeds: Sequence[int], loads: Sequence[float],
              profile: str | None, check_seeds: Sequence[int], cfg_degrees: Sequence[int], routers: Sequence[str],
              rate_rps: float | None = None, duration_s: float | None = None) -> _Sized:
        bad = [s for s in seeds if not 0 <= s < TRAINING_SEED_LIMIT]
        if bad:
            raise ConfigError("--seeds", f"planning uses training seeds (0..{TRAINING_SEED_LIMIT - 1}), not {bad}")
        low = [s for s in check_seeds if s < EVAL_SEED_BASE]
        if low:
            raise ConfigError("--check-seeds", f"the re-check uses evaluation seeds (>= {EVAL_SEED_BASE}), not {low}")
        if not loads or any(not (math.isfinite(x) and x > 0) for x in loads):
            raise ConfigError("--loads", f"must be finite numbers > 0, not {list(loads)}")
        sc = load_scenario(scenario)
        if len({(g.profile, g.sp_degree, g.cfg_parallel) for g in sc.replicas}) > 1:
            raise ConfigError("--scenario", f"{sc.name!r} declares a heterogeneous pool; plan enumerates layouts of "
                                            "one profile (evaluate the pool as it is with rlsched eval)")
        gpus = sc.gpus if gpus is None else gpus
        profile = profile or profile_of(sc)
        layouts(gpus, load_profile(profile), cfg_degrees)  # --gpus and --cfg-degrees checked here
        if rate_rps is None:
            scale = gpus / sc.gpus
        else:
            scale = rate_rps / own_rate(sc, seeds, profile)
        check_loads(sc, scenario, profile, gpus, loads, seeds, scale, rate_rps, duration_s)
        stage = StageSpec.of(spec)  # a typo fails here, not after the first layout
        specs = [StageSpec.parse(stage.behind(r)) for r in routers]
        for s in specs:
            check_spec(s)
        return cls(scenario, sc, gpus, stage, seeds, loads, profile, cfg_degrees, specs, scale, rate_rps, duration_s)

    def simulate_layouts(self, workers: int, ray: str | None, progress: Callable[[], None] | None) -> _Grid:
        options = layouts(self.gpus, load_profile(self.profile), self.cfg_degrees)

        def simulate(seed_list: Sequence[int], lays: Sequence[Layout] = options,
                     pairs: Sequence[StageSpec] = (self.spec,)) -> np.ndarray:
            tasks = [PlanTask(self.scenario, self.profile, lay, p, s, x * self.scale, self.duration_s)
                     for lay in lays for p in pairs for x in self.loads for s in seed_list]
            values: list[float] = []
            for v in run_tasks(run_one, tasks, workers=workers, ray=ray):
                values.append(v)
                if progress is not None:
                    progress()
            return np.asarray(values).reshape(len(lays) * len(pairs), len(self.loads), len(seed_list))

        grid = simulate(self.seeds)
        rows = [{"layout": lay.name, "replicas": lay.replicas, "sp_degree": lay.degree, "cfg_parallel": lay.cfg,
                 **_scores(grid[i], self.loads)} for i, lay in enumerate(options)]
        best = max(range(len(options)), key=lambda i: (round(rows[i]["mean"], 9), -options[i].gpus_per_replica,
                                                       -options[i].cfg))
        return _Grid(options, rows, best, simulate)

    @property
    def classes(self) -> str:
        """The scenario file, absolute, when the server must read its own classes (``deploy --classes``)."""
        return str(Path(self.scenario).resolve()) if report_names(self.sc.class_table) else ""

    def finish(self, grid: _Grid, routers: Sequence[str], check_seeds: Sequence[int]) -> dict[str, Any]:
        """The plan of this count: the table, the choice, the routers compared on it, the re-check."""
        options, rows, best, simulate = grid.options, grid.rows, grid.best, grid.simulate
        profile, gpus, serving = self.profile, self.gpus, self.sc.serving
        worst = min(rows, key=lambda r: r["mean"])
        out = {"scenario": self.scenario, "profile": profile, "gpus": gpus, "policy": self.spec.text,
               "seeds": list(self.seeds), "loads": list(self.loads),
               "duration_s": self.sc.duration_s if self.duration_s is None else self.duration_s, "rows": rows,
               "recommended": rows[best]["layout"],
               "worst_loses_points": round(100 * (rows[best]["mean"] - worst["mean"]), 2),
               "stage_yaml": stage_yaml(options[best], gpus, load_profile(profile)),
               "deploy_command": deploy_command(options[best], gpus, self.spec, profile, serving,
                                                classes=self.classes)}
        if self.specs:
            _compare_routers(out, routers, lambda seed_list: simulate(seed_list, [options[best]], self.specs),
                             self.seeds, check_seeds, self.loads)
            out["deploy_command"] = deploy_command(options[best], gpus, self.spec.behind(out["recommended_router"]),
                                                   profile, serving, classes=self.classes)
        if check_seeds:
            check = simulate(check_seeds)
            for i, row in enumerate(rows):
                row.update(_scores(check[i], self.loads, "check_"))
            hindsight = max(rows, key=lambda r: r["check_mean"])
            out.update(check_seeds=list(check_seeds), hindsight_best=hindsight["layout"],
                       recommended_loses_points=round(100 * (hindsight["check_mean"] - rows[best]["check_mean"]), 2),
                       check_worst_loses_points=round(100 * (hindsight["check_mean"]
                                                             - min(r["check_mean"] for r in rows)), 2))
        return out


def own_rate(sc: Any, seeds: Sequence[int], profile: str) -> float:
    """The scenario's own traffic in requests a second: its arrivals on the planning seeds over its window
    (a drawn mean, so every arrival process and trace counts alike, diurnal and on/off included)."""
    cost = load_profile(profile)
    drawn = [len(sc.requests(s, 1.0, cost=cost)) for s in seeds or [0]]
    rate = float(np.mean(drawn)) / sc.duration_s
    if rate <= 0:
        raise ConfigError("--rate", f"scenario {sc.name!r} draws no arrivals at its own rate, so no rate scale "
                                    "reaches a traffic; give it an arrival rate first")
    return rate


def check_loads(sc: Any, scenario: str, profile: str, gpus: int, loads: Sequence[float], seeds: Sequence[int],
                scale: float | None = None, rate_rps: float | None = None, duration_s: float | None = None) -> None:
    """The heaviest workload a layout gets (the highest load on ``gpus`` GPUs, or of ``rate_rps``) drawn
    once, before any layout: one too large to simulate is an error naming ``--loads`` and ``--gpus`` (or
    ``--rate``), which the user gave, rather than the rate scale they multiply to, which they never did.
    The scenario at its own rate is drawn first, so a problem of the scenario itself is reported as it is."""
    cost = load_profile(profile)
    seed = seeds[0] if seeds else 0
    sc.requests(seed, 1.0, cost=cost)
    top = max(loads)
    scale = top * (gpus / sc.gpus if scale is None else scale)
    try:
        sc.requests(seed, scale, duration_s=duration_s, cost=cost)
    except ConfigError as exc:
        if rate_rps is not None:
            raise ConfigError("--rate", f"load {top:g} x --rate {rate_rps:g} runs scenario {sc.name!r} at "
                                        f"{scale:g} x its own rate, too much to simulate: {exc}; lower --rate or "
                                        "--loads") from None
        raise ConfigError("--loads", f"load {top:g} on --gpus {gpus} runs scenario {sc.name!r} at {scale:g} x its "
                                     f"own rate (the nominal rate per GPU x {gpus} GPUs), too much to simulate: "
                                     f"{exc}; lower --loads or --gpus") from None


def _scores(values: np.ndarray, loads: Sequence[float], prefix: str = "") -> dict[str, Any]:
    """A row's mean per load and overall of ``values`` (loads × seeds): ``{prefix}by_load``, ``{prefix}mean``."""
    return {f"{prefix}by_load": {f"{x:g}": float(values[j].mean()) for j, x in enumerate(loads)},
            f"{prefix}mean": float(values.mean())}


def _compare_routers(out: dict[str, Any], routers: Sequence[str], simulate: Callable[[Sequence[int]], np.ndarray],
                     seeds: Sequence[int], check_seeds: Sequence[int], loads: Sequence[float]) -> None:
    """The routers on the recommended layout: a row per router (per load, mean; re-checked on the
    evaluation seeds when given), the best mean on the training seeds recommended."""
    grid = simulate(seeds)
    check = simulate(check_seeds) if check_seeds else None
    rows = []
    for i, router in enumerate(routers):
        row = {"router": router, **_scores(grid[i], loads)}
        if check is not None:
            row.update(_scores(check[i], loads, "check_"))
        rows.append(row)
    best = max(rows, key=lambda r: round(r["mean"], 9))
    out.update(router_rows=rows, recommended_router=best["router"],
               best_router_by_load={f"{x:g}": max(rows, key=lambda r: r["by_load"][f"{x:g}"])["router"]
                                    for x in loads})


def stage_yaml(layout: Layout, gpus: int, profile: Any) -> str:
    """The vLLM-Omni stage keys for ``layout`` (as vLLM-Omni's own deploy files spell them:
    ``num_replicas``/``devices`` on the stage, ``parallel_config`` under the engine args;
    ``cfg_parallel_size`` only on a CFG-parallel layout, so ``world_size`` = sp × cfg)."""
    methods = {m.sp.method for m in profile.models.values() if m.sp is not None} or {"ulysses"}
    sp = SPLayout.of(layout.degree, sorted(methods)[0])
    cfg = [f"  cfg_parallel_size: {layout.cfg}"] if layout.cfg > 1 else []
    return "\n".join([
        "# vLLM-Omni 0.30 diffusion stage: merge into your stage (rlsched deploy writes the rest)",
        f"num_replicas: {layout.replicas}",
        f'devices: "{",".join(str(i) for i in range(gpus))}"',
        "parallel_config:",
        f"  sequence_parallel_size: {layout.degree}",
        f"  ulysses_degree: {sp.ulysses}",
        f"  ring_degree: {sp.ring}",
        *cfg,
        ""])


def deploy_command(layout: Layout, gpus: int, spec: StageSpec | str, profile: str, serving: Any,
                   out: str = "deploy.yaml", classes: str = "") -> str:
    """The ``rlsched deploy`` line that serves ``layout`` under ``spec`` (``POLICY@ROUTER``) with the
    simulated serving settings (``max_num_seqs``, step mode); ``central`` (late binding) too
    (docs/deploy.md). The admission wait is left to the policy (deploy's
    default 0): vLLM-Omni holds every wave for it, while the simulator lets only ``fifo`` wait.
    ``classes``: the scenario file whose own classes the server reads (``--classes``), if it has any."""
    stage = StageSpec.of(spec)
    policy, router = stage.policy, stage.router
    argv = ["rlsched", "deploy", "--replicas", str(layout.replicas),
            "--devices", ",".join(str(i) for i in range(gpus)), "--sp", str(layout.degree),
            *(["--cfg-parallel", str(layout.cfg)] if layout.cfg > 1 else []), "--policy", portable_spec(policy),
            "--router", router, "--profile", portable_profile(profile),
            "--max-num-seqs", str(serving.max_num_seqs)]
    if serving.mode == "step":
        argv.append("--step-execution")
    if classes:
        argv += ["--classes", classes]
    return shlex.join([*argv, "--out", out])


RECOMMENDED = "#000000"
"""The recommended layout's colour in plan.png: in no other layout's style (``rlsched.plotstyle`` has no black)."""


def write_plot(result: dict[str, Any], path: Path, flag: str | None = "--out") -> None:
    """SLO attainment vs load, one line per layout (``plan_figure``), written whole (``rlsched.atomic``)."""
    import matplotlib.pyplot as plt

    fig = plan_figure(result)
    with atomic_open(path, "wb", flag) as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def plan_figure(result: dict[str, Any]) -> Any:
    """The figure of ``write_plot``: the recommended layout thick and black, which no other layout is; the
    legend beside the axes, not over a line; the title wrapped to the figure's width."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlsched.plotstyle import styles_for

    names = [r["layout"] for r in result["rows"]]
    styles = styles_for(names)
    best = result["recommended"]
    fig, ax = plt.subplots(figsize=(7.2, 3.8), layout="constrained")
    for r in result["rows"]:
        xs = [float(x) for x in r["by_load"]]
        line = styles[r["layout"]].line()
        label = r["layout"]
        if label == best:
            line.update(color=RECOMMENDED, linewidth=2.8, zorder=6, markersize=8)
            label += " (recommended)"
        ax.plot(xs, [100 * v for v in r["by_load"].values()], label=label, **line)
    rate = result.get("rate_rps")
    traffic = f" at {rate:g} req/s" if rate is not None else ""
    title = f"{result['scenario']}{traffic} on {result['gpus']} GPUs, {result['policy']}: recommended {best}"
    fig.suptitle(textwrap.fill(title, 70), fontsize=10)
    xlabel = f"load (× {rate:g} req/s, --rate)" if rate is not None else "load (× nominal rate per GPU)"
    ax.set(xlabel=xlabel, ylabel="class-weighted SLO attainment %", ylim=(0, 100))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)  # constrained layout makes room
    return fig


__all__ = ["Layout", "check_loads", "deploy_command", "layouts", "own_rate", "plan", "plan_figure", "plan_for_rate",
           "profile_of", "stage_yaml", "write_plot"]
