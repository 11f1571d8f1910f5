"""Scenario files (``envs/*.yaml``): workload, SLO classes, GPU profile, serving knobs.

A scenario turns ``(seed, rate_scale)`` into a list of requests, the same list for
the same arguments. Request SLOs follow vLLM-Omni's benchmark definition:
``slo = class slo_scale × standalone execution time`` of the request.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.atomic import input_file
from rlsched.errors import ConfigError, InvalidRequest, TraceFormatError, TraceRowsSkipped
from rlsched.resources import beside, data_dir, shipped_path
from rlsched.sim import workload as wl
from rlsched.sim.classes import SHIPPED, ClassInfo, class_table, default_weight
from rlsched.sim.cost import CostModel, load_profile
from rlsched.sim.layout import at_layout
from rlsched.sim.request import Request
from rlsched.sim.schema import LineOf, group_name, validate_scenario
from rlsched.sim.simulator import ServingConfig
from rlsched.sim.stage import ReplicaSpec
from rlsched.sim.truth import EXACT, Truth, decided_on
from rlsched.sim.yamlio import read_yaml_lines

ENVS_DIR = data_dir("envs")


@dataclass(frozen=True)
class ClassSpec:
    """A priority class: its share of requests and its SLO scale."""

    share: float
    """Fraction of requests in this class."""
    slo_scale: float
    """SLO = slo_scale × the request's standalone execution time."""
    weight: float | None = None
    """Weight in the weighted SLO attainment (None: ``rlsched.sim.classes.default_weight``)."""
    tier: str | None = None
    """The shipped class learned policies read it as (None: by weight rank, ``rlsched.sim.classes``)."""
    quota: float | None = None
    """The most of the GPU's time the class may take while others wait (None: no cap; ``rlsched.sim.quota``);
    the scenario's ``serving.quotas`` carries it to the simulator."""


@dataclass(frozen=True)
class ShapeSpec:
    """One entry of a request mix."""

    model: str
    modality: str
    height: int
    width: int
    num_frames: int = 1
    steps: int = 50
    cfg: bool = True
    weight: float = 1.0
    """Relative frequency in the mix."""
    prefix_groups: int = 0
    """>0: requests carry a prompt-prefix id in [0, prefix_groups) (cache-aware batching)."""


@dataclass(frozen=True)
class ReplicaGroup:
    """``count`` replicas of ``sp_degree`` × ``cfg_parallel`` GPUs each on ``profile`` (``""``: the
    scenario's)."""

    count: int = 1
    sp_degree: int = 1
    profile: str = ""
    name: str = ""
    cfg_parallel: int = 1
    """CFG-parallel degree: 2 groups of ``sp_degree`` GPUs, one guidance branch each."""

    @property
    def gpus_per_replica(self) -> int:
        return self.sp_degree * self.cfg_parallel


