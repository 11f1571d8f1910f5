"""A shipped profile with an online calibration applied, written out as a profile file with its provenance
(``rlsched profile calibrate``).

The plugin logs each calibration version (``rlsched: cost profile NAME calibrated, version N: MODEL time
xT, attention xQ, memory xM``; the same numbers are in ``rlsched_calibration_scale``). Given those scales,
``calibrated_profile`` scales the profile file's own coefficients exactly as ``rlsched.sim.truth.rescaled``
scales a loaded profile — every time term by ``time``, the attention term once more by ``attention``,
per-request memory by ``memory`` — renames it ``NAME-calibrated``, adds a ``sources`` line saying where
the scales came from, and checks the result loads as a profile before anything is written.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from rlsched.errors import ConfigError
from rlsched.sim.cost import PROFILE_DIR, profile_from_dict
from rlsched.sim.truth import MEMORY_TERMS, SP_TIME_TERMS, STEP_TERMS, TIME_TERMS
from rlsched.sim.yamlio import read_yaml

LOG_LINE = re.compile(r"rlsched: cost profile (?P<profile>\S+) calibrated, version (?P<version>\d+): (?P<model>\S+) "
                      r"time x(?P<time>[0-9.]+), attention x(?P<attention>[0-9.]+), memory x(?P<memory>[0-9.]+)")
"""The plugin's log line for a calibration version (``RLRequestScheduler._calibrated``)."""
Scales = dict[str, tuple[float, float, float]]


def scales_from_log(text: str, where: str) -> tuple[str, int, Scales]:
    """(profile, version, per-model scales) of the newest calibration line in a server log; ``ConfigError``
    naming ``where`` when it has none. Lines of several profiles (replicas of different kinds): the last
    profile's."""
    found = list(LOG_LINE.finditer(text))
    if not found:
        raise ConfigError(where, "no 'rlsched: cost profile ... calibrated, version N: ...' line (the plugin logs "
                                 "one per calibration version; none means the profile was never moved)")
    profile = found[-1]["profile"]
    scales: Scales = {}
    version = 0
    for m in found:
        if m["profile"] == profile:
            scales[m["model"]] = (float(m["time"]), float(m["attention"]), float(m["memory"]))
            version = int(m["version"])
    return profile, version, scales


def parse_scales(text: str, where: str) -> Scales:
    """``MODEL=TIME,ATTENTION[,MEMORY]`` entries separated by ``;``."""
    out: Scales = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        model, eq, values = entry.partition("=")
        try:
            nums = [float(v) for v in values.split(",")]
        except ValueError:
            nums = []
        if not eq or not model.strip() or len(nums) not in (2, 3) or not all(0 < v < float("inf") for v in nums):
            raise ConfigError(where, f"{entry!r}: expected MODEL=TIME,ATTENTION[,MEMORY] (positive numbers)")
        out[model.strip()] = (nums[0], nums[1], nums[2] if len(nums) == 3 else 1.0)
    if not out:
        raise ConfigError(where, "no MODEL=TIME,ATTENTION[,MEMORY] entry")
    return out


def calibrated_profile(profile: str, scales: Scales, provenance: str) -> dict[str, Any]:
    """The profile file's data (``profile``: a shipped name or a path) with ``scales`` applied (module
    docstring); ``ConfigError`` for a model the profile does not hold or a result that is not a profile."""
    path = Path(profile)
    if not path.suffix:
        path = PROFILE_DIR / f"{profile}.yaml"
    data = copy.deepcopy(read_yaml(path))
    models = data.get("models", {})
    for name, (time, attention, memory) in scales.items():
        if name not in models:
            raise ConfigError(f"{path}: models", f"no model {name!r} to calibrate (it holds {sorted(models)})")
        m = models[name]
        step = m["step"]
        for key in TIME_TERMS:  # the step's coefficients sit in the file's step: block
            where = step if key in STEP_TERMS else m
            if key in where:
                where[key] = _round(where[key] * time * (attention if key == "c_s_per_gtok2" else 1.0))
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


__all__ = ["LOG_LINE", "calibrated_profile", "parse_scales", "render", "scales_from_log"]
