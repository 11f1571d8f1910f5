"""``rlsched profile fit``: a cost profile from a measurement file, reproducibly.

A measurement set is a folder ``envs/profiles/measurements/NAME/`` holding
``measurements.csv`` (one number per row, each with its source; see
``rlsched.profiling.measurements``) and ``fit.yaml`` (what is fitted and what is not):

.. code-block:: yaml

    name: wan21-t2v-14b-h100
    comment: "lines written at the top of the profile"
    gpu: {name: H100, memory_gb: 80, peak_bf16_tflops: 989}
    max_mfu: 0.8    # b, c >= FLOP / (peak * max_mfu) for models whose spec gives flops
    stack: {engine: ..., attention: ..., compile: false, precision: bf16, cfg: batched}
    sources: ["..."]
    models:
      wan2.1-t2v-14b:
        spec: {modality: video}         # copied as is (token rule, patch, flops, ...)
        start: {floor_s: 0.1, a_s: 0.03, b_s_per_mtok: 20, ...}   # every coefficient
        fit: [b_s_per_mtok, c_s_per_gtok2]   # fitted to the rows with use=fit
        derive: {from: OTHER_SET, model: M, scale: {b_s_per_mtok: 0.36}}  # optional
        sp:                                  # optional: sequence parallelism (rlsched.sim.cost.SPCost)
          method: ulysses                    # what an integer --sp degree means
          start: {ulysses_comm_s_per_mtok: 5, ulysses_sync_s_per_degree: 0.01}
          fit: [ulysses_comm_s_per_mtok, ulysses_sync_s_per_degree]  # fitted to use=fit rows of degree > 1
          derive: {from: OTHER_SET, model: M}   # optional: start from another set's fitted sp block
        cfg_parallel:                        # optional: CFG parallelism (rlsched.sim.cost.CFGCost), DERIVED:
          bytes_per_token: 128               # copied into the profile as is (no CFG-parallel row is fitted)
          link_gb_s: 80
          latency_s: 2.4e-5
          source: "derived: how each number was obtained"

Coefficients not in ``fit`` keep their ``start`` value: they are estimates, and the
profile's sources say so. The fit minimises the relative error of every ``use=fit`` row
(``scipy.optimize.least_squares``, coefficients >= 0) and rounds each fitted value to
five significant digits, so the same files give the same profile byte for byte; the
shipped profiles are this function's output (a test re-fits and compares).

Sequence-parallel rows (``ulysses``/``ring`` columns, degree > 1) are fitted in a second
stage: the degree-1 coefficients come from degree-1 rows only (so adding SP rows to a set
never moves them), then the ``sp`` coefficients are fitted to the SP rows with the
degree-1 model held fixed (same relative least squares, coefficients >= 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched.atomic import input_file
from rlsched.errors import ConfigError
from rlsched.profiling.measurements import Measurement, read_measurements
from rlsched.resources import shipped_path
from rlsched.sim.cost import SP_KEYS, CostModel, profile_from_dict
from rlsched.sim.request import Request
from rlsched.sim.yamlio import read_yaml

STEP_KEYS = ("floor_s", "a_s", "b_s_per_mtok", "c_s_per_gtok2")
COEFFS = (*STEP_KEYS, "encode_s", "decode_s_per_mpx", "weights_gb", "act_gb_per_ktok", "vae_gb_per_mpx")
SIG_DIGITS = 5
SET_KEYS = ("name", "comment", "gpu", "max_mfu", "stack", "sources", "models")
MODEL_KEYS = ("spec", "start", "fit", "derive", "sp", "cfg_parallel")
SP_FIT_KEYS = ("method", "start", "fit", "derive")
SP_COEFFS = SP_KEYS[1:]


@dataclass(frozen=True, slots=True)
class Residual:
    """One measurement next to what the fitted profile predicts for it."""

    row: Measurement
    predicted: float

    @property
    def error(self) -> float:
        """Relative error (predicted / measured - 1)."""
        return self.predicted / self.row.value - 1.0


@dataclass(frozen=True, slots=True)
class FitResult:
    profile: dict[str, Any]
    """The profile as ``render_profile`` writes it to YAML."""
    residuals: list[Residual]
    comment: str

    def cost(self) -> CostModel:
        return profile_from_dict(_copy(self.profile), self.profile["name"])


def measurement_set(path: Path) -> tuple[Path, Path]:
    """(measurements.csv, fit.yaml) of a set given as its folder or either file (a relative
    ``envs/profiles/measurements/…`` path resolves among the shipped sets from any folder)."""
    path = shipped_path(path)
    folder = path if path.is_dir() else path.parent
    csv_path, spec_path = folder / "measurements.csv", folder / "fit.yaml"
    for p in (csv_path, spec_path):
        input_file(p, "measurement set file", hint=" (a measurement set: a folder with measurements.csv and fit.yaml)")
    return csv_path, spec_path


def fit_profile(path: Path) -> FitResult:
    """Fit the profile of the measurement set at ``path`` (folder, CSV or fit.yaml)."""
    csv_path, spec_path = measurement_set(path)
    spec = read_yaml(spec_path)
    rows = read_measurements(csv_path)
    where = str(spec_path)
    _known_keys(spec, SET_KEYS, where)
    for name, m in (spec.get("models") or {}).items():
        _known_keys(m, MODEL_KEYS, f"{where}: models.{name}")
    try:
        models = {name: _fit_model(name, m, rows, spec, spec_path) for name, m in spec["models"].items()}
        profile = {"name": spec["name"], "gpu": dict(spec["gpu"]), "stack": dict(spec["stack"]),
                   "sources": list(spec["sources"]), "models": models}
    except (KeyError, TypeError) as exc:
        raise ConfigError(where, f"missing or malformed field {exc}") from None
    cost = profile_from_dict(_copy(profile), where)
    unknown = sorted({r.model for r in rows} - set(models))
    if unknown:
        raise ConfigError(str(csv_path), f"rows name models not in fit.yaml: {unknown}")
    residuals = [Residual(r, predict(cost, r)) for r in rows]
    return FitResult(profile, residuals, str(spec.get("comment", "")).rstrip())


def _known_keys(data: Any, known: tuple[str, ...], where: str) -> None:
    """A typo (``max_mfuu``) must not silently drop a bound or a fit."""
    if not isinstance(data, dict):
        raise ConfigError(where, "must be a mapping")
    extra = sorted(set(data) - set(known))
    if extra:
        raise ConfigError(where, f"unknown keys {extra} (known: {list(known)})")


def predict(cost: CostModel, row: Measurement) -> float:
    """What ``cost`` says for the quantity ``row`` measured."""
    m = cost.model(row.model)
    reqs = [Request(i, 0.0, row.model, m.modality, row.height, row.width, row.frames, row.steps, row.cfg,
                    "batch", math.inf) for i in range(row.batch)]
    recs = [cost.record(r) for r in reqs]
    if row.layout.degree > 1:
        return _predict_sp(cost, row, recs)
    if row.metric == "step_s":
        return cost.batch_step_time(recs)
    if row.metric == "diffuse_s":
        return row.steps * cost.batch_step_time(recs)
    if row.metric == "total_s":
        return recs[0].encode_s + row.steps * cost.batch_step_time(recs) + recs[0].decode_s
    if row.metric == "encode_s":
        return recs[0].encode_s
    if row.metric == "decode_s":
        return sum(r.decode_s for r in recs)
    if row.metric == "peak_gb":
        return cost.batch_memory_gb(recs)
    tokens, quad = sum(r.tokens for r in recs), sum(r.quad for r in recs)  # attn_share
    attn = m.c_s_per_gtok2 * quad
    k = m.passes(reqs[0]) if m.sequential_cfg else 1
    return attn / (k * m.a_s + m.b_s_per_mtok * tokens + attn)


def _predict_sp(cost: CostModel, row: Measurement, recs: list[Any]) -> float:
    """A row measured on ``row.layout`` (degree > 1): encode and decode are not split."""
    if row.metric in ("step_s", "diffuse_s", "total_s"):
        step = cost.batch_step_time_sp(recs, row.layout)
        if row.metric == "step_s":
            return step
        if row.metric == "diffuse_s":
            return row.steps * step
        return recs[0].encode_s + row.steps * step + recs[0].decode_s
    if row.metric == "peak_gb":
        return cost.batch_memory_gb_sp(recs, row.layout)
    if row.metric == "encode_s":
        return recs[0].encode_s
    if row.metric == "decode_s":
        return sum(r.decode_s for r in recs)
    raise ConfigError(f"measurements line {row.line}", f"metric {row.metric!r} is not modelled for a"
                      f" sequence-parallel row ({row.layout})")


def _fit_model(name: str, m: dict[str, Any], rows: list[Measurement], spec: dict[str, Any],
               spec_path: Path) -> dict[str, Any]:
    where = f"{spec_path}: models.{name}"
    coeffs = {k: float(v) for k, v in m["start"].items()}
    missing = [k for k in COEFFS if k not in coeffs]
    if missing:
        raise ConfigError(where, f"start: missing {missing}")
    if "derive" in m:
        coeffs.update(_derived(m["derive"], spec_path, where))
    free = list(m.get("fit", []))
    bad = [k for k in free if k not in COEFFS]
    if bad:
        raise ConfigError(where, f"fit: unknown coefficients {bad} (known: {COEFFS})")
    mine = [r for r in rows if r.model == name and r.use == "fit" and r.layout.degree == 1]
    if free:
        if len(mine) < len(free):
            raise ConfigError(where, f"{len(free)} coefficients to fit but only {len(mine)} 'fit' rows")
        coeffs.update(_least_squares(name, m, coeffs, free, mine, spec, where))
    sp = _fit_sp(name, m, coeffs, rows, spec, spec_path) if "sp" in m else None
    return _model_entry(m.get("spec", {}), coeffs, sp, m.get("cfg_parallel"))


def _fit_sp(name: str, m: dict[str, Any], coeffs: dict[str, float], rows: list[Measurement],
            spec: dict[str, Any], spec_path: Path) -> dict[str, Any]:
    """The model's ``sp`` block: start (or another set's fit), then the listed coefficients
    fitted to this model's ``fit`` rows of degree > 1 with the degree-1 model fixed.

    ``sp.fit`` may also name degree-1 coefficients that only multi-GPU rows identify (the
    step ``floor_s`` when every degree-1 row is compute-bound); those are then fitted to every
    ``fit`` row of the model, of every degree, and updated in ``coeffs``."""
    import numpy as np
    from scipy.optimize import least_squares

    where = f"{spec_path}: models.{name}.sp"
    sp = m["sp"]
    _known_keys(sp, SP_FIT_KEYS, where)
    start = dict(sp.get("start") or {})
    bad = sorted(set(start) - set(SP_COEFFS))
    if bad:
        raise ConfigError(where, f"start: unknown coefficients {bad} (known: {list(SP_COEFFS)})")
    values = {k: float(v) for k, v in start.items()}
    method = sp.get("method")
    if "derive" in sp:
        base = _derived_sp(sp["derive"], spec_path, where)
        method = method or base.get("method")
        values = {**{k: float(v) for k, v in base.items() if k in SP_COEFFS}, **values}
    method = method or "ulysses"
    free = list(sp.get("fit") or [])
    bad = [k for k in free if k not in SP_COEFFS and k not in COEFFS]
    if bad:
        raise ConfigError(where, f"fit: unknown coefficients {bad} (known: {list(SP_COEFFS)} or {list(COEFFS)})")
    shared = [k for k in free if k in COEFFS]
    if set(shared) & set(m.get("fit", [])):
        raise ConfigError(where, f"fit: {sorted(set(shared) & set(m.get('fit', [])))} are already fitted at degree 1")
    missing = [k for k in free if k not in values and k not in COEFFS]
    if missing:
        raise ConfigError(where, f"fit: {missing} need a start value")
    block: dict[str, Any] = {"method": method, **{k: values[k] for k in SP_COEFFS if k in values}}
    mine = [r for r in rows if r.model == name and r.use == "fit" and (shared or r.layout.degree > 1)]
    n_sp = sum(r.layout.degree > 1 for r in mine)
    if free and n_sp == 0:
        raise ConfigError(where, "coefficients to fit but no 'fit' rows of degree > 1")
    if free and len(mine) < len(free):
        raise ConfigError(where, f"{len(free)} coefficients to fit but only {len(mine)} 'fit' rows")

    def split(x: Any) -> tuple[dict[str, float], dict[str, Any]]:
        trial = dict(zip(free, (float(v) for v in x)))
        return ({**coeffs, **{k: v for k, v in trial.items() if k in COEFFS}},
                {**block, **{k: v for k, v in trial.items() if k in SP_COEFFS}})

    def resid(x: Any) -> Any:
        c1, c_sp = split(x)
        prof = {"name": spec["name"], "gpu": dict(spec["gpu"]), "stack": dict(spec["stack"]),
                "sources": ["fit"], "models": {name: _model_entry(m.get("spec", {}), c1, c_sp)}}
        c = profile_from_dict(prof, where)
        return np.array([predict(c, r) / r.value - 1.0 for r in mine])

    if free:
        lower = _physical_lower_bounds(m.get("spec", {}).get("flops", {}), spec)
        lb = np.array([lower.get(k, 0.0) for k in free])
        x0 = np.maximum(np.array([values[k] if k in SP_COEFFS else coeffs[k] for k in free]), lb * 1.001)
        sol = least_squares(resid, x0, bounds=(lb, np.inf), x_scale=np.maximum(np.abs(x0), 1e-6),
                            xtol=1e-12, ftol=1e-12, gtol=1e-12)
        _identified(sol, free, where)
        # a coefficient the rows push to its bound of 0 is written as 0, not as 1e-14 of noise
        fitted = {k: _round(float(v)) if float(v) > 1e-9 * max(float(s0), 1.0) else 0.0
                  for k, v, s0 in zip(free, sol.x, x0)}
        coeffs.update({k: v for k, v in fitted.items() if k in COEFFS})
        block.update({k: v for k, v in fitted.items() if k in SP_COEFFS})
    return {k: v if k == "method" else _num(v) for k, v in block.items()}


def _derived_sp(d: dict[str, Any], spec_path: Path, where: str) -> dict[str, Any]:
    """Another set's fitted ``sp`` block (a transfer, not a measurement of this profile)."""
    _known_keys(d, ("from", "model"), f"{where}.derive")
    try:
        base = fit_profile(spec_path.parent.parent / d["from"]).profile["models"][d["model"]]
    except KeyError as exc:
        raise ConfigError(f"{where}.derive", f"missing or unknown {exc}") from None
    if "sp" not in base:
        raise ConfigError(f"{where}.derive", f"{d['from']} model {d['model']!r} has no sp block")
    return dict(base["sp"])


