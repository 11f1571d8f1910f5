"""What a router in vLLM-Omni's orchestrator knows of each replica, for the engine and the simulator alike.

A router in the API process never sees a replica's scheduler. It knows the requests it bound there that
have not finished (its **ledger**), and — when the replica runs rlsched's engine — what that engine
**published** of its state: which of them run, how far each is, and the running batch's predicted end.
``LedgerReplica`` is one replica as such a router sees it (a ``QueueView``), ``Ledger`` the views of a
stage's replicas (the ``LedgerStage`` a router decides on). The engine's ``RouterStagePool`` feeds it
the replicas' published states as they reach the orchestrator; the simulator's ``view=engine`` feeds it
the same states — what ``ReplicaState.read`` gives of ``replica_state``'s wire dict (the round trip itself
skipped, tested equal) — delayed as the engine's path delays them: one rule for both.

**The published state** (``replica_state``; the engine plugin piggybacks it on every output it sends,
under ``STATE_KEY`` in the output's metrics dict, and sends one carrier output whenever its running set
changes)::

    {"v": 1, "seq": 17, "remaining_s": 3.2, "running": [["req-a", 12], ["req-b", 0]], "finished": ["req-c"],
     "preempted": [["req-d", 30]]}

``seq`` increases with every state the replica takes (a stale one, arriving late, is ignored; one that
goes back to 0, or a second sequence counting up below the first, is a restarted replica: its view is
re-synchronised on it); ``remaining_s`` is the running batch's predicted time left when the message was
built, on the plugin's (time-scaled) clock, so no clock is shared between processes; every number lies in
the table of bounds (``rlsched.bounds``: ``STATE_SEQ``, ``STATE_REMAINING_S``, ``STATE_STEPS_DONE``), or
the state is refused as invalid; ``running`` the running requests with
their denoise steps done; ``finished`` those that ended since the previous state, ``preempted`` those
that left the running batch unfinished since then (step mode), with their steps done; ``cal`` (only once the
replica's online calibration has moved, ``rlsched.sim.online``) its version and per model its ``[time,
quadratic, memory]`` scales over the shipped profile — a view re-costs what it follows on a new version
(``"cal": {"version": 3, "scales": {"qwen-image": [1.3, 1.0, 1.0]}}``). A carrier
output's state also holds ``"carrier": true`` (``CARRIER_KEY``): the router pool swallows that output.
Requests are named by their vLLM ids. The waiting order is not sent: a replica's rlsched policy runs
deadline order, which the router's model assumes already.

**A view from a state**: the bound requests the state lists as running run (from the waiting set, with
their steps done), until the predicted end (``gpu_end_s``; never before ``now``: a batch past its
predicted end is about to end); every other bound request waits at its remaining standalone work, the
ones routed since the state was built included. A view **falls back to the ledger** (nothing runs,
everything waits at full cost: what the router saw before replicas published) while it has heard no
state (``missing``: the replica does not run rlsched's engine, or has not started a batch yet), after a
malformed or oversized one (``invalid``), and once it is silent past its bound (``stale``: no message
for ``silence_s`` after the later of the last message and the predicted end). A stale or invalid view
is trusted again at its next valid state.

**Acknowledgement** (issue 50): a request the router sent stays **unacknowledged** (``unacknowledged``)
until a state reflects it: one that lists it (running, finished, preempted) or lists a request sent to
that replica after it (sends reach a replica in order; the unlisted ones wait there). Sent to a replica
the view sees free, the oldest unacknowledged request may have started already, whatever its deadline:
without that, the arrivals inside one publication delay all saw it waiting behind them and herded onto
that replica.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from heapq import heappop, heappush
from typing import Any

from rlsched import bounds
from rlsched.routing.publication import Diff, PublicationDiff
from rlsched.sim.cost import CostModel
from rlsched.sim.online import HIGH, LOW, ROOM_HIGH, refresh
from rlsched.sim.request import Request, RequestRecord
from rlsched.sim.simulator import ServingConfig
from rlsched.sim.stage import Router, simulated
from rlsched.sim.truth import FORM_TERMS, rescaled
from rlsched.sim.view import DEQUEUED, ENGINE_KEEP, ENQUEUED, Hook, Journal, StageView

INF = math.inf
STATE_KEY = "rlsched_state"
"""Key of the published state in an output's metrics dict."""
STATE_VERSION = 1
CARRIER_KEY = "carrier"
"""Set (True) in the state of a carrier output: one the engine sent only to carry the state (the router
pool swallows it, so the orchestrator never sees it)."""
MAX_LISTED = 1024
"""Most requests a state may list as running or finished (a batch is at most ``max_num_seqs``,
which the schema caps lower): a longer list is refused as oversized."""
MAX_ID_CHARS = 512
SCALE_LOW, SCALE_HIGH = LOW / HIGH, HIGH / LOW
"""Bounds of a published time or attention scale (the attention scale is a ratio of two calibrated ones)."""
MEMORY_HIGH = HIGH * ROOM_HIGH
"""Upper bound of a published memory scale: a fitted one times the device's room (``observe_capacity``)."""
SCALE_HIGHS = (SCALE_HIGH, SCALE_HIGH, MEMORY_HIGH, *(SCALE_HIGH,) * len(FORM_TERMS))
"""Upper bound of each entry of a published scale tuple (``rlsched.sim.truth.SCALE_TERMS``)."""
SILENCE_S = 30.0
"""Default bound on a replica's silence past its predicted end, in the router's (profile) seconds."""
VIEWS = ("engine", "ledger", "replica")
"""A router's view of the replicas: ``engine`` (the ledger plus each replica's published state, as
the router in vLLM-Omni sees it), ``ledger`` (bound requests only, nothing seen running: the router
before replicas published their state), ``replica`` (the replicas' true state: a ceiling only the
simulator has)."""
DEFAULT_VIEW = "engine"
PUBLISH_DELAY_S = 0.01
"""The simulator's delay between a replica's change and the router's knowing it (``view=engine``): the
median measured over HTTP with two replicas on the 2-core CPU box, from a wave's start in the replica's
executor log to the router pool's hearing its state (9.4 ms; p90 57 ms, a tail this does not model;
``scripts/sim_vs_engine.py``'s ``state_delays_ms``, docs/sim-vs-engine.md)."""
FALLBACK_REASONS = ("missing", "invalid", "stale")


