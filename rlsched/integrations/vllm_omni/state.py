"""The live engine queue as a policy sees it: the ``Simulator``'s attribute names.

``PluginState`` keeps one ``RequestRecord`` per live vLLM request, built by the same
``CostModel`` the simulator uses, and maps vLLM's string request ids to the int ids
policies return. It reads requests by attribute only, so it imports no vLLM and is
tested without it.

How a vLLM request becomes a ``Request``:

================  =====================================================================
field             source (default when absent)
================  =====================================================================
height, width     ``sampling_params.height/width`` (``default_height/width``)
num_frames        ``sampling_params.num_frames`` (1)
steps             ``len(timesteps)``, else ``len(sigmas)``, else ``num_inference_steps``
                  (``default_steps``) — the order ``StepScheduler`` counts steps in
cfg               ``do_classifier_free_guidance``, or ``guidance_scale`` > 1, or
                  ``true_cfg_scale`` > 1 (Qwen-Image's CFG knob)
priority          ``extra_args["priority"]`` (``default_priority``)
SLO               ``extra_args["slo_ms"]`` (class ``slo_scale`` × standalone time)
arrival           the plugin clock when ``add_request`` ran
key               vLLM's ``sampling_params_key``, interned (equal keys ⇔ equal ``key``)
================  =====================================================================

An unusable value (an unknown class, a NaN or negative ``slo_ms``, a zero height…) is
replaced by its default and counted in ``invalid``; the request is still served.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from numbers import Real
from typing import Any

from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.sim.cost import CostModel
from rlsched.sim.request import COMPLETED, PRIORITY_CLASSES, RUNNING, WAITING, Request, RequestRecord
from rlsched.sim.simulator import ServingConfig

Clock = Callable[[], float]
FAILED, ABORTED = "failed", "aborted"
"""Record statuses for requests the engine failed (error) or the client cancelled."""


def read_request(sampling: Any, settings: PluginConfig) -> tuple[dict[str, Any], list[str]]:
    """Request fields from vLLM sampling params, and the names of fields that were unusable."""
    bad: list[str] = []
    extra = getattr(sampling, "extra_args", None)
    extra = extra if isinstance(extra, Mapping) else {}
    out = {
        "height": _pos_int(getattr(sampling, "height", None), settings.default_height, "height", bad),
        "width": _pos_int(getattr(sampling, "width", None), settings.default_width, "width", bad),
        "num_frames": _pos_int(getattr(sampling, "num_frames", None), 1, "num_frames", bad),
        "steps": _steps(sampling, settings.default_steps, bad),
        "cfg": _cfg(sampling),
        "priority": settings.default_priority,
        "slo_s": None,
    }
    priority = extra.get("priority")
    if priority is not None:
        if isinstance(priority, str) and priority.strip().lower() in PRIORITY_CLASSES:
            out["priority"] = priority.strip().lower()
        else:
            bad.append("priority")
    slo_ms = extra.get("slo_ms")
    if slo_ms is not None:
        if _finite_positive(slo_ms):
            out["slo_s"] = float(slo_ms) / 1e3
        else:
            bad.append("slo_ms")
    return out, bad


def _pos_int(value: Any, default: int, name: str, bad: list[str]) -> int:
    if value is None:
        return default
    f = _number(value)
    if f is not None and math.isfinite(f) and f >= 1 and f.is_integer():
        return int(f)
    bad.append(name)
    return default


def _steps(sampling: Any, default: int, bad: list[str]) -> int:
    for name in ("timesteps", "sigmas"):
        seq = getattr(sampling, name, None)
        if seq is not None:
            try:
                n = len(seq)
            except TypeError:  # a 0-d tensor counts as one step, as in StepScheduler
                n = 1
            return n if n > 0 else default
    return _pos_int(getattr(sampling, "num_inference_steps", None), default, "num_inference_steps", bad)


def _cfg(sampling: Any) -> bool:
    if getattr(sampling, "do_classifier_free_guidance", False) is True:
        return True
    return any((_number(getattr(sampling, name, None)) or 0.0) > 1 for name in ("guidance_scale", "true_cfg_scale"))


def _number(value: Any) -> float | None:
    """A real number (Python or numpy; not bool, not text) as a float, else None."""
    if isinstance(value, (bool, str, bytes)) or not isinstance(value, Real):
        return None
    return float(value)


def _finite_positive(value: Any) -> bool:
    f = _number(value)
    return f is not None and math.isfinite(f) and f > 0


def hashable(key: Any) -> Any:
    """``key`` if hashable, else an equal-iff-equal tuple (vLLM keys may hold ``sigmas`` lists)."""
    try:
        hash(key)
        return key
    except TypeError:
        return _freeze(key)


def _freeze(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__,) + tuple(_freeze(getattr(x, f.name)) for f in dataclasses.fields(x))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    if isinstance(x, Mapping):
        return tuple(sorted((repr(k), _freeze(v)) for k, v in x.items()))
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)


class PluginState:
    """Read-only view for ``SchedulingPolicy.decide``: ``now``, ``waiting``, ``running``,
    ``config``, ``cost``, ``memory_used_gb`` (plus ``records``, ``step_mode``, ``telemetry``).

    The scheduler calls ``add``/``remove`` as requests come and go and ``sync`` before
    each decision; policies only read.
    """

    _MAX_KEYS = 4096
    """Interned compatibility keys kept before the table is reset (bounded memory)."""

    def __init__(self, cost: CostModel, config: ServingConfig, settings: PluginConfig,
                 clock: Clock = time.monotonic, telemetry: Any = None) -> None:
        self.cost, self.config, self.settings = cost, config, settings
        self.step_mode = config.step_mode
        self._model = cost.model(settings.model) if settings.model else next(iter(cost.models.values()))
        self._clock, self._t0 = clock, clock()
        self.now = 0.0
        self.waiting: dict[int, RequestRecord] = {}
        """Waiting records in vLLM's queue order (preempted ones first, as vLLM re-queues them)."""
        self.running: list[RequestRecord] = []
        self.records: dict[int, RequestRecord] = {}
        """Every live request (waiting or running), by int id."""
        self.invalid: Counter[str] = Counter()
        """Unusable request fields seen, by field name (each was replaced by its default)."""
        self.telemetry = None
        """Latest ``TelemetrySample`` (None before the first read or without telemetry)."""
        self.on_arrival: list[Callable[[RequestRecord], None]] = []
        """Like ``Simulator.on_arrival``: ``f(record)`` after a request is added."""
        self.on_finish: list[Callable[[RequestRecord], None]] = []
        """Like ``Simulator.on_finish``: ``f(record)`` when a request completes or fails (not on abort)."""
        self._telemetry_source = telemetry
        self._telemetry_due = -math.inf
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._keys: dict[Any, int] = {}
        self._next_id = 0
        self._lock = threading.Lock()  # add() runs on the API thread, remove() on the engine loop

    # ------------------------------------------------------------ lifecycle
    def time(self) -> float:
        """Seconds since the state was created, on the plugin clock."""
        return self._clock() - self._t0

    def add(self, name: str, sampling: Any, key: Any) -> tuple[RequestRecord, list[str]]:
        """Track a new request; returns its record and the unusable fields that were defaulted."""
        fields, bad = read_request(sampling, self.settings)
        now = max(self.time(), 0.0)
        with self._lock:
            iid = self._next_id
            self._next_id += 1
        m = self._model
        req = Request(iid, now, m.name, m.modality, fields["height"], fields["width"], fields["num_frames"],
                      fields["steps"], fields["cfg"], fields["priority"], math.inf)
        rec = self.cost.record(req)
        slo_s = fields["slo_s"] or self.settings.slo_scale(req.priority) * rec.work_s
        rec.request = dataclasses.replace(req, slo_s=slo_s)
        rec.deadline_s = now + slo_s
        # the simulator's key, extended by the interned vLLM key: equal keys <=> vLLM would batch them
        rec.key = req.key(self.step_mode) + (self._intern(key),)  # type: ignore[assignment]
        with self._lock:
            self._ids[name], self._names[iid], self.records[iid] = iid, name, rec
        self.invalid.update(bad)
        _notify(self.on_arrival, rec)
        return rec, bad

    def finish(self, name: str, outcome: str) -> RequestRecord | None:
        """Stop tracking a request that left the engine: ``completed``, ``failed`` or ``aborted``."""
        rec = self.remove(name)
        if rec is None:
            return None
        rec.finish_s = self.time()
        rec.status = {"completed": COMPLETED, "failed": FAILED}.get(outcome, ABORTED)
        if rec.status != ABORTED:
            _notify(self.on_finish, rec)
        return rec

    def remove(self, name: str) -> RequestRecord | None:
        with self._lock:
            iid = self._ids.pop(name, None)
            if iid is None:
                return None
            self._names.pop(iid, None)
            return self.records.pop(iid, None)

    def _intern(self, key: Any) -> int:
        k = hashable(key)
        kid = self._keys.get(k)
        if kid is None:
            if len(self._keys) >= self._MAX_KEYS:
                self._keys.clear()  # equal keys may get new ids: batches only get more conservative
            kid = self._keys[k] = len(self._keys)
        return kid

    # ------------------------------------------------------------- per call
    def sync(self, waiting: Collection[str], running: Iterable[str],
             progress: Mapping[str, Any] | None = None) -> int:
        """Rebuild ``waiting``/``running`` from vLLM's queues; returns how many ids are untracked."""
        self.now = self.time()
        get, recs = self._ids.get, self.records
        self.waiting = {iid: recs[iid] for iid in map(get, waiting) if iid is not None}
        untracked = len(waiting) - len(self.waiting)
        self.running = [recs[iid] for iid in map(get, running) if iid is not None]
        for rec in self.running:
            rec.status = RUNNING
        if self.step_mode:  # only step mode moves a request back from running to waiting
            for rec in self.waiting.values():
                rec.status = WAITING
        if progress is not None:
            self._sync_steps(progress)
        self._read_telemetry()
        return untracked

    def _sync_steps(self, progress: Mapping[str, Any]) -> None:
        for rec in (*self.waiting.values(), *self.running):
            p = progress.get(self._names[rec.request.id])
            if p is not None:
                rec.steps_done = min(int(p.current_step), rec.request.num_inference_steps)

    def use_telemetry(self, source: Any) -> None:
        """Read GPU telemetry from ``source`` (a ``Telemetry``) from now on."""
        self._telemetry_source, self._telemetry_due = source, -math.inf

    def _read_telemetry(self) -> None:
        if self._telemetry_source is None or self.now < self._telemetry_due:
            return
        self._telemetry_due = self.now + self.settings.telemetry_interval_s
        try:
            self.telemetry = self._telemetry_source.read()
        except Exception:  # telemetry is advisory; the queue state alone still schedules
            self.telemetry = None

    # ---------------------------------------------------------------- views
    def int_id(self, name: str) -> int | None:
        return self._ids.get(name)

    def name(self, iid: int) -> str:
        return self._names[iid]

    @property
    def memory_used_gb(self) -> float:
        """NVML's reading when known, else what the simulator reports at a decision point (weights)."""
        sample = self.telemetry
        used = getattr(sample, "memory_used_gb", math.nan) if getattr(sample, "known", False) else math.nan
        return float(used) if math.isfinite(used) else self.cost.weights_gb


def _notify(callbacks: list[Callable[[RequestRecord], None]], rec: RequestRecord) -> None:
    for callback in callbacks:
        try:
            callback(rec)
        except Exception:  # a policy's bookkeeping hook must not fail a request
            pass


def open_telemetry(settings: PluginConfig) -> Any:
    """An ``NvmlTelemetry`` when enabled and ``rlsched.telemetry`` is importable, else None."""
    if not settings.telemetry:
        return None
    try:
        from rlsched.telemetry import NvmlTelemetry
    except ImportError:
        return None
    try:
        source = NvmlTelemetry(settings.nvml_device())
    except Exception:
        return None
    return source if getattr(source, "available", True) else None
