"""Discrete-event simulator of one vLLM-Omni diffusion stage (one model set, one GPU).

Three event sources, merged in ``(time, kind_rank, seq)`` order: the GPU finishing
its batch (rank 0), the next arrival (rank 1, seq = arrival order) and a policy's
wake-up timer (rank 2). One replica runs one batch at a time, so no heap is needed.

Driving it::

    sim = Simulator(requests, cost, config)
    while sim.advance_to_next_decision():
        sim.apply(policy.decide(sim))

A decision point is reached when the GPU is idle and there is work: in ``request``
mode a whole wave (all steps) of compatible waiting requests starts; in ``step``
mode one denoise step of a batch drawn from running and waiting requests starts
(running requests left out are preempted and keep their progress).

The simulator keeps the run's records and statistics and drives three collaborators, one mechanism each:
``_arrivals`` (``rlsched.sim.arrivals.Arrivals``: the workload in arrival order), ``queue``
(``rlsched.sim.waiting.Waiting``: the waiting requests in vLLM-Omni's order and their journal) and
``device`` (``rlsched.sim.device.Device``: the GPU — the true cost, the memory check, the calibrator's
observations, the OOM split).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from rlsched.errors import InvalidDecision
from rlsched.sim.arrivals import Arrivals
from rlsched.sim.cost import CostModel
from rlsched.sim.device import Device
from rlsched.sim.online import Recosting
from rlsched.sim.quota import Quotas, QuotaView
from rlsched.sim.request import (
    COMPLETED,
    FAILED_OOM,
    REJECTED,
    RUNNING,
    WAITING,
    Request,
    RequestRecord,
)
from rlsched.sim.serving import ServingConfig
from rlsched.sim.telemetry import SimTelemetry
from rlsched.sim.view import Decision, Hook, Journal, SchedulingPolicy, batch_problem
from rlsched.sim.waiting import Waiting

if TYPE_CHECKING:
    from rlsched.sim.view import QueueView

_END, _ARRIVAL, _TIMER = 0, 1, 2
INF = math.inf

WAIT = Decision()

_PROBLEMS = {
    "too_large": "batch of {n} exceeds max_num_seqs={cap}",
    "duplicate": "batch {ids} names a request twice",
    "unknown_id": "batch {ids} names requests that are neither waiting nor running",
    "mixed_keys": "batch {ids} mixes compatibility keys",
}
"""``InvalidDecision`` messages by ``batch_problem`` code."""


def _request_id(rec: RequestRecord) -> int:
    return rec.request.id


class Simulator:
    """Event loop, queue state and per-request records; a ``QueueView``. Policies read, never write."""

    can_reject = True
    """Decisions may reject waiting requests (``Decision.reject``, load shedding)."""
    started_unseen: RequestRecord | None = None
    """A request that may run here unseen (``ReplicaView``): none, this is the truth."""

    def __init__(self, requests: Sequence[Request], cost: CostModel, config: ServingConfig,
                 horizon_s: float = INF, truth: CostModel | None = None,
                 calibrate: bool = True, retry_oom: bool | None = None, memory_check: bool | None = None) -> None:
        self.config, self.horizon_s = config, horizon_s
        self.device = Device(cost, config, truth, calibrate, retry_oom, memory_check)
        """The GPU (``rlsched.sim.device``): the true cost, its calibration, the memory check, the OOM split."""
        self.truth = truth
        """What the GPU really runs at (``Device.truth``); ``cost`` is what decisions read."""
        self.calibrator = self.device.calibrator
        """Online calibration (``Device.calibrator``): ``cost`` is its current version."""
        self.cost = self.device.belief(cost)
        """What decisions read: ``cost``, or the calibrator's current version of it."""
        self.memory_trims = 0
        """Decisions whose batch the memory check cut (``Device.memory_check``)."""
        self.step_mode = config.step_mode
        self._arrivals = Arrivals(requests)
        self.records: dict[int, RequestRecord] = {}
        self.now = 0.0
        self.queue = Waiting()
        """The waiting requests and the journal of their changes (``rlsched.sim.waiting``)."""
        self.running: list[RequestRecord] = []
        self.gpu_end_s = INF
        self.predicted_end_s = INF
        """When the running batch ends by ``cost`` (what the replica publishes and a central queue
        schedules on); ``gpu_end_s`` is when it really ends."""
        self._timer_s = INF
        self._idle_until_event = False
        self.batches = 0
        self.batch_sizes: list[int] = []
        self.busy_s = 0.0
        self.mem_gb_s = 0.0
        """Activation memory × time of every batch run (GB·s; the weights are resident throughout)."""
        self.oom_batches = 0
        self.oom_retries = 0
        """Requests an OOM sent back to the queue (``_out_of_memory``)."""
        self.last_batch: list[RequestRecord] = []
        """The batch most recently started (telemetry reads its memory-bound share)."""
        self.on_arrival: list[Hook] = []
        """Callbacks ``f(record)`` run when a request arrives (policies' history features)."""
        self.on_finish: list[Hook] = []
        """Callbacks ``f(record)`` run when a request completes or fails (env rewards)."""
        self.on_calibrate: list[Callable[[Simulator], None]] = []
        """Callbacks ``f(self)`` run when this simulator's calibrator moved ``cost`` (a central queue adopts
        it, as the engine's central pool adopts a replica's published calibration)."""
        self.on_change: list[Callable[[Simulator], None]] = []
        """Callbacks ``f(self)`` run after the running batch changed (a batch started, ended, failed or was
        preempted): what a replica publishes to a router (``routing.views``)."""
        self.quotas = Quotas.of(config)
        """The classes' quotas (``rlsched.sim.quota``): told every batch that starts; None when no class has one."""
        self._quota_view = QuotaView(self, self.quotas) if self.quotas is not None else None

    # ---------------------------------------------------------------- events
    def _next_event(self) -> tuple[float, int]:
        t_arr = self._arrivals.next_s
        best = (self.gpu_end_s, _END)
        if t_arr < best[0]:
            best = (t_arr, _ARRIVAL)
        if self._timer_s < best[0]:
            best = (self._timer_s, _TIMER)
        return best

    def _fire(self, kind: int, t: float) -> None:
        self.now = t
        self._idle_until_event = False
        if kind == _END:
            self._end_batch()
        elif kind == _ARRIVAL:
            self._arrive(self._arrivals.head)
            self._arrivals.advance()
        else:
            self._timer_s = INF

    def _arrive(self, req: Request) -> None:
        rec = self.cost.record(req)
        rec.deadline_s = req.arrival_s + req.slo_s
        rec.key = req.key(self.step_mode)
        self.records[req.id] = rec
        self.queue.add(rec)
        for callback in self.on_arrival:
            callback(rec)

    # ------------------------------------------------- driven from outside (a Stage)
    def next_event_s(self) -> float:
        """Time of this simulator's next event (INF: none)."""
        return self._next_event()[0]

    def fire_next(self) -> None:
        """Process the next event (a ``Stage`` interleaves the events of its replicas)."""
        t, kind = self._next_event()
        self._fire(kind, t)

    def receive(self, req: Request, now: float) -> None:
        """An arrival routed here from outside at ``now`` (>= this simulator's clock)."""
        if now < self.now:
            raise InvalidDecision(f"request {req.id} delivered at {now} before the replica's clock {self.now}")
        self.now = now
        self._idle_until_event = False
        self._arrive(req)

    def wake(self) -> None:
        """Something outside changed (a replica fell idle): decide again at the next chance."""
        self._idle_until_event = False

    def release(self, ids: Iterable[int]) -> list[RequestRecord]:
        """Take waiting requests out of this queue without running them (a central queue hands
        them to a replica); their records leave ``records``, each ends elsewhere exactly once."""
        out = self.queue.release(ids)
        for rec in out:
            del self.records[rec.request.id]
        self.queue.compact()
        self._idle_until_event = False
        return out

    @property
    def needs_decision(self) -> bool:
        return (self.gpu_end_s == INF and not self._idle_until_event
                and bool(self.queue.waiting or self.running))

    def advance_to_next_decision(self) -> bool:
        """Process events until a policy must decide; False when nothing is left."""
        while True:
            t, kind = self._next_event()
            if t == self.now and t != INF:
                self._fire(kind, t)
                continue
            if self.needs_decision:
                return True
            if t == INF or t > self.horizon_s:
                return False
            self._fire(kind, t)

    # ------------------------------------------------------------- decisions
    def apply(self, decision: Decision) -> None:
        """Carry out a decision taken at the current decision point."""
        if decision.reject:
            self._reject(decision.reject, decision.reason)
        if not decision.batch:
            self._wait(decision.wait_until)
            return
        if self.gpu_end_s != INF:
            raise InvalidDecision("the GPU is busy; decide only at a decision point")
        batch = self._take(self._memory_checked(tuple(decision.batch)))
        self.batches += 1
        self.batch_sizes.append(len(batch))
        started = self.device.start(batch, self.cost, self.now)
        if started is None:
            self._out_of_memory(batch)
            self._changed()
            return
        duration, predicted = started
        for rec in batch:
            if rec.status == WAITING and math.isnan(rec.first_scheduled_s):
                rec.first_scheduled_s = self.now
            rec.status, rec.batch_id = RUNNING, self.batches
        self.running = self.last_batch = batch
        if self.quotas is not None:
            self.quotas.started(batch, predicted, self.now)
        self.gpu_end_s = self.now + duration
        self.predicted_end_s = self.now + predicted
        self._changed()

    def admitted_batch(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The batch ``apply`` starts for a decision's ``ids``: cut to what the memory check lets start
        (``Device.admitted``). An id that is neither waiting nor running is left for ``apply`` to name."""
        if not self.device.memory_check or not ids:
            return ids
        running = {r.request.id: r for r in self.running}
        recs = [rec for i in ids if (rec := self.waiting.get(i) or running.get(i)) is not None]
        if len(recs) < len(ids):
            return ids
        return ids[:self.device.admitted(recs, self.cost)]

    def _memory_checked(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        cut = self.admitted_batch(ids)
        if len(cut) < len(ids):
            self.memory_trims += 1
        return cut

    def _changed(self) -> None:
        for callback in self.on_change:
            callback(self)

    def _wait(self, until: float | None) -> None:
        if until is not None and until > self.now:
            self._timer_s = min(self._timer_s, until)
        self._idle_until_event = True
        if self.step_mode and self.running:
            self.queue.preempt(self.running)
            self.running = []
            self._changed()

    def _take(self, ids: Iterable[int]) -> list[RequestRecord]:
        ids = tuple(ids)
        problem = batch_problem(self, ids)
        if problem is not None:
            raise InvalidDecision(_PROBLEMS[problem].format(ids=ids, n=len(ids), cap=self.config.max_num_seqs))
        batch, left_out = self.queue.take_batch(ids, self.running)
        if left_out:
            self.queue.preempt(left_out)
        self.queue.compact()
        return batch

    def _reject(self, ids: Iterable[int], reason: str) -> None:
        """Drop waiting requests (load shedding): each ends ``rejected`` with ``reason``."""
        if not reason:
            raise InvalidDecision("a rejection must give a reason")
        for rid in ids:
            rec = self.queue.take(rid)
            if rec is None:
                raise InvalidDecision(f"request {rid} is not waiting; only waiting requests can be rejected")
            rec.reject_reason = reason
            self._finish(rec, REJECTED)
        self.queue.compact()

    # ------------------------------------------------------- the GPU's answers
    def _adopt(self) -> None:
        """Take the calibrator's newest version (``on_calibrate`` hears of it)."""
        cost = self.device.newer()
        if cost is None:
            return
        self.adopt_cost(cost)
        for callback in self.on_calibrate:
            callback(self)

    def adopt_cost(self, cost: CostModel) -> None:
        """Decide on ``cost`` from now on (a calibration version, this replica's or one it heard of): live
        records re-costed, the journal restarted (every policy's queue index re-ranks once)."""
        old, self.cost = self.cost, cost
        Recosting(lambda: self.journal, self.records.values).adopt(old, cost)  # at once: the plugin's rule

    def _end_batch(self) -> None:
        elapsed, moved = self.device.end(self.running, self.now)
        self.busy_s += elapsed
        self.mem_gb_s += elapsed * (self.device.mem_gb - self.device.weights_gb(self.cost))  # weights always resident
        if moved:
            self._adopt()
        self.gpu_end_s = self.predicted_end_s = INF
        still: list[RequestRecord] = []
        done: list[RequestRecord] = []
        for rec in self.running:
            (done if rec.steps_done >= rec.request.num_inference_steps else still).append(rec)
        # requests finishing together are reported in id order, as the plugin's engine loop reports
        # them: callbacks that average over finishes (the observation's SLO history) see one order
        for rec in sorted(done, key=_request_id):
            self._finish(rec, COMPLETED)
        self.running = still
        if done:
            self._changed()

    def _out_of_memory(self, batch: list[RequestRecord]) -> None:
        """``batch`` failed out of memory (``Device.out_of_memory``): some requests go back to the head of
        the queue, the others fail (``FAILED_OOM``)."""
        self.oom_batches += 1
        moved, split = self.device.out_of_memory(batch)
        if moved:
            self._adopt()
        if split.retry:
            self.oom_retries += len(split.retry)
            self.queue.push_front(split.retry)
        for rec in split.failed:
            if math.isnan(rec.first_scheduled_s):
                rec.first_scheduled_s = self.now
            rec.batch_id = self.batches
            self._finish(rec, FAILED_OOM)
        self.running = [r for r in self.running if r.status == RUNNING]

    def _finish(self, rec: RequestRecord, status: str) -> None:
        if rec.status in (COMPLETED, FAILED_OOM, REJECTED):
            raise InvalidDecision(f"request {rec.request.id} finished twice")
        rec.status, rec.finish_s = status, self.now
        self.device.forget(rec.request.id)
        for callback in self.on_finish:
            callback(rec)

    # ------------------------------------------------------------------ forks
    def fork(self, future_s: float = 0.0) -> Simulator:
        """An independent copy of the present: waiting and running requests (their records
        copied), the GPU's current batch and the clock, plus the arrivals of the next
        ``future_s`` seconds (0: none, what a scheduler can know; > 0: hindsight), and a copy of the
        quotas' window. Callbacks, the journal and the statistics start empty. For look-ahead: try a
        decision on the fork."""
        ahead = self._arrivals.ahead(self.now + future_s) if future_s > 0 else []
        sim = Simulator(ahead, self.cost, self.config, self.horizon_s, self.truth, calibrate=False)
        copies = {rid: copy.copy(rec) for rid, rec in self.records.items() if rec.status in (WAITING, RUNNING)}
        sim.records = dict(copies)
        sim.queue.waiting = {rid: copies[rid] for rid in self.waiting}
        sim.running = [copies[r.request.id] for r in self.running]
        sim.last_batch = list(sim.running)
        sim.now, sim.gpu_end_s, sim._timer_s = self.now, self.gpu_end_s, self._timer_s
        sim.predicted_end_s = self.predicted_end_s
        sim._idle_until_event = self._idle_until_event
        sim.device.mem_gb, sim.device.start_s = self.device.mem_gb, self.device.start_s
        if self.quotas is not None:  # the window so far: a fork holds whom the original would
            sim.quotas = copy.deepcopy(self.quotas)
            sim._quota_view = QuotaView(sim, sim.quotas)
        return sim

    # ----------------------------------------------------------------- views
    @property
    def waiting(self) -> dict[int, RequestRecord]:
        """Waiting records in queue order (arrival order; preempted ones first): ``Waiting.waiting``."""
        return self.queue.waiting

    @property
    def journal(self) -> Journal:
        """Every change of ``waiting`` in order (``Waiting.journal``)."""
        return self.queue.journal

    @property
    def arrivals_left(self) -> int:
        return self._arrivals.left

    @property
    def total_requests(self) -> int:
        return len(self._arrivals)

    @property
    def memory_used_gb(self) -> float:
        """What the GPU holds now (NVML's used memory): the running batch's peak (weights included), else
        the weights."""
        return self.device.mem_gb if self.gpu_end_s != INF else self.device.weights_gb(self.cost)

    def open_telemetry(self) -> SimTelemetry:
        """What NVML would report for this simulator (``SimTelemetry``), from now on."""
        return SimTelemetry(self)

    def policy_view(self) -> QueueView:
        """What a policy decides on now: this simulator, less the requests of the classes held by their
        quotas (``rlsched.sim.quota.QuotaView``, refreshed; one per simulator). Without quotas: itself."""
        return self if self._quota_view is None else self._quota_view.refresh()

    def run(self, policy: SchedulingPolicy) -> Simulator:
        """Run to the end (or the horizon) under ``policy``; returns self."""
        policy.reset(self.policy_view())
        while self.advance_to_next_decision():
            self.apply(policy.decide(self.policy_view()))
        return self