@dataclass(frozen=True)
class Scenario:
    """Everything that defines a workload on one GPU, or on a stage of replicas (``replicas``);
    one YAML file."""

    name: str
    profile: str
    """Cost-profile name (``envs/profiles/NAME.yaml``) or path."""
    serving: ServingConfig
    duration_s: float
    """Arrivals are generated over [0, duration_s); the run then drains the queue."""
    arrival: dict[str, Any]
    """``process`` (poisson, gamma, weibull, onoff, diurnal, servegen, trace) + its parameters."""
    classes: dict[str, ClassSpec]
    mix: tuple[ShapeSpec, ...] = ()
    shapes_from: dict[str, Any] = field(default_factory=dict)
    """Optional ``{path, model, cfg}``: sample shapes from a Hetu-DiT trace instead of ``mix``."""
    replicas: tuple[ReplicaGroup, ...] = ()
    """A multi-replica stage (empty: one GPU). Then ``arrival`` is what reaches the whole stage,
    and SLOs stay ``slo_scale`` × the standalone time on ``profile`` at one GPU (the reference
    a user's SLO is written against, whichever replica serves the request)."""
    truth: Truth = EXACT
    """The cost the GPU really runs at (``rlsched.sim.truth``); every decision reads ``profile``."""
    description: str = ""
    path: str = ""

    def cost(self) -> CostModel:
        return load_profile(self.profile)

    @property
    def class_table(self) -> dict[str, ClassInfo]:
        """Each class's name, weight and tier, in file order (``rlsched.sim.classes``)."""
        return class_table({c: default_weight(c) if v.weight is None else v.weight for c, v in self.classes.items()},
                           {c: v.tier for c, v in self.classes.items()})

    def true_cost(self, cost: CostModel | None = None, own_profile: bool = False) -> CostModel | None:
        """What a GPU whose decisions read ``cost`` (default: the scenario's profile) really runs at; None
        when the profile is the truth. A ``truth.profile`` without one of the scenario's models is a
        ``ConfigError`` naming ``truth.profile``."""
        try:
            true = self.truth.apply(cost or self.cost(), own_profile)
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: truth", str(exc)) from None
        if true is not None:
            for name in sorted({s.model for s in self._shape_pool()} - set(true.models)):
                raise ConfigError(f"{self.path}: truth.profile", f"{true.name!r} has no model {name!r}, which "
                                                                 "the scenario's requests use")
        return true

    @property
    def gpus(self) -> int:
        """GPUs the scenario serves on (1 without ``replicas``)."""
        return sum(g.count * g.gpus_per_replica for g in self.replicas) or 1

    def require_one_gpu(self, what: str) -> None:
        """``ConfigError`` when this scenario declares replicas and ``what`` models one GPU."""
        if self.replicas:
            raise ConfigError(self.path or self.name, f"declares {len(self.replicas)} replica group(s) "
                                                      f"({self.gpus} GPUs); {what} models one GPU (rlsched "
                                                      "simulate, eval and plan run the stage)")

    def replica_specs(self, cost: CostModel | None = None, belief: str = "profile") -> list[ReplicaSpec]:
        """The stage's replicas, in file order: each group's profile at its SP degree (one cost
        object per group, so replicas of a group share it), and what it really runs at (``truth``).
        ``cost``: the scenario's profile, if already loaded; ``belief="truth"``: decisions read the
        true cost too (the user who measured their own GPU). Every shape must run alone on every
        group (else ``ConfigError`` naming ``replicas[i]``)."""
        base = cost or self.cost()
        out: list[ReplicaSpec] = []
        for i, g in enumerate(self.replicas):
            where = f"{self.path}: replicas[{i}]"
            believed = load_profile(g.profile) if g.profile else base
            true = self.true_cost(believed, own_profile=bool(g.profile))
            try:
                wide = at_layout(believed, g.sp_degree, g.cfg_parallel)
                true_wide = at_layout(true, g.sp_degree, g.cfg_parallel) if true is not None else None
            except ConfigError as exc:
                raise ConfigError(where, str(exc)) from None
            try:
                self._check_shapes(wide)
            except (ConfigError, TraceFormatError) as exc:
                raise ConfigError(where, f"a shape cannot run on this group: {exc}") from None
            wide, true_wide = decided_on(belief, wide, true_wide)
            name = group_name(g.name, g.profile or self.profile, g.sp_degree, g.cfg_parallel)
            out += [ReplicaSpec(f"{name}-{j}", wide, self.serving, true_wide) for j in range(g.count)]
        return out

    def with_serving(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, serving=dataclasses.replace(self.serving, **changes))

    def requests(self, seed: int, rate_scale: float = 1.0, duration_s: float | None = None,
                 trace: str | Path | None = None, cost: CostModel | None = None) -> list[Request]:
        """The seeded request stream (arrivals × shapes × classes × SLOs).

        A trace replay turns every row into a request, or raises ``TraceFormatError``
        for the row; rows past the arrival window are counted in a ``TraceRowsSkipped``
        warning. A shape that cannot run even alone on the GPU is refused up front.
        """
        rate_scale = wl.positive(rate_scale, "rate_scale")
        duration = self.duration_s if duration_s is None else wl.positive(duration_s, "duration_s")
        rng = np.random.default_rng(seed)
        cost = cost or self.cost()
        if trace is not None:
            return _trace_requests(self, shipped_path(trace), rng, rate_scale, duration, cost)
        self._check_shapes(cost)
        times = self._arrival_times(rng, rate_scale, duration)
        shapes = self._sample_shapes(rng, times.size)
        return _build(self, times, shapes, rng, cost)

    def _arrival_times(self, rng: np.random.Generator, scale: float, duration: float) -> np.ndarray:
        """Every process's request count is checked against ``MAX_EXPECTED_ARRIVALS`` (and an
        ``onoff`` process's sojourns against ``wl.MAX_PERIODS``) before anything is drawn."""
        spec = dict(self.arrival)
        process = spec.pop("process", "poisson")
        try:
            return self._draw_arrivals(rng, process, spec, scale, duration)
        except TraceFormatError:
            raise
        except ConfigError as exc:  # a workload check names its key ("arrival.cv"): add the file
            if exc.where.startswith("arrival") and self.path:
                raise ConfigError(f"{self.path}: {exc.where}", str(exc)[len(exc.where) + 2:]) from None
            raise

    def _draw_arrivals(self, rng: np.random.Generator, process: str, spec: dict[str, Any], scale: float,
                       duration: float) -> np.ndarray:
        if process == "servegen":
            path, rate_scale = _resolve(spec["path"]), spec.get("rate_scale", 1.0) * scale
            _check_expected(wl.servegen_expected(path, duration, rate_scale), f"{self.path}: arrival.rate_scale",
                            f"the ServeGen trace at rate scale {rate_scale:g} over duration_s {duration:g} s")
            return wl.servegen(rng, path, duration, rate_scale)
        if process == "trace":
            # The scenario file declares this window over a longer trace (trace-azure): not a silent cut.
            times = wl.azure_arrivals(_resolve(spec["path"])) / (spec.get("time_scale", 1.0) * scale)
            return times[times < duration]
        if process not in wl.ARRIVAL_PROCESSES:
            raise ConfigError(f"{self.path}: arrival.process", f"unknown process {process!r}")
        rate = spec["rate_rps"] * scale
        peak = rate * (1 + spec.get("amplitude", 0.5)) if process == "diurnal" else rate  # diurnal thins its peak
        by = f" (rate_rps {spec['rate_rps']:g} x rate scale {scale:g})" if scale != 1 else ""
        _check_expected(peak * duration, f"{self.path}: arrival.rate_rps",
                        f"rate {peak:g}/s{by} over duration_s {duration:g} s")
        if process == "onoff":
            try:
                wl.check_periods(duration, spec.get("on_s", 60.0), spec.get("off_s", 120.0))
            except ConfigError as exc:
                raise ConfigError(f"{self.path}: arrival.on_s", str(exc)[len(exc.where) + 2:]) from None
        spec["rate_rps"] = rate
        if process in ("gamma", "weibull"):
            spec["dist"] = process
        try:
            return wl.ARRIVAL_PROCESSES[process](rng, duration_s=duration, **spec)
        except TypeError as exc:
            raise ConfigError(f"{self.path}: arrival", str(exc)) from None

    def _sample_shapes(self, rng: np.random.Generator, n: int) -> list[ShapeSpec]:
        pool = self._shape_pool()
        idx = wl.sample_index(rng, [s.weight for s in pool], n)
        return [pool[i] for i in idx]

    def _shape_pool(self) -> tuple[ShapeSpec, ...]:
        if not self.shapes_from:
            return self.mix
        spec = self.shapes_from
        counts: dict[tuple[int, int, int, int], int] = {}
        for r in wl.hetudit_rows(_resolve(spec["path"])):
            k = (int(r["height"]), int(r["width"]), int(r["num_frames"]), int(r["num_inference_steps"]))
            counts[k] = counts.get(k, 0) + 1
        return tuple(ShapeSpec(spec["model"], spec.get("modality", "image"), h, w, f, s,
                               spec.get("cfg", False), weight=c) for (h, w, f, s), c in sorted(counts.items()))

    def _check_shapes(self, cost: CostModel) -> None:
        """Every shape the scenario can draw must run alone on the GPU (else it is OOM under every policy)."""
        for i, shape in enumerate(self._shape_pool()):
            try:
                standalone_s(cost, shape)
            except InvalidRequest as exc:
                if not self.shapes_from:
                    raise ConfigError(f"{self.path}: mix[{i}]", str(exc)) from None
                path = _resolve(self.shapes_from["path"])
                line = next(int(r["line"]) for r in wl.hetudit_rows(path)
                            if (r["height"], r["width"], r["num_frames"]) == (shape.height, shape.width,
                                                                              shape.num_frames))
                raise wl.TraceFormatError(str(path), line, str(exc)) from None


