"""Prometheus metrics of the plugin (``rlsched_*``); importable without vLLM.

``PluginMetrics(registry)`` registers every metric on ``registry`` (default: the
process-wide ``prometheus_client.REGISTRY``); one instance per registry is shared, so
two schedulers in one process do not register twice. Tests pass their own
``CollectorRegistry``. Without ``prometheus_client`` every metric is a no-op. Every sample also
carries ``model_name`` (``MODEL_LABEL``), as every vLLM metric does: the served model's name
(``model_name_of``: ``--served-model-name`` where the process knows it, else the model folder's basename), bound
when the engine or pool learns it.

=========================================  =========  ==================  ==========================================
name                                       type       labels              meaning
=========================================  =========  ==================  ==========================================
``rlsched_decisions_total``                counter    policy              policy consulted (one schedule() call)
``rlsched_decision_latency_seconds``       histogram  —                   a decision's own time (``guard.py``)
``rlsched_fallbacks_total``                counter    reason              calls scheduled by FIFO instead (safety)
``rlsched_wait_overrides_total``           counter    —                   "wait" decisions while idle, admitted FIFO
``rlsched_preemptions_total``              counter    —                   running requests preempted (step mode)
``rlsched_batch_size``                     histogram  —                   requests in each scheduled batch
``rlsched_queue_depth``                    gauge      priority            waiting requests per class, after admission
``rlsched_requests_finished_total``        counter    priority, outcome   ``slo_met``, ``slo_missed``, ``aborted``
                                                                          (``finish_outcome``)
``rlsched_slo_attainment_ratio``           gauge      priority            slo_met / (slo_met + slo_missed): timed
                                                                          in the stage (docs/e2e.md)
``rlsched_invalid_request_fields_total``   counter    field               request fields replaced by defaults
``rlsched_admission_mismatches_total``     counter    —                   admitted batch != the policy's batch
``rlsched_replica_info``                   gauge      devices, port       1: this replica (its devices, metrics port)
``rlsched_batch_duration_seconds``         histogram  kind                seconds per batch: predicted, observed
``rlsched_batch_duration_ratio``           histogram  —                   observed / predicted seconds, per batch
``rlsched_memory_headroom_bytes``          gauge      —                   GPU memory free, as telemetry last read it
``rlsched_calibration_version``            gauge      —                   online calibration's version (0: as shipped)
``rlsched_calibration_scale``              gauge      term                calibrated / shipped: time, attention,
                                                                          memory, fixed, encode, decode, comm
``rlsched_oom_requests_total``             counter    outcome             requests in a batch that ran out of memory:
                                                                          ``retried`` (queued again) or ``failed``
=========================================  =========  ==================  ==========================================
"""

from __future__ import annotations

import logging
import math
import os
import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rlsched.sim.request import PRIORITY_CLASSES
from rlsched.sim.truth import SCALE_TERMS

LATENCY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 2.5e-3, 5e-3, 1e-2)
"""Seconds of one decision; 2 ms and 5 ms are the default budgets (router / central, engine): the share of
decisions within budget is a bucket over the count."""
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0)
"""Seconds of one batch: a denoise step (step mode) up to a video wave (request mode)."""
RATIO_BUCKETS = tuple(round(2 ** (k / 4), 3) for k in range(-8, 9))
"""Observed / predicted batch seconds: 0.25 .. 4, four buckets per doubling, 1 among them."""
GIB = 1024**3
"""Bytes per GB as telemetry reports memory (``NvmlTelemetry``: GiB)."""

_prom: Any
try:
    import prometheus_client as _prom
except ImportError:  # metrics are optional; scheduling is not
    _prom = None


class _Noop:
    def labels(self, *args: Any, **kwargs: Any) -> _Noop:
        return self

    def inc(self, amount: float = 1.0) -> None: ...
    def set(self, value: float) -> None: ...
    def observe(self, value: float) -> None: ...


MODEL_LABEL = "model_name"
"""The label every ``rlsched_*`` sample carries, as every vLLM metric does: the served model."""
UNKNOWN_MODEL = "unknown"
"""``model_name`` where the config names no model (a scheduler or pool built without one, in tests)."""