class StateError(ValueError):
    """A published state that cannot be read (the field says what is wrong)."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """A published state, read and checked (``ReplicaState.read``)."""

    seq: int
    remaining_s: float
    running: tuple[tuple[str, int], ...]
    finished: tuple[str, ...] = ()
    preempted: tuple[tuple[str, int], ...] = ()
    calibration: Calibration | None = None
    """The replica's online calibration (``rlsched.sim.online``): its version and per model its ``(time,
    attention, memory)`` scales over the shipped profile; None: it sent none (as shipped)."""

    @classmethod
    def read(cls, raw: Any) -> ReplicaState:
        """``raw`` (the wire dict) checked field by field; ``StateError`` naming the field otherwise."""
        if not isinstance(raw, Mapping):
            raise StateError(f"state: a mapping expected, not {type(raw).__name__}")
        if raw.get("v") != STATE_VERSION:
            raise StateError(f"state.v: version {STATE_VERSION} expected, not {raw.get('v')!r}")
        seq = int(_bounded(raw.get("seq"), bounds.STATE_SEQ, "state.seq"))  # int(an int): the same number
        remaining = _bounded(raw.get("remaining_s"), bounds.STATE_REMAINING_S, "state.remaining_s")
        running = tuple(_pairs(raw.get("running", ()), "state.running"))
        finished = tuple(_ids(raw.get("finished", ()), "state.finished"))
        preempted = tuple(_pairs(raw.get("preempted", ()), "state.preempted"))
        cal = raw.get(CALIBRATION_KEY)
        return cls(seq, float(remaining), running, finished, preempted, None if cal is None else _calibration(cal))


Calibration = tuple[int, tuple[tuple[Any, ...], ...]]
"""(version, per model ``(name, time, quadratic, memory[, fixed, encode, decode, comm])``:
``rlsched.sim.online.CostCalibrator.scales``)."""
CALIBRATION_KEY = "cal"
MAX_CALIBRATED_MODELS = 64


def _calibration(raw: Any) -> Calibration:
    """``{"version": V, "scales": {MODEL: [time, quadratic, memory(, fixed, encode, decode, comm)]}}`` checked
    (``state.cal``; a replica of an older release sends 3 or 4)."""
    if not isinstance(raw, Mapping):
        raise StateError(f"state.cal: a mapping expected, not {type(raw).__name__}")
    version, scales = int(_bounded(raw.get("version"), bounds.STATE_SEQ, "state.cal.version")), raw.get("scales", {})
    if not isinstance(scales, Mapping) or len(scales) > MAX_CALIBRATED_MODELS:
        raise StateError(f"state.cal.scales: a mapping of at most {MAX_CALIBRATED_MODELS} models expected")
    out = []
    for model, values in scales.items():
        if not isinstance(model, str) or not isinstance(values, (list, tuple)) \
                or not 3 <= len(values) <= len(SCALE_HIGHS) or not all(
                not isinstance(v, bool) and isinstance(v, (int, float)) and SCALE_LOW <= v <= high
                for v, high in zip(values, SCALE_HIGHS)):
            raise StateError(f"state.cal.scales: MODEL: [time, quadratic, memory(, fixed, encode, decode, comm)], "
                             f"each at least "
                             f"{SCALE_LOW:g} and at most {SCALE_HIGH:g} ({MEMORY_HIGH:g} for memory), expected, not "
                             f"{model!r:.80}: {values!r:.80}")
        out.append((model, *map(float, values)))
    return version, tuple(out)


def _listed(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, (list, tuple)):
        raise StateError(f"{where}: a list expected, not {type(value).__name__}")
    if len(value) > MAX_LISTED:
        raise StateError(f"{where}: {len(value)} entries, at most {MAX_LISTED} (oversized)")
    return value


def _ids(value: Any, where: str) -> Iterable[str]:
    for rid in _listed(value, where):
        if not isinstance(rid, str) or not rid or len(rid) > MAX_ID_CHARS:
            raise StateError(f"{where}: a request id (a non-empty string) expected, not {rid!r:.80}")
        yield rid


def _pairs(value: Any, where: str) -> Iterable[tuple[str, int]]:
    for entry in _listed(value, where):
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise StateError(f"{where}: [request id, steps done] expected, not {entry!r:.80}")
        rid, done = entry
        next(iter(_ids([rid], where)))
        _bounded(done, bounds.STATE_STEPS_DONE, f"{where}: steps done")
        yield rid, done


def _bounded(value: Any, bound: bounds.Bound, where: str) -> float:
    """``value``, checked to be a number of ``bound``'s kind (an int for an integer bound, never a bool) in its
    range."""
    kind = int if bound.integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not bound.holds(value):
        raise StateError(f"{where}: {bound.describe()} expected, not {value!r:.80}")
    return value


def replica_state(seq: int, remaining_s: float, running: Iterable[tuple[Any, int]], finished: Iterable[Any] = (),
                  preempted: Iterable[tuple[Any, int]] = (), calibration: Calibration | None = None) -> dict[str, Any]:
    """The wire form of a replica's state (module docstring); ids are sent as strings."""
    remaining_s = min(max(float(remaining_s), 0.0), bounds.MAX_STATE_REMAINING_S)  # the bound a router reads
    state = {"v": STATE_VERSION, "seq": seq, "remaining_s": remaining_s,
             "running": [[str(rid), int(done)] for rid, done in running], "finished": [str(r) for r in finished],
             "preempted": [[str(rid), int(done)] for rid, done in preempted]}
    if calibration is not None:
        version, scales = calibration
        state[CALIBRATION_KEY] = {"version": version, "scales": {m: list(values) for m, *values in scales}}
    return state