MAX_EXPECTED_ARRIVALS = wl.MAX_ARRIVALS
"""More arrivals than this in one run is a typo in the rate or window, not a workload (and would exhaust memory)."""


def _check_expected(expected: float, where: str, what: str) -> None:
    """Refuse a run expecting more than ``MAX_EXPECTED_ARRIVALS`` requests (or a non-finite count)."""
    if not expected <= MAX_EXPECTED_ARRIVALS:
        raise ConfigError(where, f"{what} expects {expected:.3g} requests (more than {MAX_EXPECTED_ARRIVALS:,})")


def standalone_s(cost: CostModel, shape: ShapeSpec) -> float:
    """Standalone time of ``shape``; ``InvalidRequest('shape', ...)`` if it cannot run even alone on the GPU."""
    free = cost.gpu_memory_gb - cost.weights_gb
    cost.model(shape.model).check_frames(shape.num_frames)
    try:
        rec = cost.record(_request(0, 0.0, shape, SHIPPED["batch"], math.inf))
        need = rec.mem_gb
    except OverflowError:  # e.g. height 1e300: the attention term overflows a float
        need = math.inf
    if not need <= free:
        raise InvalidRequest("shape", f"{shape.height}x{shape.width}x{shape.num_frames}",
                             f"needs {need:.4g} GB of activations alone; profile {cost.name!r} has "
                             f"{free:.4g} GB of GPU memory left after the model weights")
    return rec.work_s