def model_name_of(*configs: Any) -> str:
    """The served model's name, from the first of ``configs`` that names one: a string, or a config's
    ``served_model_name`` (its first entry when a list), its ``model_config.served_model_name``, else its
    ``model``; else ``UNKNOWN_MODEL``. A name that is the model's local folder (vLLM's default when
    ``--served-model-name`` is not given, and all vLLM-Omni 0.30 tells a diffusion stage) is that folder's
    basename: ``/models/FLUX.1-dev`` is ``FLUX.1-dev``, as a client would call it; a hub id stays as it is."""
    for cfg in configs:
        if isinstance(cfg, str) and cfg:
            return _name(cfg)
        model_config = getattr(cfg, "model_config", None)
        for value in (getattr(cfg, "served_model_name", None), getattr(model_config, "served_model_name", None),
                      getattr(cfg, "model", None), getattr(model_config, "model", None)):
            if isinstance(value, (list, tuple)):
                value = value[0] if value else None
            if isinstance(value, str) and value:
                return _name(value)
    return UNKNOWN_MODEL


def _name(model: str) -> str:
    """A local folder's basename (an absolute or explicitly relative path, or a folder that exists); any other
    name as it is (a hub id such as ``Qwen/Qwen-Image``, a ``--served-model-name``)."""
    path = os.path.expanduser(model)
    if os.path.isabs(path) or model.startswith(("./", "../", "~")) or os.path.isdir(path):
        return os.path.basename(os.path.normpath(path)) or model
    return model


def finish_outcome(rec: Any) -> str:
    """A finished request's ``outcome`` label: ``slo_met`` (completed by its deadline), ``slo_missed`` (completed
    late, failed, or aborted after its deadline had passed: a client that gave up on a late request, as
    ``rlsched loadgen`` on its ``--timeout``, missed its SLO), ``aborted`` (cancelled before its deadline: neither
    met nor missed). So ``rlsched_slo_attainment_ratio`` and a client count errors and timeouts alike."""
    if rec.slo_met:
        return "slo_met"
    return "aborted" if rec.status == "aborted" and not rec.finish_s > rec.deadline_s else "slo_missed"


class _Labelled:
    """One metric family as one model's set sees it: ``model_name`` is filled in on every sample. A
    family without other labels gets its one child at once when the model is known (exported as 0
    from the start, as prometheus_client does without labels), else at its first record: the
    scheduler's set from before ``initialize`` names its model leaves no ``unknown`` series."""

    __slots__ = ("family", "model", "_child")

    def __init__(self, family: Any, model: str, bare: bool) -> None:
        self.family, self.model = family, model
        self._child: Any = None
        if bare and model != UNKNOWN_MODEL:
            self._one()

    def labels(self, **labels: str) -> Any:
        return self.family.labels(**{MODEL_LABEL: self.model}, **labels)

    def _one(self) -> Any:
        if self._child is None:
            self._child = self.family.labels(**{MODEL_LABEL: self.model})
        return self._child

    def inc(self, amount: float = 1.0) -> None:
        self._one().inc(amount)

    def set(self, value: float) -> None:
        self._one().set(value)

    def observe(self, value: float) -> None:
        self._one().observe(value)


