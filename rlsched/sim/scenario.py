"""Scenario files (``envs/*.yaml``): workload, SLO classes, GPU profile, serving knobs.

A scenario turns ``(seed, rate_scale)`` into a list of requests, the same list for
the same arguments. Request SLOs follow vLLM-Omni's benchmark definition:
``slo = class slo_scale × standalone execution time`` of the request.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.errors import ConfigError, InvalidRequest
from rlsched.sim import workload as wl
from rlsched.sim.cost import CostModel, load_profile
from rlsched.sim.request import PRIORITY_CLASSES, Request
from rlsched.sim.simulator import ServingConfig
from rlsched.sim.yamlio import read_yaml

ENVS_DIR = Path(__file__).resolve().parents[2] / "envs"


@dataclass(frozen=True)
class ClassSpec:
    """A priority class: its share of requests and its SLO scale."""

    share: float
    """Fraction of requests in this class."""
    slo_scale: float
    """SLO = slo_scale × the request's standalone execution time."""


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
class Scenario:
    """Everything that defines a workload on one GPU; one YAML file."""

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
    description: str = ""
    path: str = ""

    def cost(self) -> CostModel:
        return load_profile(self.profile)

    def with_serving(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, serving=dataclasses.replace(self.serving, **changes))

    def requests(self, seed: int, rate_scale: float = 1.0, duration_s: float | None = None,
                 trace: str | Path | None = None, cost: CostModel | None = None) -> list[Request]:
        """The seeded request stream (arrivals × shapes × classes × SLOs)."""
        rate_scale = wl.positive(rate_scale, "rate_scale")
        duration = self.duration_s if duration_s is None else wl.positive(duration_s, "duration_s")
        rng = np.random.default_rng(seed)
        cost = cost or self.cost()
        if trace is not None:
            return _trace_requests(self, Path(trace), rng, rate_scale, duration, cost)
        times = self._arrival_times(rng, rate_scale, duration)
        shapes = self._sample_shapes(rng, times.size)
        return _build(self, times, shapes, rng, cost)

    def _arrival_times(self, rng: np.random.Generator, scale: float, duration: float) -> np.ndarray:
        spec = dict(self.arrival)
        process = spec.pop("process", "poisson")
        if process == "servegen":
            return wl.servegen(rng, _resolve(spec["path"]), duration, spec.get("rate_scale", 1.0) * scale)
        if process == "trace":
            times = wl.azure_arrivals(_resolve(spec["path"])) / (spec.get("time_scale", 1.0) * scale)
            return times[times < duration]
        if process not in wl.ARRIVAL_PROCESSES:
            raise ConfigError(f"{self.path}: arrival.process", f"unknown process {process!r}")
        spec["rate_rps"] = spec["rate_rps"] * scale
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
        rows = wl.hetudit_rows(_resolve(spec["path"]))
        counts: dict[tuple[int, int, int, int], int] = {}
        for r in rows:
            k = (int(r["height"]), int(r["width"]), int(r["num_frames"]), int(r["num_inference_steps"]))
            counts[k] = counts.get(k, 0) + 1
        return tuple(ShapeSpec(spec["model"], spec.get("modality", "image"), h, w, f, s,
                               spec.get("cfg", False), weight=c) for (h, w, f, s), c in sorted(counts.items()))


def _build(sc: Scenario, times: np.ndarray, shapes: list[ShapeSpec], rng: np.random.Generator,
           cost: CostModel) -> list[Request]:
    names = list(sc.classes)
    cls = wl.sample_index(rng, [sc.classes[c].share for c in names], len(shapes))
    prefix = rng.integers(0, 1 << 30, len(shapes))
    work: dict[ShapeSpec, float] = {}
    out = []
    for i, (t, s) in enumerate(zip(times.tolist(), shapes)):
        if s not in work:
            work[s] = cost.standalone_s(_request(0, 0.0, s, "batch", math.inf))
        name = names[cls[i]]
        pid = int(prefix[i] % s.prefix_groups) if s.prefix_groups else -1
        out.append(_request(i, t, s, name, sc.classes[name].slo_scale * work[s], pid))
    return out


