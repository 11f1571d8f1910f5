"""Statistics over seeds: a grid's rows aggregated into cells (mean, 95 % t-interval)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlsched.run.interval import ci95_half_width


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
"""The keys aggregated for the shipped classes; a scenario of its own classes has one
``per_class.NAME.slo_attainment`` per class of its own instead (``summary_keys``)."""


def summary_keys(row: dict[str, Any]) -> tuple[str, ...]:
    """The keys aggregated for ``row``'s cell: ``SUMMARY_KEYS`` with its classes' names."""
    return (*SUMMARY_KEYS[:7], *(f"per_class.{c}.slo_attainment" for c in row.get("per_class", {})))


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
        for key in summary_keys(group[0]):
            vals = np.array([flat(r, key) for r in group])
            vals = vals[~np.isnan(vals)]
            mean[key] = float(vals.mean()) if vals.size else math.nan
            ci[key] = ci95_half_width(vals)
        cells.append(Cell(sc, pol, rs, len(group), mean, ci))
    return cells