def calibration_of(calibrator: Any) -> Calibration | None:
    """What a replica publishes of its ``CostCalibrator`` (None: none, or never moved): built once per version."""
    return None if calibrator is None else calibrator.published


class LedgerReplica:
    """One replica as a router in the orchestrator sees it: a ``QueueView`` (module docstring)."""

    can_reject = False

    def __init__(self, slot: int, cost: CostModel, config: ServingConfig, silence_s: float = SILENCE_S,
                 clock: Clock | None = None, lag_s: float = PUBLISH_DELAY_S) -> None:
        self.slot, self.cost, self.config, self.silence_s = slot, cost, config, silence_s
        self.lag_s = lag_s
        """How late a state is heard (the publication delay): its batch's end, taken as ``remaining_s`` after
        hearing it, is that much late, so a batch seen ending within it may have ended."""
        self.clock = Clock() if clock is None else clock
        """The stage's clock, shared by its views (``LedgerStage.at`` sets every view's time in O(1))."""
        self.on_change: list[Callable[[LedgerReplica], None]] = []
        """Callbacks ``f(self)`` after what the view sees running (``gpu_end_s``) or holds may have shrunk: a
        state taken, a fall back to the ledger, a request resolved (a router's index over its replicas)."""
        self.shipped = cost
        """The replica's profile as deployed; ``cost`` is it at the replica's last published calibration."""
        self.calibration_version = 0
        self.step_mode = config.step_mode
        self.waiting: dict[int, RequestRecord] = {}
        self.running: tuple[RequestRecord, ...] = ()
        self.journal = Journal(ENGINE_KEEP)
        self.on_arrival: list[Hook] = []
        self.on_finish: list[Hook] = []
        self._followed: dict[int, RequestRecord] = {}
        """Every bound, unfinished request (waiting or running)."""
        self._shapes: dict[Hashable, tuple[CostModel, tuple[float, float, float, float, float, float, float]]] = {}
        """Shape -> the cost model and a record's cost figures at it (``_record``)."""
        self.unacknowledged: dict[int, RequestRecord] = {}
        """The bound requests no state taken reflects yet, in send order (``acknowledge``): sent to a replica
        seen free, the oldest may have started already (``RlschedRouter`` counts it ahead of a new request
        whatever its deadline)."""
        self._sent: dict[int, int] = {}
        """Each followed request's send number (the sends to one replica reach it in order)."""
        self._sends = 0
        self._end_s = INF
        self._step_s = 0.0
        """Step mode: one step of the running batch, from the cost model."""
        self._heard_s = -INF
        self._added_s = -INF
        """When the last request was bound here (the view's clock)."""
        self._seq = -1
        self._behind = -1
        """The seq of the last state heard below ``_seq`` (-1: none since the last one taken)."""
        self.resyncs = 0
        """States taken below ``_seq``: the replica restarted and counts again (``publish``)."""
        self._fallback: str | None = None
        self.fallback = "missing"

    @property
    def now(self) -> float:
        return self.clock.now

    @now.setter
    def now(self, now: float) -> None:
        self.clock.now = now

    @property
    def fallback(self) -> str | None:
        """Why the view is the ledger alone (``FALLBACK_REASONS``), None while a published state holds."""
        return self._fallback

    @fallback.setter
    def fallback(self, reason: str | None) -> None:
        down = self.clock.down
        if self._fallback is not None:
            down[self._fallback] -= 1
        if reason is not None:
            down[reason] += 1
        self._fallback = reason

    def detach(self) -> None:
        """Leave the stage's clock (the replica left): its own clock from now on."""
        reason, self.fallback = self.fallback, None
        self.clock = Clock(self.clock.now)
        self.fallback = reason

    def _changed(self) -> None:
        for callback in self.on_change:
            callback(self)

    def _arm(self) -> None:
        """Wake ``LedgerStage.at`` when this view may go silent past its bound (``current``)."""
        if self.silence_s != INF:
            end = self._end_s if self.running else -INF
            self.clock.arm(max(self._heard_s, end, self._added_s) + self.silence_s, self)

    @property
    def gpu_end_s(self) -> float:
        """The running batch's predicted end (INF: nothing seen running), advanced to ``now`` by the cost
        model: in step mode, a step past its published end is followed by the same batch's next steps (one
        step's time each); a request-mode wave past its end is about to end (``now``)."""
        if not self.running:
            return INF
        end, now = self._end_s, self.clock.now  # read at every decision and filing: no property, no max()
        if end < now and self.step_mode and self._step_s > 0:
            end += math.ceil((now - end) / self._step_s) * self._step_s
        return now if now > end else end

    @property
    def memory_used_gb(self) -> float:
        return self.cost.weights_gb

    @property
    def started_unseen(self) -> RequestRecord | None:
        """While the view sees the replica free (nothing running, or its batch ending within ``lag_s``), the
        request that may have started there unseen, whatever its deadline (module docstring): after a batch,
        the first of those it held in deadline order (savable first, as rlsched's replica policies run
        them); on an idle replica, the oldest unacknowledged send (those sent after it wait for it). Sent to
        a replica seen busy, a request waits for that batch's end and runs in deadline order like the rest."""
        if not self.waiting:
            return None
        end = self.gpu_end_s
        if end != INF and end > self.now + self.lag_s:
            return None
        held = [r for i, r in self.waiting.items() if i not in self.unacknowledged] if self.running else []
        if not held:
            return next(iter(self.unacknowledged.values()), None)
        now = self.now
        return min(held, key=lambda r: (r.deadline_s - r.remaining_s < now, r.deadline_s, r.request.id))

    def open_telemetry(self) -> None:
        return None

    # ------------------------------------------------------------------ ledger
    def add(self, req: Request) -> RequestRecord:
        rec = self._record(req)
        rec.key = req.key(self.step_mode)
        self._followed[req.id] = self.waiting[req.id] = self.unacknowledged[req.id] = rec
        self._sent[req.id] = self._sends
        self._sends += 1
        self._added_s = max(self._added_s, self.now)
        self.journal.append(ENQUEUED, rec)
        self._arm()
        return rec

    def _record(self, req: Request) -> RequestRecord:
        """``cost.record(req, its deadline)``, the cost figures those of the last request of its shape at this
        cost: they are a function of the shape (``Request.key`` with its steps) and the cost model alone,
        unless a cache backend draws each request's own (then computed afresh)."""
        cost, deadline = self.cost, req.arrival_s + req.slo_s
        if cost.cache is not None:
            return cost.record(req, deadline)
        shape = req.key(False)
        known = self._shapes.get(shape)
        if known is None or known[0] is not cost:
            rec = cost.record(req, deadline)
            self._shapes[shape] = (cost, (rec.tokens, rec.quad, rec.encode_s, rec.decode_s, rec.work_s, rec.step_s,
                                          rec.mem_gb))
            return rec
        tokens, quad, encode, decode, work, step, mem = known[1]
        return RequestRecord(req, tokens, quad, encode, decode, work, step, mem, deadline)

    def _bound(self, iid: int | None) -> RequestRecord | None:
        """The followed record of a view id (None: a published id the ledger did not bind here)."""
        return None if iid is None else self._followed.get(iid)

    def remove(self, iid: int) -> None:
        rec = self._followed.pop(iid, None)
        if rec is None:
            return
        self.unacknowledged.pop(iid, None)
        self._sent.pop(iid, None)
        if self.waiting.pop(iid, None) is not None:
            self.journal.append(DEQUEUED, rec)
        elif any(r is rec for r in self.running):
            self.running = tuple(r for r in self.running if r is not rec)
        self._changed()

    # ------------------------------------------------------------------- state
    def current(self) -> str | None:
        """Why the published state is not used now (``FALLBACK_REASONS``), None when it is. A view past
        its silence bound drops what it heard (everything waits again, as in the ledger). An idle replica
        with nothing bound has nothing to say: silence counts from the later of its last message, its
        running batch's predicted end and the last request routed to it."""
        if self.fallback is None and self._followed and self.now > max(
                self._heard_s, self._end_s if self.running else -INF, self._added_s) + self.silence_s:
            self._forget("stale")
        return self.fallback

    def publish(self, state: ReplicaState, now: float, iid_of: Callable[[str], int | None]) -> bool:
        """Take a published state heard at ``now`` (``iid_of`` maps a vLLM id to this view's id, None for a
        request it does not follow); False when it is older than one already taken (ignored)."""
        if state.seq <= self._seq and not self._restarted(state.seq):
            return False
        self._seq, self._behind, self._heard_s, self.fallback = state.seq, -1, now, None
        if state.calibration is not None and state.calibration[0] != self.calibration_version:
            self._calibrate(*state.calibration)
        finished = [iid_of(rid) for rid in state.finished]  # each id mapped once
        preempted = [(iid_of(rid), done) for rid, done in state.preempted] if state.preempted else []
        listed = [(iid_of(rid), done) for rid, done in state.running]
        sent = self._sent
        self.acknowledge(max([sent.get(iid, -1) for iid in finished if iid is not None]
                             + [sent.get(iid, -1) for iid, _ in preempted if iid is not None]
                             + [sent.get(iid, -1) for iid, _ in listed if iid is not None], default=-1))
        for iid in finished:
            if iid is not None:
                self.remove(iid)
        for iid, done in preempted:
            rec = self._bound(iid)
            if rec is not None:
                rec.steps_done = min(done, rec.request.num_inference_steps - 1)
        running = []
        for iid, done in listed:
            rec = self._bound(iid)
            if rec is None:
                continue
            rec.steps_done = min(done, rec.request.num_inference_steps - 1)
            running.append(rec)
        self._set_running(running)
        self._end_s = now + state.remaining_s
        if self.step_mode and running:
            cfg = self.config
            self._step_s = self.cost.batch_step_time(running) + cfg.engine_overhead_ms / 1e3
        self._arm()
        self._changed()
        return True

    def acknowledge(self, upto: float) -> None:
        """The replica has taken in every send numbered up to ``upto``: a state that lists a request (running,
        finished, preempted) reflects it and every request sent here before it, the unlisted ones waiting."""
        unacked, sent = self.unacknowledged, self._sent
        while unacked:
            iid = next(iter(unacked))
            if sent[iid] > upto:
                break
            del unacked[iid]

    def _restarted(self, seq: int) -> bool:
        """A state at or below the last one taken is a late one (ignored), unless the replica restarted and
        counts again: its first state (0), or a second state below ``_seq`` newer than the first. Without
        this a replica that restarts is ignored until its count passes its old one (forever, after a
        hostile 10**18)."""
        behind, self._behind = self._behind, max(self._behind, seq) if seq < self._seq else self._behind
        if seq < self._seq and (seq == 0 or seq > behind >= 0):
            self.resyncs += 1
            return True
        return False

    def _calibrate(self, version: int, scales: tuple[tuple[Any, ...], ...]) -> None:
        """The replica's calibration ``version``: the ledger's work and predicted ends re-costed on it (models
        the profile does not hold are ignored)."""
        known = {m: tuple(values) for m, *values in scales if m in self.shipped.models}
        self.calibration_version = version
        self.cost = rescaled(self.shipped, known, f"published-v{version}") if known else self.shipped
        refresh(self._followed.values(), self.cost)
        self.journal.restart()

    def refuse(self, reason: str) -> None:
        """A message that could not be read: the ledger alone until the next valid state."""
        self._forget(reason)

    def _forget(self, reason: str) -> None:
        """Back to the ledger alone: what was seen running waits again, at its remaining work."""
        self.fallback = reason
        for rec in self.running:
            if rec.request.id in self._followed:
                self.waiting[rec.request.id] = rec
                self.journal.append(ENQUEUED, rec)
        self.running = ()
        self._end_s = INF
        self._changed()

    def _set_running(self, batch: list[RequestRecord]) -> None:
        new = {id(r) for r in batch}
        for rec in self.running:  # left the batch unfinished: preempted (step mode) or its end not yet heard
            if id(rec) not in new and rec.request.id in self._followed:
                if self.step_mode:
                    self.waiting[rec.request.id] = rec
                    self.journal.append(ENQUEUED, rec)
                else:  # a request-mode wave runs to its end: gone, its finish is on its way
                    del self._followed[rec.request.id]
                    self._sent.pop(rec.request.id, None)
        for rec in batch:
            if self.waiting.pop(rec.request.id, None) is not None:
                self.journal.append(DEQUEUED, rec)
        self.running = tuple(batch)


