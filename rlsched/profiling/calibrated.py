"""A shipped profile with an online calibration applied, written out as a profile file with its provenance
(``rlsched profile calibrate``).

The plugin logs each calibration version (``rlsched: cost profile NAME calibrated, version N: MODEL time
xT, attention xQ, memory xM[, fixed xF[, encode xE[, decode xD[, comm xC]]]]``; the same numbers are in
``rlsched_calibration_scale``). Given those scales, ``calibrated_profile`` writes into the profile file the
coefficients of ``rlsched.sim.truth.rescaled``'s cost — every time term by ``time``, the attention term once
more by ``attention``, per-request memory by ``memory``, and each form term (``FORM_TERMS``, 1 when the line
has none) its part once more: ``fixed`` the step's floor and per-forward terms, ``encode`` the encode,
``decode`` the decode, ``comm`` the SP and CFG-parallel communication — so which coefficient a scale
multiplies is said once, in ``rescaled``. It renames the profile ``NAME-calibrated``, adds a ``sources`` line
saying where the scales came from (and which form terms were refit), and checks the result loads as a
profile before anything is written.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Collection
from typing import Any

import yaml

from rlsched.errors import ConfigError
from rlsched.routing.views import SCALE_HIGHS as HIGHS
from rlsched.routing.views import SCALE_LOW
from rlsched.sim.cost import ModelCost, profile_from_dict, profile_path
from rlsched.sim.truth import FORM_TERMS, MEMORY_TERMS, SP_TIME_TERMS, STEP_TERMS, TIME_TERMS, rescaled
from rlsched.sim.truth import SCALE_TERMS as TERMS
from rlsched.sim.yamlio import read_yaml

LOG_LINE = re.compile(r"rlsched: cost profile (?P<profile>\S+) calibrated, version (?P<version>\d+): (?P<model>\S+) "
                      r"time x(?P<time>[0-9.]+), attention x(?P<attention>[0-9.]+), memory x(?P<memory>[0-9.]+)"
                      + "".join(rf"(?:, {t} x(?P<{t}>[0-9.]+))?" for t in FORM_TERMS))
"""The plugin's log line for a calibration version (``BatchClock.calibrated``,
rlsched/integrations/vllm_omni/batch_clock.py); a form term it leaves off is 1 (a line of an older release
has none, or ``fixed`` alone)."""
Scales = dict[str, tuple[float, ...]]
"""Per model ``(time, attention, memory[, fixed, encode, decode, comm])`` (``TERMS``)."""
METRIC_SAMPLE = re.compile(r"^(?P<name>rlsched_calibration_(?:scale|version))\{(?P<labels>[^}]*)\} (?P<value>\S+)",
                           re.MULTILINE)
"""A sample of the calibration's gauges in Prometheus' text format (``rlsched.integrations.vllm_omni.metrics``)."""
METRIC_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
NUMBER = re.compile(r"\+?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
"""A scale as written: a plain decimal number, an exponent allowed."""


def scales_from_log(text: str, where: str) -> tuple[str, int, Scales]:
    """(profile, version, per-model scales) of the newest calibration line in a server log; ``ConfigError``
    naming ``where`` when it has none, or naming the line of one whose numbers a calibration cannot publish
    (``check_scales``: ``1.2.3``, ``0``, past the bounds). Lines of several profiles (replicas of different
    kinds): the last profile's."""
    found = list(LOG_LINE.finditer(text))
    if not found:
        raise ConfigError(where, "no 'rlsched: cost profile ... calibrated, version N: ...' line (the plugin logs "
                                 "one per calibration version; none means the profile was never moved)")
    profile = found[-1]["profile"]
    scales: Scales = {}
    version = 0
    for m in found:
        if m["profile"] == profile:
            line = f"{where}:{text.count(chr(10), 0, m.start()) + 1}"
            values = check_scales(m["model"], [m[t] or "1" for t in TERMS], line)
            scales[m["model"]] = values  # a model's newer line replaces its older one
            version = int(m["version"])
    return profile, version, scales


def scales_from_metrics(text: str, models: Collection[str], where: str) -> tuple[int, Scales]:
    """(version, per-model scales) from a replica's ``/metrics`` text (Prometheus' text format:
    ``rlsched_calibration_version`` and ``rlsched_calibration_scale{model_name, term}``; a term not exported is 1).
    ``model_name`` is the name vLLM serves the model by: a profile model of that name, else the one model of a
    one-model profile (``models``); ``ConfigError`` naming ``where`` for metrics of no calibration, a served
    model the profile cannot be told to hold, or a scale ``check_scales`` refuses."""
    versions: dict[str, int] = {}
    values: dict[str, dict[str, str]] = {}
    for m in METRIC_SAMPLE.finditer(text):
        labels = dict(METRIC_LABEL.findall(m["labels"]))
        served = labels.get("model_name", "")
        if m["name"] == "rlsched_calibration_version":
            versions[served] = int(float(m["value"])) if NUMBER.fullmatch(m["value"]) else 0
        elif labels.get("term") in TERMS:
            values.setdefault(served, {})[labels["term"]] = m["value"]
    calibrated = {served: terms for served, terms in values.items() if versions.get(served, 0) > 0}
    if not calibrated:
        raise ConfigError(where, "no rlsched_calibration_scale of a calibration version above 0 (the profile was "
                                 "never moved, or these are not an rlsched replica's metrics)")
    scales: Scales = {}
    for served, terms in calibrated.items():
        model = _profile_model(served, models, where)
        scales[model] = check_scales(model, [terms.get(t, "1") for t in TERMS], where)
    return max(versions[served] for served in calibrated), scales