def _build(sc: Scenario, times: np.ndarray, shapes: list[ShapeSpec], rng: np.random.Generator,
           cost: CostModel, at_row: Callable[[int, InvalidRequest], Exception] | None = None) -> list[Request]:
    """Requests from arrival times and shapes; ``at_row(i, err)`` names the trace row of a refused shape."""
    names, table = list(sc.classes), sc.class_table
    cls = wl.sample_index(rng, [sc.classes[c].share for c in names], len(shapes))
    prefix = rng.integers(0, 1 << 30, len(shapes))
    work: dict[ShapeSpec, float] = {}
    out = []
    for i, (t, s) in enumerate(zip(times.tolist(), shapes)):
        if s not in work:
            try:
                work[s] = standalone_s(cost, s)
            except InvalidRequest as exc:
                raise (at_row(i, exc) if at_row else exc) from None
        name = names[cls[i]]
        pid = int(prefix[i] % s.prefix_groups) if s.prefix_groups else -1
        slo = sc.classes[name].slo_scale * work[s]
        if not 0 < slo < math.inf:  # 1e-300 x a short request underflows, 1e6 x a long one may overflow
            raise ConfigError(f"{sc.path}: classes.{name}.slo_scale",
                              f"{sc.classes[name].slo_scale:g} x the standalone time {work[s]:g} s of "
                              f"{s.height}x{s.width}x{s.num_frames} is an SLO of {slo:g} s (must be finite and > 0)")
        out.append(_request(i, t, s, table[name], slo, pid))
    return out


def _request(rid: int, t: float, s: ShapeSpec, cls: ClassInfo, slo: float, prefix: int = -1) -> Request:
    return Request(rid, t, s.model, s.modality, s.height, s.width, s.num_frames, s.steps, s.cfg, cls.name, slo, prefix,
                   cls.tier, cls.weight)