class Clock:
    """What a stage's views share: the time, how many are seen through the ledger alone (by reason), and
    when each may go silent past its bound — so a decision's view of a thousand replicas costs O(1), not
    one visit per replica. A view alone has its own."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.down: Counter[str] = Counter()
        """Views seen through the ledger alone, by reason (``LedgerReplica.fallback``)."""
        self._silent: list[tuple[float, int, LedgerReplica]] = []
        self._armed = 0

    def arm(self, at: float, view: LedgerReplica) -> None:
        """Check ``view`` (``current``) once the clock passes ``at``."""
        heappush(self._silent, (at, self._armed, view))
        self._armed += 1

    def wake(self) -> None:
        """Views whose silence bound the clock passed go stale (``current`` checks each exactly: a bound
        that moved since it was armed was armed again)."""
        silent, now = self._silent, self.now
        while silent and silent[0][0] < now:
            view = heappop(silent)[2]
            if view.clock is self:
                view.current()


class LedgerStage(Clock):
    """What a router reads of a ``Stage``: the live replicas' views (index = position, not slot), the clock
    and the seed."""

    def __init__(self, replicas: list[LedgerReplica], seed: int = 0, now: float = 0.0) -> None:
        super().__init__(now)
        self.replicas, self.seed = replicas, seed
        self.fallbacks: dict[str, int] = {}
        """Routing decisions made with a replica seen through the ledger alone, by reason (one count per
        replica and decision)."""

    def at(self, now: float) -> LedgerStage:
        """Every view's clock at ``now``; counts the views seen through the ledger alone."""
        self.now = now
        self.wake()
        for reason, n in self.down.items():
            if n:
                self.fallbacks[reason] = self.fallbacks.get(reason, 0) + n
        return self


