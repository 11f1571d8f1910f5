"""Metrics of a finished run, named as vLLM-Omni's diffusion benchmark names them.

SLO attainment counts every request: failed or unfinished requests miss their SLO.
The class-weighted attainment (``weighted_slo_attainment``) weights each class by its
weight (the scenario's ``classes``; the shipped three by ``CLASS_WEIGHTS``); it is the single
number rlsched optimises and reports first. ``per_class`` is keyed by the classes' names.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rlsched.sim.classes import names_of, weights_of
from rlsched.sim.request import (
    COMPLETED,
    FAILED_OOM,
    REJECTED,
    RUNNING,
    TIER_WEIGHTS,
    WAITING,
    RequestRecord,
)

CLASS_WEIGHTS = TIER_WEIGHTS
"""Relative value of meeting one SLO per shipped class (realtime counts 3× background); a request of
any class carries its own (``Request.weight``)."""


_STATUS = {s: i for i, s in enumerate((WAITING, RUNNING, COMPLETED, FAILED_OOM, REJECTED))}


class Gpu(Protocol):
    @property
    def weights_gb(self) -> float: ...

    @property
    def gpu_memory_gb(self) -> float: ...


class Run(Protocol):
    """What ``summarize`` reads of a run: a ``Simulator``, or a stage's replicas pooled (``_Pooled``)."""

    @property
    def records(self) -> Mapping[int, RequestRecord]: ...

    @property
    def arrivals_left(self) -> int: ...

    @property
    def now(self) -> float: ...

    @property
    def oom_batches(self) -> int: ...

    @property
    def busy_s(self) -> float: ...

    @property
    def mem_gb_s(self) -> float: ...

    @property
    def batch_sizes(self) -> Sequence[int]: ...

    @property
    def batches(self) -> int: ...

    @property
    def cost(self) -> Gpu: ...


def summarize(sim: Run, classes: Sequence[str] | None = None) -> dict[str, Any]:
    """One flat-ish dict of every metric for a finished (or horizon-cut) run.

    ``classes``: the names ``per_class`` lists, in order (the scenario's, so a class without requests
    still has its row); default: the shipped three, or the classes the run's requests name
    (``rlsched.sim.classes.names_of``).

    Per-request columns are small numpy arrays (a status code, not its string; no tuple or
    float object per request): a million-request run summarises in tens of MB."""
    recs = list(sim.records.values())
    unseen = sim.arrivals_left
    total = len(recs) + unseen
    n = len(recs)
    status = np.fromiter((_STATUS.get(r.status, -1) for r in recs), np.int8, n)
    met = np.fromiter((r.slo_met for r in recs), bool, n)
    makespan = max(sim.now, 1e-9)
    completed = status == _STATUS[COMPLETED]
    out: dict[str, Any] = {
        "requests_total": total,
        "requests_completed": int(completed.sum()),
        "requests_failed": int((status == _STATUS[FAILED_OOM]).sum()),
        "requests_rejected": int((status == _STATUS[REJECTED]).sum()),
    }
    # Counted at the source (still waiting or running, or never arrived before the horizon),
    # so the identity below is a real check that every request has exactly one outcome.
    out["requests_unfinished"] = int(((status == _STATUS[WAITING]) | (status == _STATUS[RUNNING])).sum()) + unseen
    counted = sum(out[k] for k in ("requests_completed", "requests_failed", "requests_rejected",
                                   "requests_unfinished"))
    if counted != total:
        raise AssertionError(f"request outcomes do not add up: {counted} counted, {total} requests")
    # Completed past the SLO: a policy that gives up on a request it cannot save (a lost one) serves it
    # last, so these set the tail latency; a table must say how many there are beside the p99.
    out["requests_late"] = int((completed & ~met).sum())
    out["rejections"] = dict(Counter(r.reject_reason for r in recs if r.status == REJECTED))
    out["slo_attainment"] = float(met.sum() / total) if total else math.nan
    out["goodput_rps"] = float(met.sum() / makespan)
    out["throughput_rps"] = float(completed.sum() / makespan)
    image = np.fromiter((r.request.modality == "image" for r in recs), bool, n)
    video = np.fromiter((r.request.modality == "video" for r in recs), bool, n)
    out["images_per_s"] = float((completed & image).sum() / makespan)
    out["videos_per_s"] = float((completed & video).sum() / makespan)
    arrival = np.fromiter((r.request.arrival_s for r in recs), float, n)
    started = np.fromiter((r.first_scheduled_s for r in recs), float, n)
    finish = np.fromiter((r.finish_s for r in recs), float, n)
    out.update(_latencies(arrival, started, finish, completed))
    reqs = [r.request for r in recs]
    names = list(classes) if classes is not None else names_of(reqs)
    index = {c: i for i, c in enumerate(names)}
    cls = np.fromiter((index.get(q.priority, -1) for q in reqs), np.int8, n)
    out["per_class"] = {c: _class_stats(cls == i, completed, met, arrival, started, finish)
                        for i, c in enumerate(names)}
    out["weighted_slo_attainment"] = weighted_attainment(out["per_class"], weights_of(reqs))
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


