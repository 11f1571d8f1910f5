"""A shipped profile with an online calibration applied, written out as a profile file with its provenance
(``rlsched profile calibrate``).

The plugin logs each calibration version (``rlsched: cost profile NAME calibrated, version N: MODEL time
xT, attention xQ, memory xM[, fixed xF]``; the same numbers are in ``rlsched_calibration_scale``). Given
those scales, ``calibrated_profile`` scales the profile file's own coefficients exactly as
``rlsched.sim.truth.rescaled`` scales a loaded profile — every time term by ``time``, the attention term
once more by ``attention``, the step's floor and per-forward terms once more by ``fixed`` (1 when the line
has none), per-request memory by ``memory`` — renames it ``NAME-calibrated``, adds a ``sources`` line saying
where the scales came from, and checks the result loads as a profile before anything is written.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import yaml

from rlsched.errors import ConfigError
from rlsched.routing.views import MEMORY_HIGH, SCALE_HIGH, SCALE_LOW
from rlsched.sim.cost import PROFILE_DIR, profile_from_dict
from rlsched.sim.truth import FIXED_TERMS, MEMORY_TERMS, SP_TIME_TERMS, STEP_TERMS, TIME_TERMS
from rlsched.sim.yamlio import read_yaml

LOG_LINE = re.compile(r"rlsched: cost profile (?P<profile>\S+) calibrated, version (?P<version>\d+): (?P<model>\S+) "
                      r"time x(?P<time>[0-9.]+), attention x(?P<attention>[0-9.]+), memory x(?P<memory>[0-9.]+)"
                      r"(?:, fixed x(?P<fixed>[0-9.]+))?")
"""The plugin's log line for a calibration version (``BatchClock.calibrated``, rlsched/integrations/vllm_omni/batch_clock.py)."""
Scales = dict[str, tuple[float, ...]]
"""Per model ``(time, attention, memory, fixed)``."""
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
            values = check_scales(m["model"], [m["time"], m["attention"], m["memory"], m["fixed"] or "1"], line)
            scales[m["model"]] = values  # a model's newer line replaces its older one
            version = int(m["version"])
    return profile, version, scales


def parse_scales(text: str, where: str) -> Scales:
    """``MODEL=TIME,ATTENTION[,MEMORY[,FIXED]]`` entries separated by ``;``, each model once (``check_scales``)."""
    out: Scales = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        model, eq, values = entry.partition("=")
        model = model.strip()
        nums = values.split(",")
        if not eq or not model or len(nums) not in (2, 3, 4):
            raise ConfigError(where, f"{entry!r}: expected MODEL=TIME,ATTENTION[,MEMORY[,FIXED]] (positive numbers)")
        if model in out:
            raise ConfigError(where, f"{entry!r}: model {model!r} is given twice (one entry per model)")
        out[model] = check_scales(model, nums + ["1"] * (4 - len(nums)), where)
    if not out:
        raise ConfigError(where, "no MODEL=TIME,ATTENTION[,MEMORY] entry")
    return out


def check_scales(model: str, values: list[str], where: str) -> tuple[float, ...]:
    """``[time, attention, memory, fixed]`` as numbers a calibration can publish: each a plain finite number within the
    published state's bounds (``rlsched.routing.views``: what a router accepts of a replica); a malformed,
    zero or unbounded scale wrote a profile no replica could have reached (or a traceback, for ``1.2.3``)."""
    highs = (SCALE_HIGH, SCALE_HIGH, MEMORY_HIGH, SCALE_HIGH)
    out = []
    for name, text, high in zip(("time", "attention", "memory", "fixed"), values, highs):
        value = float(text) if NUMBER.fullmatch(text.strip()) else math.nan  # not float's "1_0", "inf", "nan"
        if not SCALE_LOW <= value <= high:
            raise ConfigError(where, f"{model}: {name} scale {text.strip()!r} must be a number >= {SCALE_LOW:g} "
                                     f"and <= {high:g} (the bounds of a published calibration)")
        out.append(value)
    return tuple(out) if out[3:] != [1.0] else tuple(out[:3])  # fixed 1: the three scales of a uniform form


def calibrated_profile(profile: str, scales: Scales, provenance: str) -> dict[str, Any]:
    """The profile file's data (``profile``: a shipped name or a path) with ``scales`` applied (module
    docstring); ``ConfigError`` for a model the profile does not hold or a result that is not a profile."""
    path = Path(profile)
    if not path.suffix:
        path = PROFILE_DIR / f"{profile}.yaml"
    data = copy.deepcopy(read_yaml(path))
    models = data.get("models", {})
    for name, (time, attention, memory, *form) in scales.items():
        fixed = form[0] if form else 1.0
        if name not in models:
            raise ConfigError(f"{path}: models", f"no model {name!r} to calibrate (it holds {sorted(models)})")
        m = models[name]
        step = m["step"]
        for key in TIME_TERMS:  # the step's coefficients sit in the file's step: block
            where = step if key in STEP_TERMS else m
            if key in where:
                once_more = attention if key == "c_s_per_gtok2" else fixed if key in FIXED_TERMS else 1.0
                where[key] = _round(where[key] * time * once_more)
        for key in MEMORY_TERMS:
            m[key] = _round(m[key] * memory)
        for key in SP_TIME_TERMS:
            if isinstance(m.get("sp"), dict) and m["sp"].get(key) is not None:
                m["sp"][key] = _round(m["sp"][key] * time)
        if isinstance(m.get("cfg_parallel"), dict):
            cfg = m["cfg_parallel"]
            cfg["latency_s"], cfg["link_gb_s"] = _round(cfg["latency_s"] * time), _round(cfg["link_gb_s"] / time)
    data["name"] = f"{data['name']}-calibrated"
    data["sources"] = [*data.get("sources", []), provenance]
    profile_from_dict(data, f"{path} (calibrated)")  # a profile, or an error before anything is written
    return data


def render(data: dict[str, Any], header: str) -> str:
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    return "".join(f"# {line}\n" for line in header.splitlines()) + body


def _round(x: float) -> float:
    return float(f"{x:.6g}")


__all__ = ["LOG_LINE", "calibrated_profile", "check_scales", "parse_scales", "render", "scales_from_log"]