class Ledger:
    """The requests a router bound that have not finished, per replica slot (``LedgerReplica``s), with the
    published states, and the ``LedgerStage`` a router decides on. Not thread-safe: the pool holds its lock."""

    def __init__(self, cost_of: Callable[[int], CostModel], config: ServingConfig, seed: int = 0,
                 silence_s: float = SILENCE_S, lag_s: float = PUBLISH_DELAY_S) -> None:
        self._cost_of, self.config, self.silence_s, self.lag_s = cost_of, config, silence_s, lag_s
        self.views: dict[int, LedgerReplica] = {}
        self.stage = LedgerStage([], seed)
        self._slots: list[int] = []
        self.bound: dict[str, tuple[int, int]] = {}
        """vLLM request id -> (slot, the ledger's int id)."""
        self._next_id = 0
        self.last_error = ""
        """Why the last refused state could not be read."""

    @property
    def slots(self) -> list[int]:
        """The slot of each of the stage's replicas, by position (kept by ``follow``: the pool reads it at
        every decision)."""
        return self._slots

    def follow(self, live: Sequence[int]) -> list[str]:
        """Make ``live`` (slot ids, in order) the routed replicas; returns the request ids whose replica
        left (their entries are resolved)."""
        routed = set(live)
        lost = [rid for rid, (slot, _) in self.bound.items() if slot not in routed]
        for rid in lost:
            del self.bound[rid]
        for slot in [s for s in self.views if s not in routed]:
            self.views.pop(slot).detach()
        for slot in live:
            if slot not in self.views:
                self.views[slot] = LedgerReplica(slot, self._cost_of(slot), self.config, self.silence_s, self.stage,
                                                 self.lag_s)
        self.stage.replicas = [self.views[s] for s in live]
        self._slots = list(live)
        return lost

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def add(self, request_id: str, slot: int, req: Request) -> None:
        self.remove(request_id)
        view = self.views.get(slot)
        if view is None:  # a replica that is not routed (it left): nothing to follow
            return
        view.add(req)
        self.bound[request_id] = (slot, req.id)

    def remove(self, request_id: str) -> int | None:
        """Resolve ``request_id``'s entry; returns its slot (None when it had none)."""
        entry = self.bound.pop(request_id, None)
        if entry is None:
            return None
        slot, iid = entry
        view = self.views.get(slot)
        if view is not None:
            view.remove(iid)
        return slot

    def publish(self, slot: int, raw: Any, now: float) -> str | None:
        """Take replica ``slot``'s published state (the wire dict) heard at ``now``. Returns None when it
        was taken, ``"old"`` when a newer one was taken before, ``"unrouted"`` for a slot not routed,
        ``"invalid"`` when it cannot be read (``last_error`` says why; the view is the ledger alone)."""
        view = self.views.get(slot)
        if view is None:
            return "unrouted"
        try:
            state = ReplicaState.read(raw)
        except StateError as exc:
            self.last_error = str(exc)
            view.refuse("invalid")
            return "invalid"
        return self.take(slot, state, now)

    def take(self, slot: int, state: ReplicaState, now: float) -> str | None:
        """``publish`` for a state read already (the simulator's, built as ``ReplicaState.read`` gives it)."""
        view = self.views.get(slot)
        if view is None:
            return "unrouted"
        view.now = now
        return None if view.publish(state, now, lambda rid: self._iid(slot, rid)) else "old"

    def _iid(self, slot: int, request_id: str) -> int | None:
        entry = self.bound.get(request_id)
        return entry[1] if entry is not None and entry[0] == slot else None

    def outstanding(self, slot: int) -> int:
        """Requests bound to ``slot`` that have not finished (waiting or running)."""
        view = self.views.get(slot)
        return 0 if view is None else len(view._followed)