def weighted_attainment(per_class: dict[str, dict[str, Any]],
                        weights: Mapping[str, float] = CLASS_WEIGHTS) -> float:
    """Σ w_c·attainment_c / Σ w_c over the classes that had requests (``weights``: each class's)."""
    num = den = 0.0
    for c, stats in per_class.items():
        if stats["count"]:
            num += weights[c] * stats["slo_attainment"]
            den += weights[c]
    return num / den if den else math.nan


def _pcts(values: np.ndarray, prefix: str) -> dict[str, float]:
    if values.size == 0:
        return {f"{prefix}_{k}": math.nan for k in ("mean_s", "p50_s", "p90_s", "p99_s")}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {f"{prefix}_mean_s": float(values.mean()), f"{prefix}_p50_s": float(p50),
            f"{prefix}_p90_s": float(p90), f"{prefix}_p99_s": float(p99)}


def _latencies(arrival: np.ndarray, started: np.ndarray, finish: np.ndarray,
               completed: np.ndarray) -> dict[str, float]:
    a, s, f = arrival[completed], started[completed], finish[completed]
    return {**_pcts(f - a, "latency"), **_pcts(s - a, "queueing"), **_pcts(f - s, "processing")}



def _class_stats(mask: np.ndarray, completed: np.ndarray, met: np.ndarray, arrival: np.ndarray,
                 started: np.ndarray, finish: np.ndarray) -> dict[str, Any]:
    """One class's figures (``mask``: its requests)."""
    done = mask & completed
    lat = finish[done] - arrival[done]
    ran = mask & ~np.isnan(started)
    waits = started[ran] - arrival[ran]
    count = int(mask.sum())
    return {
        "count": count,
        "completed": int(done.sum()),
        "slo_attainment": float(met[mask].sum() / count) if count else math.nan,
        "latency_p50_s": float(np.percentile(lat, 50)) if lat.size else math.nan,
        "latency_p99_s": float(np.percentile(lat, 99)) if lat.size else math.nan,
        "max_queue_wait_s": float(waits.max()) if waits.size else math.nan,
    }


class _Pooled:
    """A stage's replicas as one simulator for ``summarize``: every record, summed batches, and
    utilisation as the mean over replicas (weights and memory of their own GPUs)."""

    def __init__(self, stage: Any) -> None:
        sims = stage.replicas
        self.records = stage.records
        self.arrivals_left = stage.arrivals_left
        self.now = stage.now
        self.oom_batches = sum(s.oom_batches for s in sims)
        self.busy_s = sum(s.busy_s for s in sims) / len(sims)
        self.mem_gb_s = sum(s.mem_gb_s for s in sims) / len(sims)
        self.batch_sizes = stage.batch_sizes
        self.batches = sum(s.batches for s in sims)
        self.cost = _MeanGpu(sum(s.cost.weights_gb for s in sims) / len(sims),
                             sum(s.cost.gpu_memory_gb for s in sims) / len(sims))


class _MeanGpu:
    def __init__(self, weights_gb: float, gpu_memory_gb: float) -> None:
        self.weights_gb, self.gpu_memory_gb = weights_gb, gpu_memory_gb


def summarize_stage(stage: Any, classes: Sequence[str] | None = None) -> dict[str, Any]:
    """``summarize`` of the whole stage, plus ``per_replica``: each replica's name, requests it
    served (routed to it), utilisation, batches and SLO attainment."""
    out = summarize(_Pooled(stage), classes)
    out["per_replica"] = []
    for spec, sim in zip(stage.specs, stage.replicas):
        one = summarize(sim, classes)
        out["per_replica"].append({
            "replica": spec.name, "requests": one["requests_total"], "gpu_compute_util": one["gpu_compute_util"],
            "gpu_memory_util": one["gpu_memory_util"], "batches": one["batches"],
            "batch_size_mean": one["batch_size_mean"], "slo_attainment": one["slo_attainment"],
            "weighted_slo_attainment": one["weighted_slo_attainment"]})
    return out