def _trace_requests(sc: Scenario, path: Path, rng: np.random.Generator, scale: float,
                    duration: float, cost: CostModel) -> list[Request]:
    fmt = wl.detect_trace_format(path)
    if fmt == "azure":
        times = wl.azure_arrivals(path) / scale
        kept = times[times < duration]
        _report_window(path, times.size, kept.size, float(np.max(times)) if times.size else 0.0, duration)
        sc._check_shapes(cost)
        return _build(sc, kept, sc._sample_shapes(rng, kept.size), rng, cost)
    if fmt == "hetudit":
        return _hetudit_requests(sc, path, rng, scale, duration, cost)
    return _rlsched_csv_requests(sc, path, scale, duration, cost)


def _hetudit_requests(sc: Scenario, path: Path, rng: np.random.Generator, scale: float,
                      duration: float, cost: CostModel) -> list[Request]:
    rows = wl.hetudit_rows(path)
    kept = [r for r in rows if r["timestamp"] / scale < duration]
    _report_window(path, len(rows), len(kept), max(r["timestamp"] / scale for r in rows), duration)
    base = (sc.mix or sc._shape_pool())[0]
    pool: dict[tuple[int, int, int, int], ShapeSpec] = {}  # one ShapeSpec per distinct shape, not per row
    shapes = []
    for r in kept:
        dims = (int(r["height"]), int(r["width"]), int(r["num_frames"]), int(r["num_inference_steps"]))
        if dims not in pool:
            pool[dims] = dataclasses.replace(base, height=dims[0], width=dims[1], num_frames=dims[2],
                                             steps=dims[3], modality="video" if dims[2] > 1 else "image")
        shapes.append(pool[dims])
    times = np.fromiter((r["timestamp"] / scale for r in kept), float, len(kept))
    return _build(sc, times, shapes, rng, cost,
                  lambda i, exc: wl.TraceFormatError(str(path), int(kept[i]["line"]), str(exc)))


def _report_window(path: Path, total: int, kept: int, last: float, duration: float) -> None:
    """Rows past the arrival window are not replayed; say so, with how to replay them
    (``total`` rows, ``kept`` of them replayed, ``last``: the latest arrival)."""
    if kept < total:
        warnings.warn(TraceRowsSkipped(
            str(path), total - kept, total,
            f"arrive at or after the arrival window [0, {duration:g}) s and were not replayed (last arrival "
            f"{last:g} s); pass --duration {math.floor(last) + 1} to replay them all"), stacklevel=3)


def _rlsched_csv_requests(sc: Scenario, path: Path, scale: float, duration: float,
                          cost: CostModel) -> list[Request]:
    base = (sc.mix or sc._shape_pool())[0]
    out: list[Request] = []
    total, last = 0, -math.inf
    seen, table = _TraceCache(), sc.class_table
    for row in wl.iter_rlsched_csv_rows(path):  # row by row: a million rows are never all in memory
        try:
            t, shape, cls, slo = _csv_row(sc, row, base, scale, cost, seen)
        except (ValueError, InvalidRequest) as exc:
            raise wl.TraceFormatError(str(path), int(row["_line"]), str(exc)) from None
        total += 1
        last = max(last, t)
        if t < duration:
            out.append(_request(len(out), t, shape, table[cls], slo))
    _report_window(path, total, len(out), last, duration)
    return out


@dataclass
class _TraceCache:
    """What rows of one trace share (traces repeat a few shapes many times): standalone times, and
    one object per distinct shape, class name and computed SLO, so a million requests hold
    references to a few of each rather than a copy each."""

    work: dict[ShapeSpec, float] = field(default_factory=dict)
    shapes: dict[ShapeSpec, ShapeSpec] = field(default_factory=dict)
    classes: dict[str, str] = field(default_factory=dict)
    slo: dict[tuple[ShapeSpec, str], float] = field(default_factory=dict)