__all__ = ["CARRIER_KEY", "DEFAULT_VIEW", "FALLBACK_REASONS", "Ledger", "LedgerStage", "MAX_LISTED", "PUBLISH_DELAY_S",
           "ReplicaState", "LedgerReplica", "SILENCE_S", "STATE_KEY", "STATE_VERSION", "StateError", "VIEWS",
           "ViewRouter", "replica_state"]


def _unfinished(rec: Any) -> int | None:
    """A simulator record that left the running batch: its steps done when unfinished (preempted), else None."""
    if rec is None:
        return None
    return rec.steps_done if rec.steps_done < rec.request.num_inference_steps else None


class ViewRouter(Router):
    """A simulator router on what the deployed router sees (``view=engine`` or ``view=ledger``).

    Wraps any router: it decides on a ``Ledger`` of the requests it routed that have not finished — and,
    with ``view=engine``, on the states the replicas publish (``replica_state``, built when a replica's
    running batch changes, as the engine plugin builds it), each heard ``delay_s`` after the change;
    finishes reach it after the same delay. ``view=ledger`` is the router in vLLM-Omni before replicas
    published anything: every routed, unfinished request waits at its full standalone time."""

    def __init__(self, router: Router, view: str = DEFAULT_VIEW, delay_s: float = PUBLISH_DELAY_S) -> None:
        if view not in ("engine", "ledger"):
            raise ValueError(f"a ViewRouter routes on view=engine or view=ledger, not {view!r}")
        self.router, self.view, self.delay_s = router, view, delay_s
        self.name: str = getattr(router, "name", "router")

    def reset(self, view: StageView) -> None:
        stage = simulated(view, self.name)
        sims = stage.replicas
        self.ledger = Ledger(lambda slot: sims[slot].cost, sims[0].config, stage.seed, silence_s=INF,
                             lag_s=self.delay_s)
        self.ledger.follow(list(range(len(sims))))
        self._heard: deque[tuple[float, int, Any]] = deque()
        """(when the router hears it, slot, a state dict or a finished request's id), in time order."""
        self._seq = [0] * len(sims)
        self._diffs: list[PublicationDiff[int]] = [PublicationDiff() for _ in sims]
        """Per replica, when to publish and what (``rlsched.routing.publication``, the plugin's rule too)."""
        self._progress: list[dict[int, RequestRecord]] = [{} for _ in sims]
        """Per replica, the running batch last published, id -> record (to tell who left it unfinished)."""
        for slot, sim in enumerate(sims):
            sim.on_finish.append(partial(self._finish, slot))
            if self.view == "engine":
                sim.on_change.append(partial(self._change, slot))
            self._seed(slot, sim)
        self.router.reset(self.ledger.stage)

    def _seed(self, slot: int, sim: Any) -> None:
        """A stage that already holds requests (a fork): the router has bound them and, on the engine view,
        heard the replica's state as it is now."""
        present = [*sim.running, *sim.waiting.values()]
        for rec in present:
            self.ledger.add(str(rec.request.id), slot, rec.request)
        if self.view == "engine" and present:
            progress = tuple([(r.request.id, r.steps_done) for r in sim.waiting.values() if r.steps_done])
            diff = self._diffs[slot].take([r.request.id for r in sim.running], lambda _: None, force=True)
            assert diff is not None  # forced
            self.ledger.take(slot, self._state(slot, sim, replace(diff, preempted=progress)), sim.now)
        self.ledger.views[slot].acknowledge(INF)  # the fork's replica holds them all

    @property
    def fallbacks(self) -> dict[str, int]:
        return self.ledger.stage.fallbacks

    def _finish(self, slot: int, rec: RequestRecord) -> None:
        self._heard.append((rec.finish_s + self.delay_s, slot, str(rec.request.id)))
        if self.view == "engine":
            self._diffs[slot].finish(rec.request.id)

    def _change(self, slot: int, sim: Any) -> None:
        before = self._progress[slot]
        diff = self._diffs[slot].take([r.request.id for r in sim.running], lambda rid: _unfinished(before[rid]))
        if diff is not None:  # the engine publishes when its running set changes, or something finished
            self._heard.append((sim.now + self.delay_s, slot, self._state(slot, sim, diff)))

    def _state(self, slot: int, sim: Any, diff: Diff[int]) -> ReplicaState:
        """Replica ``slot``'s state now, as the engine builds it (``replica_state``) and the router reads it
        (``ReplicaState.read``; the wire dict's round trip skipped: a third of a fleet run's time): the next
        seq, its running batch and what is left of it, what finished and was preempted since (``diff``)."""
        self._seq[slot] += 1
        running = sim.running
        self._progress[slot] = {r.request.id: r for r in running}
        # the engine publishes its profile's prediction of the running batch, not when it really ends
        left = max(sim.predicted_end_s - sim.now, 0.0) if running and sim.gpu_end_s != INF else 0.0
        return ReplicaState(self._seq[slot], min(left, bounds.MAX_STATE_REMAINING_S),
                            tuple([(str(r.request.id), r.steps_done) for r in running]),
                            tuple(map(str, diff.finished)), tuple([(str(i), done) for i, done in diff.preempted]),
                            calibration_of(sim.calibrator))

    def route(self, request: Request, stage: StageView) -> int:
        now, heard, ledger = stage.now, self._heard, self.ledger
        while heard and heard[0][0] <= now:
            t, slot, what = heard.popleft()
            if isinstance(what, str):
                ledger.remove(what)
            else:
                ledger.take(slot, what, t)
        slot = self.router.route(request, ledger.stage.at(now))
        if type(slot) is int:
            ledger.add(str(request.id), slot, request)
        return slot