def _profile_model(served: str, models: Collection[str], where: str) -> str:
    if served in models:
        return served
    if len(models) == 1:
        return next(iter(models))
    raise ConfigError(where, f"served model {served!r} is none of the profile's models {sorted(models)}: give its "
                             "scales by hand (--scales MODEL=...)")


def parse_scales(text: str, where: str) -> Scales:
    """``MODEL=TIME,ATTENTION[,MEMORY[,FIXED[,ENCODE[,DECODE[,COMM]]]]]`` entries separated by ``;``, each model
    once (``check_scales``; a term left off is 1)."""
    out: Scales = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        model, eq, values = entry.partition("=")
        model = model.strip()
        nums = values.split(",")
        if not eq or not model or not 2 <= len(nums) <= len(TERMS):
            raise ConfigError(where, f"{entry!r}: expected "
                                     "MODEL=TIME,ATTENTION[,MEMORY[,FIXED[,ENCODE[,DECODE[,COMM]]]]] "
                                     "(positive numbers)")
        if model in out:
            raise ConfigError(where, f"{entry!r}: model {model!r} is given twice (one entry per model)")
        out[model] = check_scales(model, nums + ["1"] * (len(TERMS) - len(nums)), where)
    if not out:
        raise ConfigError(where, "no MODEL=TIME,ATTENTION[,MEMORY] entry")
    return out


def check_scales(model: str, values: list[str], where: str) -> tuple[float, ...]:
    """``values`` (one per ``TERMS``) as numbers a calibration can publish, trailing 1s past the first three left
    off as ``CostCalibrator.scales`` does: each a plain finite number within the published state's bounds
    (``HIGHS``: what a router accepts of a replica); a malformed, zero or unbounded scale wrote a profile no
    replica could have reached (or a traceback, for ``1.2.3``)."""
    out: list[float] = []
    for name, text, high in zip(TERMS, values, HIGHS):
        value = float(text) if NUMBER.fullmatch(text.strip()) else math.nan  # not float's "1_0", "inf", "nan"
        if not SCALE_LOW <= value <= high:
            raise ConfigError(where, f"{model}: {name} scale {text.strip()!r} must be a number >= {SCALE_LOW:g} "
                                     f"and <= {high:g} (the bounds of a published calibration)")
        out.append(value)
    while len(out) > 3 and out[-1] == 1.0:  # form terms of 1: the three scales of the profile's form
        out.pop()
    return tuple(out)


def calibrated_profile(profile: str, scales: Scales, provenance: str) -> dict[str, Any]:
    """The profile file's data (``profile``: a shipped name or a path) with each model's coefficients those of
    ``rescaled(profile, scales)`` (module docstring); ``ConfigError`` for a model the profile does not hold or a
    result that is not a profile."""
    path = profile_path(profile)  # as load_profile finds it
    data = copy.deepcopy(read_yaml(path))
    models = data.get("models", {})
    for name in scales:
        if name not in models:
            raise ConfigError(f"{path}: models", f"no model {name!r} to calibrate (it holds {sorted(models)})")
    scaled = rescaled(profile_from_dict(data, str(path)), scales, "calibrated")
    for name in scales:
        _write_model(models[name], scaled.model(name))
    data["name"] = f"{data['name']}-calibrated"
    data["sources"] = [*data.get("sources", []), f"{provenance}{_refit(scales)}"]
    profile_from_dict(data, f"{path} (calibrated)")  # a profile, or an error before anything is written
    return data


def _write_model(m: dict[str, Any], scaled: ModelCost) -> None:
    """A profile file's model block ``m`` given ``scaled``'s coefficients, where the file holds them (the step's
    coefficients sit in its ``step:`` block, the SP and CFG-parallel ones in ``sp:`` and ``cfg_parallel:``)."""
    for key in (*TIME_TERMS, *MEMORY_TERMS):
        where = m["step"] if key in STEP_TERMS else m
        if key in where:
            where[key] = _round(getattr(scaled, key))
    if isinstance(m.get("sp"), dict) and scaled.sp is not None:
        for key in SP_TIME_TERMS:
            if m["sp"].get(key) is not None:
                m["sp"][key] = _round(getattr(scaled.sp, key))
    if isinstance(m.get("cfg_parallel"), dict) and scaled.cfg_parallel is not None:
        for key in ("latency_s", "link_gb_s"):
            m["cfg_parallel"][key] = _round(getattr(scaled.cfg_parallel, key))


def _refit(scales: Scales) -> str:
    """The provenance's note of the form terms refit (those not 1), or nothing for the three scales alone."""
    refit = sorted({t for s in scales.values() for t, v in zip(FORM_TERMS, s[3:]) if v != 1.0},
                   key=FORM_TERMS.index)
    return f"; form terms refit: {', '.join(refit)}" if refit else ""


def render(data: dict[str, Any], header: str) -> str:
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    return "".join(f"# {line}\n" for line in header.splitlines()) + body


def _round(x: float) -> float:
    return float(f"{x:.6g}")


__all__ = ["HIGHS", "LOG_LINE", "TERMS", "calibrated_profile", "check_scales", "parse_scales", "render",
           "scales_from_log", "scales_from_metrics"]