class MetricSet:
    """Metrics on one Prometheus registry (default: the process-wide one, which vLLM's API
    server exports at ``/metrics``), every sample labelled with one ``model_name``. ``on(registry,
    model_name)`` shares one instance per class, registry and model; the metric families are
    registered once per registry, so a second engine or pool in the process (of the same model or
    another) does not register the same names twice."""

    _shared: dict[tuple[type, Any, str], MetricSet] = {}
    _families: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
    """Registry -> metric name -> its family (every set on that registry labels it)."""
    _shared_lock = threading.RLock()  # on() builds a set, whose make() takes it again

    def __init__(self, registry: Any = None, model_name: str = UNKNOWN_MODEL) -> None:
        self.enabled = _prom is not None
        self.registry = registry if registry is not None else (_prom.REGISTRY if _prom else None)
        self.model_name = model_name

    @classmethod
    def on(cls, registry: Any = None, model_name: str = UNKNOWN_MODEL) -> Any:
        """The shared instance of this class for ``registry`` and ``model_name`` (created on first use)."""
        key = (cls, registry if registry is not None else "default", model_name)
        with MetricSet._shared_lock:
            if key not in MetricSet._shared:
                MetricSet._shared[key] = cls(registry, model_name)
            return MetricSet._shared[key]

    def for_model(self, model_name: str) -> Any:
        """This set's metrics for ``model_name`` (the same registry): what an engine or pool records
        with once it knows the model it serves."""
        if model_name == self.model_name:
            return self
        return type(self).on(self.registry, model_name)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The value of ``name``'s sample with ``labels`` and this set's ``model_name`` (None if absent)."""
        if _prom is None:
            return None
        return self.registry.get_sample_value(name, {MODEL_LABEL: self.model_name, **(labels or {})})

    def make(self, kind: str, name: str, doc: str, labels: Sequence[str] = (), *, from_start: bool = True,
             **kw: Any) -> Any:
        """A ``kind`` (Counter, Gauge, Histogram) on this set's registry, labelled ``model_name`` and
        ``labels``; a no-op without prometheus_client. ``from_start=False``: a family without other
        labels is exported from its first record, not as 0 at once (a gauge whose 0 would read as a
        measurement)."""
        if _prom is None:
            return _Noop()
        with MetricSet._shared_lock:
            made = MetricSet._families.setdefault(self.registry, {})
            if name not in made:
                made[name] = getattr(_prom, kind)(name, doc, [MODEL_LABEL, *labels], registry=self.registry, **kw)
        return _Labelled(made[name], self.model_name, bare=not labels and from_start)


class PluginMetrics(MetricSet):
    """The plugin's metrics on one registry. Use ``PluginMetrics.on(registry, model_name)`` to share."""

    def __init__(self, registry: Any = None, model_name: str = UNKNOWN_MODEL) -> None:
        super().__init__(registry, model_name)
        make = self.make
        self.decisions = make("Counter", "rlsched_decisions_total", "Policy decisions taken", ["policy"])
        self.latency = make("Histogram", "rlsched_decision_latency_seconds", "Time inside policy.decide",
                            buckets=LATENCY_BUCKETS)
        self.fallbacks = make("Counter", "rlsched_fallbacks_total", "schedule() calls run by FIFO instead",
                              ["reason"])
        self.wait_overrides = make("Counter", "rlsched_wait_overrides_total",
                                   "Wait decisions while nothing runs, admitted FIFO (never stall)")
        self.preemptions = make("Counter", "rlsched_preemptions_total", "Running requests preempted")
        self.batch_size = make("Histogram", "rlsched_batch_size", "Requests per scheduled batch",
                               buckets=BATCH_BUCKETS)
        self.queue_depth = make("Gauge", "rlsched_queue_depth", "Waiting requests per class", ["priority"])
        self.finished = make("Counter", "rlsched_requests_finished_total", "Finished requests",
                             ["priority", "outcome"])
        self.attainment = make("Gauge", "rlsched_slo_attainment_ratio", "SLO attainment of finished requests",
                               ["priority"])
        self.admission_mismatches = make(
            "Counter", "rlsched_admission_mismatches_total",
            "schedule() calls whose admitted batch differed from the policy's choice")
        self.invalid = make("Counter", "rlsched_invalid_request_fields_total",
                            "Request fields replaced by defaults", ["field"])
        self.replica = make("Gauge", "rlsched_replica_info",
                            "1: this stage process (replica), its devices and the port it serves metrics on",
                            ["devices", "port"])
        self.batch_duration = make("Histogram", "rlsched_batch_duration_seconds",
                                   "Seconds per batch: the cost profile's prediction and the plugin clock's "
                                   "observation", ["kind"], buckets=DURATION_BUCKETS)
        self.duration_ratio = make("Histogram", "rlsched_batch_duration_ratio",
                                   "Observed / predicted seconds per batch (1: the profile is right)",
                                   buckets=RATIO_BUCKETS)
        self.calibration_version = make("Gauge", "rlsched_calibration_version",
                                        "Online calibration's version of the cost profile (0: as shipped)")
        self.calibration_scale = make("Gauge", "rlsched_calibration_scale",
                                      "Calibrated over shipped profile coefficients: time (every time term), "
                                      "attention (the attention term), memory, and once more over time: fixed "
                                      "(the step's fixed terms), encode, decode, comm (SP and CFG-parallel)",
                                      ["term"])
        self.oom_requests = make("Counter", "rlsched_oom_requests_total",
                                 "Requests in a batch the engine ran out of memory on: retried (queued again, "
                                 "once) or failed", ["outcome"])
        self.headroom = make("Gauge", "rlsched_memory_headroom_bytes",
                             "GPU memory free (total - used) as telemetry last read it", from_start=False)
        self._depth_gauges = None if model_name == UNKNOWN_MODEL else self._depth_per_class()
        """One gauge per class: made at once when the model is known (0 from the start), else at the
        first count (the ``unknown`` set from before an engine knows its model exports nothing)."""
        self._done: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    # ------------------------------------------------------------ recording
    def _depth_per_class(self) -> dict[str, Any]:
        return {c: self.queue_depth.labels(priority=c) for c in PRIORITY_CLASSES}

    @property
    def _depth(self) -> dict[str, Any]:
        if self._depth_gauges is None:
            self._depth_gauges = self._depth_per_class()
        return self._depth_gauges

    def set_queue_depth(self, counts: Counter[str]) -> None:
        for cls in counts:  # a deployment's own classes (``classes``): a gauge from its first request on
            self._depth_of(cls)
        for cls, gauge in self._depth.items():
            gauge.set(counts.get(cls, 0))

    def serve_classes(self, names: Sequence[str]) -> None:
        """Export ``rlsched_queue_depth`` for exactly the classes a deployment serves (its own ``classes``, else
        the shipped three), each 0 from now on: gauges made before the classes were known are removed."""
        for cls in [c for c in self._depth if c not in names]:
            del self._depth[cls]
            if self.enabled:
                try:
                    self.queue_depth.family.remove(self.model_name, cls)
                except KeyError:  # another engine of this model (same set) removed it first
                    pass
        for cls in names:
            self._depth_of(cls)

    def queue_depth_add(self, priority: str) -> None:
        """One more waiting request of ``priority`` (arrivals; admission recounts)."""
        self._depth_of(priority).inc()

    def _depth_of(self, priority: str) -> Any:
        gauge = self._depth.get(priority)
        if gauge is None:
            gauge = self._depth[priority] = self.queue_depth.labels(priority=priority)
        return gauge

    def record_batch(self, predicted_s: float, observed_s: float) -> None:
        """One batch's predicted and observed seconds and their ratio; nothing without a positive
        prediction, so the three series count the same batches."""
        if not (predicted_s > 0 and math.isfinite(predicted_s) and observed_s >= 0 and math.isfinite(observed_s)):
            return
        self.batch_duration.labels(kind="predicted").observe(predicted_s)
        self.batch_duration.labels(kind="observed").observe(observed_s)
        self.duration_ratio.observe(observed_s / predicted_s)

    def set_calibration(self, version: int, scales: tuple[float, ...]) -> None:
        """The calibration's ``version`` and the served model's ``(time, attention, memory[, fixed, encode, decode,
        comm])`` scales (``SCALE_TERMS``; a form term not given: 1)."""
        self.calibration_version.set(version)
        for term, value in zip(SCALE_TERMS, (*scales, *(1.0,) * len(SCALE_TERMS))):
            self.calibration_scale.labels(term=term).set(value)

    def set_headroom(self, sample: Any) -> None:
        """``rlsched_memory_headroom_bytes`` from a ``TelemetrySample`` (unknown or missing: left as is)."""
        if sample is None or not getattr(sample, "known", False):
            return
        free_gb = sample.memory_total_gb - sample.memory_used_gb
        if math.isfinite(free_gb):
            self.headroom.set(free_gb * GIB)

    def record_finish(self, priority: str, outcome: str) -> None:
        self.finished.labels(priority=priority, outcome=outcome).inc()
        if outcome == "aborted":
            return
        with self._lock:
            self._done[(priority, outcome)] += 1
            met, missed = self._done[(priority, "slo_met")], self._done[(priority, "slo_missed")]
        self.attainment.labels(priority=priority).set(met / (met + missed))


