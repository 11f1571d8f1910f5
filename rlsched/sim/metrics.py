"""Metrics of a finished run, named as vLLM-Omni's diffusion benchmark names them.

SLO attainment counts every request: failed or unfinished requests miss their SLO.
The class-weighted attainment (``weighted_slo_attainment``) weights classes by
``CLASS_WEIGHTS``; it is the single number rlsched optimises and reports first.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from rlsched.sim.request import COMPLETED, FAILED_OOM, PRIORITY_CLASSES, REJECTED, RUNNING, WAITING, RequestRecord
from rlsched.sim.simulator import Simulator

CLASS_WEIGHTS = {"realtime": 3.0, "batch": 2.0, "background": 1.0}
"""Relative value of meeting one SLO per class (realtime counts 3× background)."""


def summarize(sim: Simulator) -> dict[str, Any]:
    """One flat-ish dict of every metric for a finished (or horizon-cut) run."""
    recs = list(sim.records.values())
    unseen = sim.arrivals_left
    total = len(recs) + unseen
    status = np.array([r.status for r in recs])
    met = np.array([r.slo_met for r in recs], dtype=bool)
    makespan = max(sim.now, 1e-9)
    completed = status == COMPLETED
    out: dict[str, Any] = {
        "requests_total": total,
        "requests_completed": int(completed.sum()),
        "requests_failed": int((status == FAILED_OOM).sum()),
        "requests_rejected": int((status == REJECTED).sum()),
    }
    # Counted at the source (still waiting or running, or never arrived before the horizon),
    # so the identity below is a real check that every request has exactly one outcome.
    out["requests_unfinished"] = int(((status == WAITING) | (status == RUNNING)).sum()) + unseen
    counted = sum(out[k] for k in ("requests_completed", "requests_failed", "requests_rejected",
                                   "requests_unfinished"))
    if counted != total:
        raise AssertionError(f"request outcomes do not add up: {counted} counted, {total} requests")
    out["rejections"] = dict(Counter(r.reject_reason for r in recs if r.status == REJECTED))
    out["slo_attainment"] = float(met.sum() / total) if total else math.nan
    out["goodput_rps"] = float(met.sum() / makespan)
    out["throughput_rps"] = float(completed.sum() / makespan)
    modality = np.array([r.request.modality for r in recs])
    out["images_per_s"] = float((completed & (modality == "image")).sum() / makespan)
    out["videos_per_s"] = float((completed & (modality == "video")).sum() / makespan)
    out.update(_latencies(recs, completed))
    out["per_class"] = {c: _class_stats(recs, status, met, c) for c in PRIORITY_CLASSES}
    out["weighted_slo_attainment"] = weighted_attainment(out["per_class"])
    out["failures"] = {"oom": out["requests_failed"], "oom_batches": sim.oom_batches}
    out["gpu_compute_util"] = float(sim.busy_s / makespan)
    out["gpu_memory_util"] = float((sim.cost.weights_gb + sim.mem_gb_s / makespan) / sim.cost.gpu_memory_gb)
    sizes = np.asarray(sim.batch_sizes or [0])
    out["batches"] = sim.batches
    out["batch_size_mean"] = float(sizes.mean())
    out["makespan_s"] = float(makespan)
    return out


def json_safe(obj: Any) -> Any:
    """NaN/inf → None, recursively, so ``json.dumps`` writes strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def weighted_attainment(per_class: dict[str, dict[str, Any]]) -> float:
    """Σ w_c·attainment_c / Σ w_c over the classes that had requests."""
    num = den = 0.0
    for c, stats in per_class.items():
        if stats["count"]:
            num += CLASS_WEIGHTS[c] * stats["slo_attainment"]
            den += CLASS_WEIGHTS[c]
    return num / den if den else math.nan


def _pcts(values: np.ndarray, prefix: str) -> dict[str, float]:
    if values.size == 0:
        return {f"{prefix}_{k}": math.nan for k in ("mean_s", "p50_s", "p90_s", "p99_s")}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {f"{prefix}_mean_s": float(values.mean()), f"{prefix}_p50_s": float(p50),
            f"{prefix}_p90_s": float(p90), f"{prefix}_p99_s": float(p99)}


def _latencies(recs: list[RequestRecord], completed: np.ndarray) -> dict[str, float]:
    arr = np.array([(r.request.arrival_s, r.first_scheduled_s, r.finish_s) for r in recs]).reshape(-1, 3)
    done = arr[completed]
    return {**_pcts(done[:, 2] - done[:, 0], "latency"),
            **_pcts(done[:, 1] - done[:, 0], "queueing"),
            **_pcts(done[:, 2] - done[:, 1], "processing")}


def _class_stats(recs: list[RequestRecord], status: np.ndarray, met: np.ndarray, cls: str) -> dict[str, Any]:
    mask = np.array([r.request.priority == cls for r in recs], dtype=bool)
    done = mask & (status == COMPLETED)
    lat = np.array([r.finish_s - r.request.arrival_s for r, d in zip(recs, done) if d])
    started = [r.first_scheduled_s - r.request.arrival_s for r, m in zip(recs, mask)
               if m and not math.isnan(r.first_scheduled_s)]
    count = int(mask.sum())
    return {
        "count": count,
        "completed": int(done.sum()),
        "slo_attainment": float(met[mask].sum() / count) if count else math.nan,
        "latency_p50_s": float(np.percentile(lat, 50)) if lat.size else math.nan,
        "latency_p99_s": float(np.percentile(lat, 99)) if lat.size else math.nan,
        "max_queue_wait_s": float(max(started)) if started else math.nan,
    }