def _least_squares(name: str, m: dict[str, Any], coeffs: dict[str, float], free: list[str],
                   rows: list[Measurement], spec: dict[str, Any], where: str) -> dict[str, float]:
    import numpy as np
    from scipy.optimize import least_squares

    def cost_of(x: Any) -> CostModel:
        trial = {**coeffs, **dict(zip(free, (float(v) for v in x)))}
        prof = {"name": spec["name"], "gpu": dict(spec["gpu"]), "stack": dict(spec["stack"]),
                "sources": ["fit"], "models": {name: _model_entry(m.get("spec", {}), trial)}}
        return profile_from_dict(prof, where)

    def resid(x: Any) -> Any:
        c = cost_of(x)
        return np.array([predict(c, r) / r.value - 1.0 for r in rows])

    lower = _physical_lower_bounds(m.get("spec", {}).get("flops", {}), spec)
    lb = np.array([lower.get(k, 0.0) for k in free])
    x0 = np.maximum(np.array([coeffs[k] for k in free]), lb * 1.001)
    sol = least_squares(resid, x0, bounds=(lb, np.inf), x_scale=np.maximum(np.abs(x0), 1e-6),
                        xtol=1e-12, ftol=1e-12, gtol=1e-12)
    _identified(sol, free, where)
    return {k: _round(float(v)) for k, v in zip(free, sol.x)}