def serve(port: int, registry: Any = None, span: int = 1) -> int | None:
    """Start prometheus_client's HTTP exporter once per process on the first of ``port`` .. ``port + span - 1``
    it can bind; returns that port, or None if unavailable.

    ``span`` > 1: the replicas of a stage share one config, so each takes the next free port. Ports that
    cannot be bound (in use, not permitted) are logged once, naming ``metrics_port``, and the scheduler
    keeps serving without the endpoint: metrics are advisory, requests are not."""
    if _prom is None or port <= 0:
        return None
    with _SERVE_LOCK:
        if port in _SERVING:
            return _SERVING[port]
        errors = []
        for candidate in range(port, port + max(span, 1)):
            try:
                _prom.start_http_server(candidate, registry=registry if registry is not None else _prom.REGISTRY)
            except OSError as exc:
                errors.append(f"{candidate}: {exc.strerror or exc}")
                continue
            _SERVING[port] = candidate
            return candidate
    _log.warning("rlsched: extras.rlsched.metrics_port %d (metrics_ports %d) cannot be served (%s); serving "
                 "without the /metrics endpoint", port, span, "; ".join(errors))
    return None


_log = logging.getLogger(__name__)
_SERVING: dict[int, int] = {}
"""``metrics_port`` -> the port this process serves it on."""
_SERVE_LOCK = threading.Lock()