def _request(rid: int, t: float, s: ShapeSpec, cls: str, slo: float, prefix: int = -1) -> Request:
    return Request(rid, t, s.model, s.modality, s.height, s.width, s.num_frames, s.steps, s.cfg, cls, slo, prefix)


def _trace_requests(sc: Scenario, path: Path, rng: np.random.Generator, scale: float,
                    duration: float, cost: CostModel) -> list[Request]:
    fmt = wl.detect_trace_format(path)
    if fmt == "azure":
        times = wl.azure_arrivals(path) / scale
        times = times[times < duration]
        return _build(sc, times, sc._sample_shapes(rng, times.size), rng, cost)
    if fmt == "hetudit":
        rows = [r for r in wl.hetudit_rows(path) if r["timestamp"] / scale < duration]
        base = (sc.mix or sc._shape_pool())[0]
        shapes = [dataclasses.replace(base, height=int(r["height"]), width=int(r["width"]),
                                      num_frames=int(r["num_frames"]), steps=int(r["num_inference_steps"]),
                                      modality="video" if r["num_frames"] > 1 else "image")
                  for r in rows]
        times = np.array([r["timestamp"] / scale for r in rows])
        return _build(sc, times, shapes, rng, cost)
    return _rlsched_csv_requests(sc, path, scale, duration, cost)


def _rlsched_csv_requests(sc: Scenario, path: Path, scale: float, duration: float,
                          cost: CostModel) -> list[Request]:
    base = (sc.mix or sc._shape_pool())[0]
    out = []
    for row in wl.rlsched_csv_rows(path):
        line = int(row["_line"])
        try:
            t = float(row["arrival_s"]) / scale
            shape = ShapeSpec(row.get("model") or base.model, row.get("modality") or base.modality,
                              int(row["height"]), int(row["width"]), int(row["num_frames"]),
                              int(row["num_inference_steps"]),
                              _bool(row["cfg"]) if row.get("cfg") else base.cfg)
            cls = row["priority"]
            if cls not in sc.classes:
                raise InvalidRequest("priority", cls, f"must be one of {PRIORITY_CLASSES}")
            slo = float(row["slo_s"]) if row.get("slo_s") else sc.classes[cls].slo_scale * cost.standalone_s(
                _request(0, 0.0, shape, cls, math.inf))
            if t < duration:
                out.append(_request(len(out), t, shape, cls, slo))
        except (ValueError, InvalidRequest) as exc:
            raise wl.TraceFormatError(str(path), line, str(exc)) from None
    return out


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
    if not path.is_file():
        raise ConfigError(str(name_or_path), f"scenario not found (shipped: {', '.join(scenario_names())})")
    data = read_yaml(path)
    return scenario_from_dict(data, str(path))


def scenario_from_dict(data: dict[str, Any], where: str) -> Scenario:
    if not isinstance(data, dict):
        raise ConfigError(where, "expected a mapping at the top level")
    try:
        classes = {c: ClassSpec(**spec) for c, spec in data["classes"].items()}
        mix = tuple(ShapeSpec(**m) for m in data.get("mix", ()))
        sc = Scenario(
            name=data["name"], profile=data["profile"], serving=ServingConfig(**data.get("serving", {})),
            duration_s=float(data["duration_s"]), arrival=dict(data["arrival"]), classes=classes, mix=mix,
            shapes_from=dict(data.get("shapes_from") or {}), description=data.get("description", ""), path=where)
    except (KeyError, TypeError) as exc:
        raise ConfigError(where, f"missing or malformed field {exc}") from None
    bad = [c for c in classes if c not in PRIORITY_CLASSES]
    if bad:
        raise ConfigError(f"{where}: classes", f"unknown classes {bad} (use {PRIORITY_CLASSES})")
    if not mix and not sc.shapes_from:
        raise ConfigError(where, "needs a 'mix' or 'shapes_from'")
    return sc