IDENTIFIED_RCOND = 1e-8
"""Smallest singular value, relative to the largest, of the fit's relative sensitivities for its
coefficients to count as identified by the rows."""


def _identified(sol: Any, free: list[str], where: str) -> None:
    """ConfigError unless the rows pin down every fitted coefficient off its bound.

    When they do not (three step coefficients fitted to two resolutions), a whole line of
    values fits equally well, and which one the solver returns depends on the last bits of
    its linear algebra: the same measurement set gave a_s 0.031 on one CPU's BLAS kernels and
    0.032 on another's, so a shipped profile could not be refitted exactly. Coefficients at
    a bound are pinned there and not asked about."""
    import numpy as np

    inside = [i for i, a in enumerate(sol.active_mask) if a == 0]
    if not inside:
        return
    jac = np.asarray(sol.jac)[:, inside] * np.maximum(np.abs(sol.x[inside]), 1e-12)  # relative sensitivities
    _, sv, vt = np.linalg.svd(jac, full_matrices=True)
    sv = np.concatenate([sv, np.zeros(len(inside) - sv.size)])  # fewer rows than coefficients: zeros
    if sv.max() > 0 and sv.min() >= IDENTIFIED_RCOND * sv.max():
        return
    line = np.abs(vt[-1])  # the direction along which the fit does not change
    names = [free[i] for i, w in zip(inside, line) if w > 0.1 * line.max()]
    raise ConfigError(f"{where}: fit", f"the 'fit' rows do not identify {names} (values along a line fit them "
                      "equally well): hold one of them at a start value, or add rows that separate them")


