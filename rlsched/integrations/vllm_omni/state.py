"""The live engine queue as a policy sees it: a ``QueueView``, like the ``Simulator``.

``PluginState`` keeps one ``RequestRecord`` per live vLLM request, built by the same
``CostModel`` the simulator uses, and maps vLLM's string request ids to the int ids
policies return. It follows the engine's queue event by event and journals each
change as the simulator does, so a decision costs the same at any queue depth. It
reads requests by attribute only, so it imports no vLLM and is tested without it.

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
priority          ``extra_args["priority"]``: a class of ``classes`` by name (``default_priority``)
SLO               ``extra_args["slo_ms"]`` (class ``slo_scale`` × standalone time)
arrival           the plugin clock when ``add_request`` ran, less ``extra_args["rlsched_parked_ms"]``
                  (wall ms in the router's central queue, × ``time_scale``; read only with
                  ``late_binding``, the central pool's own mark: a client's value is ignored)
key               vLLM's ``sampling_params_key``, interned (equal keys ⇔ equal ``key``)
================  =====================================================================

An unusable value (an unknown class, a NaN or negative ``slo_ms``, a zero height…) is
replaced by its default and counted in ``invalid``; the request is still served.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence, ValuesView
from numbers import Real
from typing import Any, TypeVar, overload

from rlsched import bounds
from rlsched.bounds import Bound
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.sim.cost import CostModel
from rlsched.sim.online import CostCalibrator, Recosting
from rlsched.sim.request import COMPLETED, RUNNING, WAITING, Request, RequestRecord
from rlsched.sim.simulator import ServingConfig
from rlsched.sim.telemetry import UNKNOWN, Telemetry, TelemetrySample
from rlsched.sim.view import DEQUEUED, ENGINE_KEEP, ENQUEUED, Hook, Journal

Clock = Callable[[], float]
PARKED_KEY = "rlsched_parked_ms"
"""``extra_args`` key the central pool (late binding) sets on a request it sends: the wall ms it was
parked in the API process. The replica dates the request's arrival (and so its deadline) back by it,
only behind a central pool (``PluginConfig.late_binding``), and the pool drops a client's own value
(``drop_client_parking``) before anything else reads the request: a client cannot move its request ahead."""
FAILED, ABORTED = "failed", "aborted"
"""Record statuses for requests the engine failed (error) or the client cancelled."""


def read_request(sampling: Any, settings: PluginConfig) -> tuple[dict[str, Any], list[str]]:
    """Request fields from vLLM sampling params, and the names of fields that were unusable."""
    bad: list[str] = []
    extra = getattr(sampling, "extra_args", None)
    extra = extra if isinstance(extra, Mapping) else {}
    out = {
        "height": _pos_int(getattr(sampling, "height", None), settings.default_height, "height", bad, bounds.SIDE_PX),
        "width": _pos_int(getattr(sampling, "width", None), settings.default_width, "width", bad, bounds.SIDE_PX),
        "num_frames": _pos_int(getattr(sampling, "num_frames", None), 1, "num_frames", bad, bounds.FRAMES),
        "steps": _steps(sampling, settings.default_steps, bad),
        "cfg": _cfg(sampling),
        "priority": settings.default_priority,
        "slo_s": None,
        "parked_s": 0.0,
    }
    priority = extra.get("priority")
    if priority is not None:
        named = settings.class_of(priority)
        if named is not None:
            out["priority"] = named
        else:
            bad.append("priority")
    slo_ms = extra.get("slo_ms")
    if slo_ms is not None:
        if _finite_positive(slo_ms):
            out["slo_s"] = float(slo_ms) / 1e3
        else:
            bad.append("slo_ms")
    parked = extra.get(PARKED_KEY)
    if parked is not None:
        if not settings.late_binding:
            bad.append(PARKED_KEY)  # no central pool set it: a client's own, which would move it ahead
        elif _finite_positive(parked) or parked == 0:
            out["parked_s"] = float(parked) / 1e3 * settings.time_scale
        else:
            bad.append(PARKED_KEY)
    return out, bad


def request_of(iid: int, now: float, fields: dict[str, Any], settings: PluginConfig, cost: CostModel,
               model: Any = None) -> Request:
    """The ``Request`` that ``read_request``'s ``fields`` describe, arriving at ``now`` (less the time it was
    parked: late binding dates it back to its arrival at the central queue), with its SLO: ``slo_ms``, else
    the class's scale × its standalone time in ``cost`` (the profile, as on each replica). ``ValueError`` for
    an SLO past float's range. The one reading of a request for the engine plugin and the router's ledger."""
    m = model or (cost.model(settings.model) if settings.model else next(iter(cost.models.values())))
    arrival = max(now - fields.get("parked_s", 0.0), 0.0)
    req = settings.request(iid, arrival, m.name, m.modality, fields["height"], fields["width"], fields["num_frames"],
                           fields["steps"], fields["cfg"], priority=fields["priority"], slo_s=math.inf)
    slo_s = fields["slo_s"] or settings.slo_scale(req.priority) * cost.record(req).work_s
    if not (math.isfinite(slo_s) and slo_s > 0):  # a standalone time past float's range
        raise ValueError("no finite SLO")
    return dataclasses.replace(req, slo_s=slo_s)


def make_request(iid: int, now: float, sampling: Any, settings: PluginConfig, cost: CostModel) -> Request:
    """``sampling`` (vLLM-Omni's diffusion sampling params) as a ``Request`` (``read_request``, ``request_of``);
    whatever it holds, a request: every field at its default where it cannot be read (the router's ledger
    follows every request it routes, as the engine plugin tracks every one it admits)."""
    try:
        fields, _ = read_request(sampling, settings)
        return request_of(iid, now, fields, settings, cost)
    except Exception:
        fields, _ = read_request(None, settings)
        return request_of(iid, now, fields, settings, cost)


def drop_client_parking(req_state: Any, stage_id: int, params_override: Any = None) -> None:
    """Remove a client's own ``extra_args[PARKED_KEY]`` from a request's stage params (the central pool
    calls this on every request it is handed, before it parks or sends it): only the pool's late binding
    may date a request back. Never raises (a request it cannot read is left as it is)."""
    try:
        params = params_override if params_override is not None else req_state.sampling_params_list[stage_id]
        extra = getattr(params, "extra_args", None)
        if isinstance(extra, Mapping) and PARKED_KEY in extra:
            params.extra_args = {k: v for k, v in extra.items() if k != PARKED_KEY}
    except Exception:  # noqa: BLE001 - a request the pool cannot read is vLLM-Omni's to refuse
        pass


def _pos_int(value: Any, default: int, name: str, bad: list[str], bound: Bound = bounds.STEPS) -> int:
    """A shape field in ``bound`` (the scenario schema's range: 10^6 px modelled a 10^12-pixel image)."""
    if value is None:
        return default
    f = _number(value)
    if f is not None and math.isfinite(f) and f.is_integer() and bound.holds(int(f)):
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
    try:
        return float(value)
    except (OverflowError, ValueError):  # an int past float's range (10**400): unusable, not a crash
        return None


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


T = TypeVar("T")


class WaitingQueue(Mapping[int, RequestRecord]):
    """Waiting records by id in vLLM-Omni's queue order: preempted requests first (each new
    preemption ahead of older ones, as ``preempt_request`` re-queues at the head), then
    arrivals in order. Two dicts, so an arrival, a start and a preemption cost O(1) —
    one dict would be rebuilt (O(n)) at every preemption."""

    __slots__ = ("_head", "_tail", "_popped")

    def __init__(self, records: Iterable[RequestRecord] = ()) -> None:
        self._head: dict[int, RequestRecord] = {}
        self._tail: dict[int, RequestRecord] = {r.request.id: r for r in records}
        self._popped = 0

    def __getitem__(self, iid: int) -> RequestRecord:
        rec = self._head.get(iid)
        return rec if rec is not None else self._tail[iid]

    @overload
    def get(self, iid: int, /) -> RequestRecord | None: ...

    @overload
    def get(self, iid: int, default: T, /) -> RequestRecord | T: ...

    def get(self, iid: int, default: Any = None) -> Any:
        rec = self._head.get(iid)
        return rec if rec is not None else self._tail.get(iid, default)

    def __contains__(self, iid: object) -> bool:
        return iid in self._head or iid in self._tail

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    def __iter__(self) -> Iterator[int]:
        return itertools.chain(self._head, self._tail)

    def values(self) -> _Values:
        return _Values(self)

    def append(self, rec: RequestRecord) -> None:
        self._tail[rec.request.id] = rec

    def push_front(self, recs: list[RequestRecord]) -> None:
        """Put ``recs`` (in this order) ahead of every waiting record."""
        self._head = {**{r.request.id: r for r in recs}, **self._head}

    def pop(self, iid: int) -> RequestRecord | None:
        rec = self._head.pop(iid, None)
        if rec is not None:
            return rec
        rec = self._tail.pop(iid, None)
        self._popped += rec is not None
        if self._popped > 1024 and self._popped > len(self._tail):  # as Waiting.compact: a dict
            self._tail, self._popped = dict(self._tail), 0  # keeps popped slots; iterating walks them
        return rec


class _Values(ValuesView[RequestRecord]):
    """``WaitingQueue.values()``: a dict's view of the values, iterated in queue order."""

    __slots__ = ("_queue",)

    def __init__(self, queue: WaitingQueue) -> None:
        super().__init__(queue)
        self._queue = queue

    def __iter__(self) -> Iterator[RequestRecord]:
        return itertools.chain(self._queue._head.values(), self._queue._tail.values())

    def __len__(self) -> int:
        return len(self._queue)


class _LatestSample:
    """``PluginState.open_telemetry()``: reads the state's latest NVML sample (refreshed at
    ``sync``, at most every ``telemetry_interval_s``)."""

    def __init__(self, state: PluginState) -> None:
        self._state = state

    def read(self) -> TelemetrySample:
        sample = self._state.telemetry
        return sample if isinstance(sample, TelemetrySample) else UNKNOWN


class PluginState:
    """The live engine queue as a ``QueueView`` (see the module docstring).

    Incremental, like the simulator: the scheduler reports every change as it happens —
    ``add`` (a new request), ``note_preempted`` (a running request re-queued), ``follow``
    after vLLM-Omni's own ``schedule()`` admitted (running ids), ``finish`` (a request left
    the engine) — and each change of ``waiting`` is journaled exactly as the simulator
    journals it, so a policy's queue index replays the journal instead of re-sorting the
    queue. ``sync`` before a decision costs O(running), not O(queue): it checks only that
    vLLM's queue lengths match and rebuilds (journaling the difference) when they do not.
    """

    can_reject = False
    """The engine serves every request it admitted: no load shedding (``Decision.reject``)."""

    _MAX_KEYS = 4096
    """Interned compatibility keys kept before the table is reset (bounded memory)."""

    def __init__(self, cost: CostModel, config: ServingConfig, settings: PluginConfig,
                 clock: Clock = time.monotonic, telemetry: Any = None,
                 calibrator: CostCalibrator | None = None, recost_slice: int | None = None) -> None:
        self.calibrator = calibrator
        """Online calibration (``rlsched.sim.online``; None: ``calibrate=off``): ``cost`` is its current
        version, ``observe_batch`` feeds it."""
        self.recosting = Recosting(lambda: self.journal, self._live, recost_slice)
        """How a new cost reaches the live records (``adopt_cost``): at once (``recost_slice`` None), or, past
        ``recost_slice`` live records, memory at once and time a slice per ``recost_some`` (the engine's
        scheduler calls it after each batch, between decisions)."""
        self._capacity_read = False
        """Whether the device's total memory has been read into the calibrator (``_read_telemetry``)."""
        self.shipped = calibrator.base if calibrator is not None else cost
        """The profile as deployed: default SLOs are a class's scale × a standalone time on it (what a user
        wrote them against), whatever the calibration says since."""
        cost = calibrator.cost if calibrator is not None else cost
        self.cost, self.config, self.settings = cost, config, settings
        self.step_mode = config.step_mode
        self._model = self.shipped.model(settings.model) if settings.model else next(iter(self.shipped.models.values()))
        settings.check_defaults(cost)
        self._clock, self._t0 = clock, clock()
        self.now = 0.0
        self.waiting = WaitingQueue()
        """Waiting records in vLLM's queue order (preempted ones first, as vLLM re-queues them)."""
        self.running: list[RequestRecord] = []
        self.records: dict[int, RequestRecord] = {}
        """Every live request (waiting or running), by int id."""
        self.journal = Journal(ENGINE_KEEP)
        """Every change of ``waiting``, as ``Simulator.journal`` (the newest ``ENGINE_KEEP``)."""
        self.waiting_by_class: Counter[str] = Counter()
        """Waiting requests per priority class (the queue-depth gauges), kept with ``waiting``."""
        self.invalid: Counter[str] = Counter()
        """Unusable request fields seen, by field name (each was replaced by its default)."""
        self.resyncs = 0
        """``sync`` calls that found vLLM's queue lengths differ from this view's and rebuilt it."""
        self.telemetry: TelemetrySample | None = None
        """Latest ``TelemetrySample`` (None before the first read or without telemetry)."""
        self.on_arrival: list[Hook] = []
        """Like ``Simulator.on_arrival``: ``f(record)`` after a request is added."""
        self.on_finish: list[Hook] = []
        """Like ``Simulator.on_finish``: ``f(record)`` when a request completes or fails (not on abort)."""
        self._telemetry_source = telemetry
        self._telemetry_due = -math.inf
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._keys: dict[Any, int] = {}
        self._preempted: list[int] = []
        self._next_id = 0
        self._lock = threading.Lock()  # the view changes only under it (a timed-out decision may still read)

    # ------------------------------------------------------------ lifecycle
    def time(self) -> float:
        """Seconds since the state was created, on the plugin clock."""
        return self._clock() - self._t0

    def add(self, name: str, sampling: Any, key: Any) -> tuple[RequestRecord, list[str]]:
        """Track a new request (it joins the tail of ``waiting``); returns its record and the
        unusable fields that were defaulted."""
        now = max(self.time(), 0.0)
        with self._lock:
            iid = self._next_id
            self._next_id += 1
        try:
            fields, bad = read_request(sampling, self.settings)
            rec = self._record(iid, now, fields)
        except Exception:  # whatever the request holds, it is tracked (an untracked one would make FIFO
            fields, _ = read_request(None, self.settings)  # serve every call while it waits): defaults
            bad = ["request"]
            rec = self._record(iid, now, fields)
        # the simulator's key, extended by the interned vLLM key: equal keys <=> vLLM would batch them
        rec.key = rec.request.key(self.step_mode) + (self._intern(key),)
        with self._lock:
            self._ids[name], self._names[iid], self.records[iid] = iid, name, rec
            self._enqueue(rec)
        self.invalid.update(bad)
        _notify(self.on_arrival, rec)
        return rec, bad

    def _record(self, iid: int, now: float, fields: dict[str, Any]) -> RequestRecord:
        req = request_of(iid, now, fields, self.settings, self.shipped, self._model)
        rec = self.cost.record(req)
        self.recosting.joined(rec)  # a pass in progress: its times (memory: the newest)
        rec.deadline_s = req.arrival_s + req.slo_s
        return rec

    def observe_batch(self, batch: Sequence[RequestRecord], steps_done: Sequence[int], seconds: float) -> bool:
        """A batch (request mode: a wave; step mode: a step) took ``seconds`` on the plugin clock: the calibrator
        learns from it; True when the cost moved (a new version, adopted: ``adopt_cost``)."""
        cal, cfg = self.calibrator, self.config
        return cal is not None and bool(batch) and self._learned(lambda: cal.observe(
            batch[0].request.model,
            cal.parts(batch, self.step_mode, cfg.engine_overhead_ms, cfg.engine_overhead_ms_per_mpx, steps_done),
            seconds))

    def observe_oom(self, batch: Sequence[RequestRecord]) -> bool:
        """``batch`` failed out of memory in the engine: the calibrator raises its memory scale; True when the
        cost moved (every live record's memory at once: ``adopt_cost``)."""
        cal = self.calibrator
        return cal is not None and bool(batch) and self._learned(lambda: cal.observe_oom(batch))

    def _learned(self, observe: Callable[[], bool]) -> bool:
        """Run one of the calibrator's ``observe*`` under the lock; adopt its cost when it moved (True)."""
        assert self.calibrator is not None
        with self._lock:
            if not observe():
                return False
        self.adopt_cost(self.calibrator.cost)
        return True

    def adopt_cost(self, cost: CostModel) -> None:
        """Decide on ``cost`` from now on (a new calibration version; a replica's published one, in a central
        view): the live records re-costed by ``recosting``'s rule — at once, the journal restarted; or, past
        its slice, memory at once and time a slice per ``recost_some``, so no decision re-ranks the queue."""
        with self._lock:
            old, self.cost = self.cost, cost
            self.recosting.adopt(old, cost)

    def recost_some(self) -> int:
        """Between decisions: the time figures of one slice of the records a new version left to re-cost
        (``Recosting.advance``); how many."""
        if not self.recosting.passing:
            return 0
        with self._lock:
            return self.recosting.advance()

    def _live(self) -> list[RequestRecord]:
        """Every live record, running first, then the waiting ones in queue order (a pass re-costs the
        oldest first)."""
        return [*self.running, *self.waiting.values()]

    def note_preempted(self, name: str) -> None:
        """``name`` was moved from running back to the head of vLLM's queue (step mode);
        ``follow`` moves it here, after the requests that started in the same call."""
        iid = self._ids.get(name)
        if iid is not None:
            self._preempted.append(iid)

    def follow(self, running: Iterable[str]) -> None:
        """vLLM-Omni's ``_running`` after its own ``schedule()`` (or at a ``sync``): requests that
        joined it started (they leave ``waiting``), requests noted preempted rejoin ``waiting``
        at its head, the rest left (finished). O(running)."""
        get, recs = self._ids.get, self.records
        now_running = [recs[iid] for iid in map(get, running) if iid is not None and iid in recs]
        preempted, self._preempted = self._preempted, []
        if not preempted and len(now_running) == len(self.running) and all(
                a is b for a, b in zip(now_running, self.running)):
            return
        with self._lock:
            for rec in now_running:
                if rec.status != RUNNING:
                    self._dequeue(rec)
                    rec.status = RUNNING
            still = {id(r) for r in now_running}
            back = [recs[i] for i in preempted if i in recs and id(recs[i]) not in still]
            for rec in back:
                self._joined(rec)
            if back:
                self.waiting.push_front(back)
            self.running = now_running

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
            rec = self.records.pop(iid, None)
            if rec is not None:
                if iid in self.waiting:
                    self._dequeue(rec)
                if any(r is rec for r in self.running):
                    self.running = [r for r in self.running if r is not rec]
            return rec

    def _enqueue(self, rec: RequestRecord) -> None:
        self.waiting.append(rec)
        self._joined(rec)

    def _joined(self, rec: RequestRecord) -> None:
        """``rec`` joined ``waiting`` (wherever it was placed): its status, the journal, the gauges."""
        rec.status = WAITING
        self.journal.append(ENQUEUED, rec)
        self.waiting_by_class[rec.request.priority] += 1

    def _dequeue(self, rec: RequestRecord) -> None:
        if self.waiting.pop(rec.request.id) is not None:
            self.journal.append(DEQUEUED, rec)
            self.waiting_by_class[rec.request.priority] -= 1

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
        """Before a decision: the clock, running requests and their progress, telemetry; a
        rebuild only when vLLM's queue length differs from this view's. Returns how many
        waiting ids are untracked (vLLM holds them, this view has no record of them)."""
        self.now = self.time()
        self.follow(running)
        if len(waiting) != len(self.waiting):
            self._resync(waiting)
        if progress is not None:
            self._sync_steps(progress)
        self._read_telemetry()
        return len(waiting) - len(self.waiting)

    def _resync(self, waiting: Iterable[str]) -> None:
        """Rebuild ``waiting`` in vLLM's order, journaling what left and what joined: O(queue)."""
        self.resyncs += 1
        get, recs = self._ids.get, self.records
        order = [recs[iid] for iid in map(get, waiting) if iid is not None and iid in recs]
        with self._lock:
            keep = {id(r) for r in order}
            for rec in [r for r in self.waiting.values() if id(r) not in keep]:
                self._dequeue(rec)
            for rec in order:
                if rec.request.id not in self.waiting:
                    self._joined(rec)
            self.waiting = WaitingQueue(order)

    def _sync_steps(self, progress: Mapping[str, Any]) -> None:
        """Steps done of the running requests (a waiting one keeps what it had when preempted)."""
        for rec in self.running:
            p = progress.get(self._names[rec.request.id])
            if p is not None:
                rec.steps_done = min(int(p.current_step), rec.request.num_inference_steps)

    def use_telemetry(self, source: Any) -> None:
        """Read GPU telemetry from ``source`` (a ``Telemetry``) from now on."""
        self._telemetry_source, self._telemetry_due = source, -math.inf

    def open_telemetry(self) -> Telemetry:
        """The engine's NVML samples as a ``Telemetry`` (each read: the latest sample)."""
        return _LatestSample(self)

    def _read_telemetry(self) -> None:
        if self._telemetry_source is None or self.now < self._telemetry_due:
            return
        self._telemetry_due = self.now + self.settings.telemetry_interval_s
        try:
            self.telemetry = self._telemetry_source.read()
        except Exception:  # telemetry is advisory; the queue state alone still schedules
            self.telemetry = None
        cal, sample = self.calibrator, self.telemetry
        if cal is not None and not self._capacity_read and sample is not None and sample.known:
            self._capacity_read = True  # the device's memory, once: a GPU smaller than the profile's
            self._learned(lambda: cal.observe_capacity(sample.memory_total_gb))

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


def _notify(callbacks: list[Hook], rec: RequestRecord) -> None:
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
