"""The observation: queue, top-K urgent requests, GPU telemetry and recent history → one vector.

Numpy only (no gymnasium, no torch): the frozen RL policy computes the very same
vector at serving time from the plugin's simulator-like state (``now``, ``waiting``
in queue order, ``running``, ``config``, ``cost``). The layout is pinned by
``SCHEMA_VERSION``; ``FEATURE_NAMES`` names every entry, and the table in
``DiTBatchEnv``'s docstring explains them.

Scaling keeps every entry in [-5, 5] (clipped) without per-scenario statistics:
counts and durations are ``log1p``-scaled, slack is measured in units of the
request's own standalone time and squashed with ``asinh``. Per-request figures come
from a ``RecordTable`` (read once per request); the arithmetic over a decision's few
candidates runs on Python floats, ``log1p``/``asinh`` once each over all of them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlsched.policies.projected import ProjectedPolicy
from rlsched.policies.table import Rows
from rlsched.projection.few import np_maximum, np_minimum
from rlsched.sim.request import CLASS_INDEX, MODALITIES, MODALITY_INDEX, PRIORITY_CLASSES, RequestRecord
from rlsched.sim.telemetry import TelemetrySample

SCHEMA_VERSION = "dit-batch-obs/2"
"""Bump whenever a feature, its order or its scaling changes (checkpoints record it)."""

TOP_K = 8
"""Waiting requests described one by one, most urgent first."""
OBS_LOW, OBS_HIGH = -5.0, 5.0

WORK_SCALE_S = 30.0
"""Durations (pending work, a request's cost) enter as log1p(seconds / 30)."""
WAIT_SCALE_S = 30.0
"""Waits enter as log1p(seconds / 30); 30 s is also the default starvation threshold."""
ARRIVAL_WINDOW_S = 300.0
"""Time constant of the arrival-load average."""
SLO_EWMA_WEIGHT = 0.05
"""Weight of each finished request in the SLO-attainment average (~20-request memory)."""
_LATE = 1e15
"""Urgency offset that ranks requests already past saving after every savable one."""

C, M = len(PRIORITY_CLASSES), len(MODALITIES)
SLOT_FIELDS = (*(f"class_{c}" for c in PRIORITY_CLASSES), *(f"modality_{m}" for m in MODALITIES),
               "work", "slack", "wait", "same_key_as_top0", "running", "key_count", "valid")
GLOBAL_FIELDS = ("step_mode", "max_num_seqs", "distinct_keys", "running", "candidates", "candidate_memory",
                 "gpu_memory", "gpu_compute", "gpu_membw", "gpu_known")
FEATURE_NAMES: tuple[str, ...] = (
    *(f"queue/{c}/{m}" for c in PRIORITY_CLASSES for m in MODALITIES),
    *(f"{what}/{c}" for what in ("work", "min_slack", "oldest_wait", "arrival_load", "slo_ewma")
      for c in PRIORITY_CLASSES),
    *GLOBAL_FIELDS,
    *(f"top{j}/{f}" for j in range(TOP_K) for f in SLOT_FIELDS),
)
OBS_DIM = len(FEATURE_NAMES)

_COUNTS = 0
_WORK, _SLACK, _WAIT, _LOAD = (C * M + i * C for i in range(4))  # then SLO EWMA, globals
_GLOBAL = C * M + 5 * C
_SLOTS = _GLOBAL + len(GLOBAL_FIELDS)
GLOBAL_DIM = _SLOTS
"""Entries before the top-K slots: the queue-level features (the candidate policy's global input)."""
_F = len(SLOT_FIELDS)
_S_WORK, _S_SLACK, _S_WAIT, _S_SAME, _S_RUN, _S_KEYS, _S_VALID = range(C + M, _F)


class ClassHistory:
    """Per-class averages that need memory: arrival load and SLO attainment.

    Arrival load is Σ standalone work of arrivals × e^(−age/τ) / τ — the offered GPU
    load (1.0 = one GPU's worth); it does not depend on the order arrivals are noted
    in. SLO attainment is an exponential average over finished requests, starting at 1.
    """

    def __init__(self, now: float = 0.0) -> None:
        self.reset(now)

    def reset(self, now: float = 0.0) -> None:
        self._t = now
        self._load = [0.0] * C
        self._slo = [1.0] * C

    def note_arrival(self, t: float, cls: int, work_s: float) -> None:
        """A request of class index ``cls`` arrived at ``t`` (seconds) with this standalone work."""
        if t > self._t:
            self._decay(t)
        self._load[cls] += work_s / ARRIVAL_WINDOW_S * math.exp((t - self._t) / ARRIVAL_WINDOW_S)

    def note_finish(self, cls: int, met: bool) -> None:
        """A request of class index ``cls`` finished (or failed); ``met``: within its SLO."""
        self._slo[cls] += SLO_EWMA_WEIGHT * (float(met) - self._slo[cls])

    def features(self, now: float) -> list[float]:
        """Arrival load per class then SLO attainment per class, as of ``now``."""
        if now > self._t:
            self._decay(now)
        return self._load + self._slo

    def _decay(self, t: float) -> None:
        keep = math.exp((self._t - t) / ARRIVAL_WINDOW_S)
        self._load = [x * keep for x in self._load]
        self._t = t


class ObservationEncoder:
    """Turns a simulator-like state into the ``OBS_DIM`` float32 observation.

    Stateful only through ``history`` (arrivals and finishes must be noted by the
    caller: the environment from the simulator, the plugin from its request hooks) and
    a per-request cache. After ``encode``, the candidates' table rows and standalone
    slack (seconds) stay readable for reward shaping (``rows`` is None for an empty queue).
    """

    def __init__(self, policy: ProjectedPolicy | None = None) -> None:
        self.policy = policy or ProjectedPolicy()
        """Supplies the candidates (per-request features) and the queue summary (counts, work);
        shares its record table, so the observation and the decision read each request once."""
        self.table = self.policy.table
        self.history = ClassHistory()
        self.rows: Rows | None = None
        self.slack_s = np.empty(0)
        self._cost: Any = None
        self._free_gb = 1.0

    def reset(self, now: float = 0.0) -> None:
        self.history.reset(now)

    def note_arrival(self, rec: RequestRecord, cls: int) -> None:
        self.history.note_arrival(rec.request.arrival_s, cls, rec.work_s)

    def note_finish(self, cls: int, met: bool) -> None:
        self.history.note_finish(cls, met)

    def encode(self, state: Any, telemetry: TelemetrySample | None = None, with_slots: bool = True) -> np.ndarray:
        """The observation of ``state`` (a ``Simulator`` or anything with its attributes);
        ``telemetry`` None reads as unknown. ``with_slots`` False leaves the top-K slots zero (the
        candidate policy reads only the entries before them; each entry is computed on its own)."""
        out = np.zeros(OBS_DIM, dtype=np.float32)
        recs, _ = self.policy.candidates(state)
        n_run = len(state.running) if state.config.step_mode else 0
        n_wait = len(recs) - n_run
        keys = mem = 0.0
        total = 0
        if recs:
            keys, mem, total = self._queue(out, state, recs, n_wait, with_slots)
        else:
            self.rows, self.slack_s = None, np.empty(0)
            out[_SLACK:_SLACK + C] = OBS_HIGH
        if state.cost is not self._cost:  # CostModel.weights_gb sums every model: once per profile
            self._cost, self._free_gb = state.cost, max(state.cost.gpu_memory_gb - state.cost.weights_gb, 1e-9)
        out[_LOAD:_SLOTS] = (*self.history.features(state.now), state.config.step_mode,
                             math.log1p(state.config.max_num_seqs), math.log1p(keys),
                             math.log1p(n_run), math.log1p(total),
                             math.log1p(mem / self._free_gb), *_telemetry(telemetry))
        # fmax/fmin rather than clip: they also turn a NaN into a bound, so none can escape
        return np.fmin(np.fmax(out, OBS_LOW, out=out), OBS_HIGH, out=out)

    def _queue(self, out: np.ndarray, state: Any, recs: list[RequestRecord],
               n_wait: int, with_slots: bool = True) -> tuple[int, float, int]:
        """Write the per-class and top-K entries; returns (distinct keys, queued memory in GB, requests).

        Counts, work, distinct keys and memory describe the whole queue (from the policy's
        per-group summary); slack, wait and the top-K come from the candidates, which hold
        every group's most urgent savable and most overdue lost requests.

        A decision has a few candidates, so the arithmetic runs on Python floats (the same IEEE
        operations, in the same order, as the numpy formulas they replaced) and the two
        transcendental functions run once each, as numpy ufuncs over every value that needs them
        (an element's ``log1p`` does not depend on its neighbours; the oracle test in
        ``tests/envs/test_observation_loops.py`` holds this to the numpy formulas byte for byte)."""
        now = state.now
        rows = self.rows = self.table.gather(recs)
        work, remaining = rows.work_s.tolist(), rows.remaining_s(recs, state.config.step_mode)
        slack = [d - now - r for d, r in zip(rows.deadline_s.tolist(), remaining, strict=True)]
        self.slack_s = np.array(slack)
        rel = np.arcsinh([s / np_maximum(w, 1e-9) for s, w in zip(slack, work, strict=True)]).tolist()
        counts, work_c, per_key, mem = _summary(self.policy.queue_summary(state), recs[n_wait:])
        top = _most_urgent(slack) if with_slots else []
        n = len(recs)
        logs = np.log1p([*((now - a) * (1.0 / WAIT_SCALE_S) for a in rows.arrival_s.tolist()), *counts,
                         *(w * (1.0 / WORK_SCALE_S) for w in work_c),
                         *(remaining[t] * (1.0 / WORK_SCALE_S) for t in top),
                         *(float(per_key[recs[t].key]) for t in top)]).tolist()
        wait, at = logs[:n], n + C * M
        out[_COUNTS:_COUNTS + C * M] = logs[n:at]
        out[_WORK:_WORK + C] = logs[at:at + C]
        cls = rows.cls.tolist()
        out[_SLACK:_SLACK + C], out[_WAIT:_WAIT + C] = _per_class(cls, rel, wait)
        if with_slots:
            at += C
            out[_SLOTS:_SLOTS + len(top) * _F] = _slots(top, cls, rows.modality.tolist(), rows.key_id.tolist(),
                                                        rel, wait, logs[at:at + len(top)], logs[at + len(top):],
                                                        n_wait)
        return len(per_key), mem, int(sum(counts))


def _summary(groups: list[tuple[RequestRecord, int, float]],
             running: list[RequestRecord]) -> tuple[list[float], list[float], dict[Any, int], float]:
    """Counts per class x modality, work per class, requests per key and memory of the whole queue
    (summed in Python floats, in the order numpy's element updates did)."""
    counts, work = [0.0] * (C * M), [0.0] * C
    per_key: dict[Any, int] = {}
    mem = 0.0
    for rec, n, w in [*groups, *((r, 1, r.remaining_s) for r in running)]:
        q = rec.request
        c = CLASS_INDEX[q.tier]
        counts[c * M + MODALITY_INDEX[q.modality]] += n
        work[c] += w
        per_key[rec.key] = per_key.get(rec.key, 0) + n
        mem += n * rec.mem_gb
    return counts, work, per_key, mem


def _slots(top: list[int], cls: list[int], modality: list[int], key: list[int], rel_slack: list[float],
           wait: list[float], work: list[float], key_count: list[float], n_wait: int) -> list[float]:
    """The top-K slots, flat: per chosen candidate its class and modality one-hots, then its entries
    (``work`` and ``key_count``: already scaled, one per slot; the others indexed by candidate)."""
    flat = [0.0] * (len(top) * _F)
    key0 = key[top[0]]
    for j, t in enumerate(top):
        b = j * _F
        flat[b + cls[t]] = flat[b + C + modality[t]] = 1.0
        flat[b + _S_WORK], flat[b + _S_SLACK], flat[b + _S_WAIT] = work[j], rel_slack[t], wait[t]
        flat[b + _S_SAME], flat[b + _S_RUN] = float(key[t] == key0), float(t >= n_wait)
        flat[b + _S_KEYS], flat[b + _S_VALID] = key_count[j], 1.0
    return flat


def _per_class(cls: list[int], slack: list[float], wait: list[float]) -> tuple[list[float], list[float]]:
    """Min slack (+inf, clipped later, for an empty class) and max wait (0) per class.

    In Python over a decision's few candidates (two ``ufunc.at`` calls cost more than the loop), with
    ``np.minimum``/``np.maximum``'s rules: a NaN wins, of two equal values (0.0 and -0.0) the later."""
    low, high = [math.inf] * C, [0.0] * C
    for c, s, w in zip(cls, slack, wait, strict=True):
        low[c], high[c] = np_minimum(low[c], s), np_maximum(high[c], w)
    return low, high


def _most_urgent(slack_s: list[float]) -> list[int]:
    """Indices of the ``TOP_K`` most urgent candidates, most urgent first.

    Savable requests (slack ≥ 0) by ascending slack, then late ones (least late first);
    requests without an SLO (infinite slack) last. Ties among the chosen keep queue order.
    Up to ``TOP_K`` candidates (no NaN) the stable sort runs in Python: the same order as numpy's;
    beyond, numpy's ``argpartition`` (which of tied values at the cut it keeps is numpy's own rule).
    """
    n = len(slack_s)
    if n == 1:
        return [0]
    if n <= TOP_K:
        urgency = [x if x >= 0 else _LATE - x for x in slack_s]
        if all(u == u for u in urgency):
            return sorted(range(n), key=urgency.__getitem__)
    s = np.array(slack_s)
    urgency_a = np.where(s >= 0, s, _LATE - s)
    if n > TOP_K:
        part = np.argpartition(urgency_a, TOP_K - 1)[:TOP_K]
        part.sort()
        return part[np.argsort(urgency_a[part], kind="stable")].tolist()
    return np.argsort(urgency_a, kind="stable").tolist()


def _telemetry(s: TelemetrySample | None) -> tuple[float, float, float, float]:
    """Memory share, compute and bandwidth utilisation, known flag; zeros when unknown or not finite."""
    if s is None or not s.known:
        return 0.0, 0.0, 0.0, 0.0
    mem, compute, membw = (v if math.isfinite(v) else 0.0 for v in (s.memory_frac, s.compute_util, s.membw_util))
    return mem, compute, membw, 1.0


__all__ = ["FEATURE_NAMES", "GLOBAL_DIM", "OBS_DIM", "SCHEMA_VERSION", "TOP_K", "ClassHistory", "ObservationEncoder"]