def _physical_lower_bounds(flops: dict[str, float], spec: dict[str, Any]) -> dict[str, float]:
    """Least seconds per token (b) and per token² (c) the GPU can reach: FLOP / (peak · max_mfu).

    Without these bounds a fit to few points can land on coefficients that imply more
    FLOP/s than the GPU has (the old Wan2.1 profile implied ~1.7 PFLOP/s on an H100)."""
    peak = float(spec["gpu"].get("peak_bf16_tflops", 0.0)) * 1e12 * float(spec.get("max_mfu", 1.0))
    if not peak:
        return {}
    return {"b_s_per_mtok": float(flops.get("linear_gflop_per_token", 0.0)) * 1e15 / peak,
            "c_s_per_gtok2": float(flops.get("attn_flop_per_token2", 0.0)) * 1e9 / peak}


def _derived(d: dict[str, Any], spec_path: Path, where: str) -> dict[str, float]:
    """Coefficients scaled from another set's fit (a derived model, not a measured one)."""
    base = fit_profile(spec_path.parent.parent / d["from"]).profile["models"][d["model"]]
    flat = {**base["step"], **{k: v for k, v in base.items() if k in COEFFS}}
    try:
        return {k: _round(flat[k] * float(s)) for k, s in d["scale"].items()}
    except KeyError as exc:
        raise ConfigError(where, f"derive.scale: unknown coefficient {exc}") from None