def _csv_row(sc: Scenario, row: dict[str, str], base: ShapeSpec, scale: float, cost: CostModel,
             seen: _TraceCache) -> tuple[float, ShapeSpec, str, float]:
    """One rlsched CSV row: arrival, shape, class and SLO; any bad value raises naming its field."""
    t = wl.arrival_time(row["arrival_s"]) / scale
    shape = ShapeSpec(row.get("model") or base.model, row.get("modality") or base.modality,
                      wl.count(row["height"], "height"), wl.count(row["width"], "width"),
                      wl.count(row["num_frames"], "num_frames"),
                      wl.count(row["num_inference_steps"], "num_inference_steps"),
                      _bool(row["cfg"]) if row.get("cfg") else base.cfg)
    cls = row["priority"]
    if cls not in sc.classes:
        raise InvalidRequest("priority", cls, f"must be one of {list(sc.classes)}")
    cls = seen.classes.setdefault(cls, cls)
    if shape not in seen.work:
        seen.work[shape] = standalone_s(cost, shape)
    shape = seen.shapes.setdefault(shape, shape)
    if row.get("slo_s"):
        return t, shape, cls, wl.positive(row["slo_s"], "slo_s")
    if (shape, cls) not in seen.slo:
        seen.slo[shape, cls] = sc.classes[cls].slo_scale * seen.work[shape]
    return t, shape, cls, seen.slo[shape, cls]


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError(f"cfg must be true/false, not {text!r}")
    return low in ("1", "true", "yes")


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else ENVS_DIR / p


# -------------------------------------------------------------------- loading


def scenario_names() -> list[str]:
    return sorted(p.stem for p in ENVS_DIR.glob("*.yaml"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load ``envs/NAME.yaml`` or a path to a scenario file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = ENVS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():  # the shipped names listed only when nothing is there
        here = (f"; {name_or_path} here is read as a scenario name: give a scenario file with its .yaml"
                if path.parent == ENVS_DIR and Path(name_or_path).exists() else "")
        input_file(path, "scenario", str(name_or_path), f" (shipped: {', '.join(scenario_names())}{here})")
    data, line_of = read_yaml_lines(path)
    return scenario_from_dict(data, str(path), line_of, folder=path.parent)


def scenario_from_dict(data: Any, where: str, line_of: LineOf | None = None,
                       folder: str | Path | None = None) -> Scenario:
    """A ``Scenario`` from parsed YAML, validated against ``rlsched.sim.schema`` (errors name file,
    line when ``line_of`` maps key paths to lines, key and reason). ``folder``: the scenario file's,
    where the files it names (profiles given as paths, traces) are looked for first (``_beside``)."""
    spec = validate_scenario(data, where, line_of)
    arrival = spec.arrival.model_dump()
    if "path" in arrival:
        arrival["path"] = beside(arrival["path"], folder)
    shapes_from = spec.shapes_from.model_dump() if spec.shapes_from else {}
    if shapes_from:
        shapes_from["path"] = beside(shapes_from["path"], folder)
    truth = spec.truth.model_dump()
    truth["profile"] = _profile_beside(truth["profile"], folder)
    quotas = tuple((c, v.quota) for c, v in spec.classes.items() if v.quota is not None)
    serving = ServingConfig(**spec.serving.model_dump(), quotas=quotas)
    return Scenario(
        name=spec.name, profile=_profile_beside(spec.profile, folder),
        serving=serving, duration_s=spec.duration_s, arrival=arrival,
        classes={c: ClassSpec(**v.model_dump()) for c, v in spec.classes.items()},
        mix=tuple(ShapeSpec(**m.model_dump()) for m in spec.mix), shapes_from=shapes_from,
        replicas=tuple(ReplicaGroup(g.count, g.sp_degree, _profile_beside(g.profile or "", folder), g.name or "",
                                    g.cfg_parallel) for g in spec.replicas),
        truth=Truth(**truth), description=spec.description, path=where)


def _profile_beside(profile: str, folder: str | Path | None) -> str:
    """A profile given as a path (``my-gpu.yaml``) tried beside the scenario file first; a name
    (``qwen-image-h200-vllm-omni``, no suffix) is always a shipped profile's."""
    return beside(profile, folder) if Path(profile).suffix else profile