def _model_entry(spec: dict[str, Any], c: dict[str, float], sp: dict[str, Any] | None = None,
                 cfg_parallel: dict[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {k: v for k, v in spec.items() if k != "flops"}
    entry["step"] = {k: _num(c[k]) for k in STEP_KEYS}
    for k in COEFFS[len(STEP_KEYS):]:
        entry[k] = _num(c[k])
    if "flops" in spec:
        entry["flops"] = dict(spec["flops"])
    if sp is not None:
        entry["sp"] = dict(sp)
    if cfg_parallel is not None:
        entry["cfg_parallel"] = dict(cfg_parallel)
    return entry


def _round(x: float) -> float:
    return 0.0 if x == 0 else round(x, SIG_DIGITS - 1 - int(math.floor(math.log10(abs(x)))))


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def _copy(profile: dict[str, Any]) -> dict[str, Any]:
    return {**profile, "models": {k: dict(v) for k, v in profile["models"].items()}}


def render_profile(result: FitResult, source: str) -> str:
    """The profile as YAML text, with a header saying how it was made."""
    p = result.profile
    lines = [f"# {line}".rstrip() for line in result.comment.splitlines()]
    lines += [f"# Written by `rlsched profile fit {source}`: do not edit by hand; edit the",
              "# measurements or fit.yaml and re-fit (tests/sim/test_profile_fit.py compares)."]
    lines += [f"name: {p['name']}", f"gpu: {_flow(p['gpu'])}", f"stack: {_flow(p['stack'])}", "sources:"]
    lines += [f"  - {_scalar(s)}" for s in p["sources"]]
    lines.append("models:")
    for name, m in p["models"].items():
        lines.append(f"  {name}:")
        for k, v in m.items():
            lines.append(f"    {k}: {_flow(v) if isinstance(v, dict) else _scalar(v)}")
    return "\n".join(lines) + "\n"


def _flow(d: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in d.items()) + "}"


def _scalar(v: Any) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and "e" in repr(v) and "." not in repr(v):
        mantissa, _, exponent = repr(v).partition("e")  # YAML 1.1 (PyYAML) reads 5e-05 as a string
        return f"{mantissa}.0e{exponent}"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v), ensure_ascii=False)
