"""A diffusion stage of R replicas: one ``Simulator`` (and one policy) per replica, routed.

vLLM-Omni 0.30 scales a diffusion stage by replicas (``runtime.num_replicas``): each is
an independent engine on its own GPUs with its own scheduler, and new requests are
dealt out on arrival by the orchestrator (``StagePool.select_replica_id``, round-robin)
or the distributed mode's ``LoadBalancer``. Two ways requests reach replicas:

* **early binding** (what vLLM-Omni does): a ``Router`` picks the replica when a
  request arrives; the request stays there (affinity) and that replica's own
  ``SchedulingPolicy`` decides over its own queue (``QueueView``);
* **late binding** (``central``): requests wait in one central queue; whenever a
  replica takes its next batch (``takes_next_batch``: nothing queued there, and idle — or,
  in request mode, its running wave predicted to end within ``lead_s``, one wave ahead, as
  the engine's central pool sends it so the send's round trip leaves the critical path), a
  central policy picks a batch from the central queue and the stage hands it to that
  replica (lowest index first), whose own policy then runs it. The central policy decides
  in the freed replica's costs: the stage keeps one view of the central queue per
  distinct replica kind (cost model and serving config), each with its own instance of
  the central policy, all holding the same waiting requests; a batch handed out leaves
  every view. A homogeneous stage has one.

The event loop merges the replicas' events with the arrivals in time order; at one
instant every replica's own events (batch ends, timers) fire first, then the arrivals
(routed in arrival order), then each replica that needs one decides (index order) —
the ``Simulator``'s own order, so a stage of one replica under ``round-robin`` gives
the same records as the ``Simulator`` alone. Deterministic given the requests and the
router's seed; every request ends exactly once, in the replica it was routed to.
"""

from __future__ import annotations

import gc
import math
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from heapq import heapify, heappop, heappush
from typing import Any, Protocol

from rlsched.errors import ConfigError, InvalidDecision, InvalidRequest
from rlsched.sim.central import CENTRAL_LEAD_S, CentralQueue, next_batch, next_batch_s, takes_next_batch
from rlsched.sim.cost import CostModel
from rlsched.sim.request import Request, RequestRecord
from rlsched.sim.simulator import ServingConfig, Simulator
from rlsched.sim.view import Decision, SchedulingPolicy, StageView

INF = math.inf


@dataclass(frozen=True)
class Hold(Decision):
    """Late binding, a central policy's decision for the replica being served: keep *it* idle until
    ``wait_until`` (a held replica takes nothing from the central queue before then), while the queue
    goes on serving the others — unlike a plain wait, which pauses the whole kind's view (a batch
    waiting to fill). A look-ahead teacher tries it: a freed slow replica left for a faster one.
    Simulator only: no shipped central policy decides one, and the engine's central pool would take it
    as a plain wait."""


@dataclass(frozen=True)
class ReplicaSpec:
    """One replica: its name, its cost model (the profile at this replica's layout) and its
    scheduler settings."""

    name: str
    cost: CostModel
    serving: ServingConfig
    truth: CostModel | None = None
    """What the replica's GPU really runs at (``rlsched.sim.truth``; None: ``cost`` is the truth)."""


class Router(Protocol):
    """Picks the replica of an arriving request (early binding). It decides on a ``StageView``: the simulator's
    ``Stage``, or in vLLM-Omni's orchestrator the router plugin's ``LedgerStage`` (docs/router_seam.md)."""

    name: str

    def reset(self, stage: StageView) -> None:
        """Called once before the first request of a run (and again when the orchestrator's replicas change):
        drop every per-run structure and read the stage's replicas afresh."""
        ...

    def route(self, request: Request, stage: StageView) -> int:
        """Called at each request's arrival, with the stage's clock at that instant: the index (into
        ``stage.replicas``) of the replica it joins. The request is not in any replica's queue yet."""
        ...


class Stage:
    """R replicas behind a router; see the module docstring."""

    def __init__(self, requests: Sequence[Request], replicas: Sequence[ReplicaSpec], horizon_s: float = INF,
                 seed: int = 0, calibrate: bool = True) -> None:
        if not replicas:
            raise ConfigError("replicas", "a stage needs at least one replica")
        self._arrivals = sorted(requests, key=_arrival)
        ids = [r.id for r in self._arrivals]
        if len(set(ids)) != len(ids):
            dup = next(i for i, n in Counter(ids).items() if n > 1)
            raise InvalidRequest("id", dup, "duplicate request id in the workload")
        self.specs = tuple(replicas)
        self.replicas = [Simulator([], r.cost, r.serving, horizon_s, r.truth, calibrate) for r in replicas]
        """Each calibrates its own cost on its own batches (``calibrate``; only with a ``truth``), as each
        replica's engine plugin does; a router hears of it in the replica's published state
        (``routing.views``), a central queue adopts it (``_open_central``)."""
        self.horizon_s, self.seed = horizon_s, seed
        self.now = 0.0
        self.routed: dict[int, int] = {}
        """Request id -> the replica it was routed (or, late binding, handed) to."""
        self.central_queue = CentralQueue()
        """Late binding: the central queue (``rlsched.sim.central``, the engine's central pool's too), one view
        (a simulator that never runs a batch itself) per replica kind: ``hubs``."""
        self.lead_s = CENTRAL_LEAD_S
        """Late binding: ``takes_next_batch``'s lead (seconds on this stage's clock)."""
        self._woken_for: list[float] = []
        """Late binding: per replica, the running wave whose end (less the lead) already woke the stage."""
        self.dispatching: int | None = None
        """Late binding: the replica a central policy is deciding for, during its ``decide`` (a
        look-ahead teacher forks the stage for it: ``fork_deciding``); None between decisions."""
        self._resume: tuple[int, Decision] | None = None
        """A fork taken at a central decision: the replica and the decision tried for it, carried
        out when the fork runs, before anything else (``fork_deciding``)."""
        self._next = 0

    @classmethod
    def uniform(cls, requests: Sequence[Request], replicas: int, cost: CostModel, serving: ServingConfig,
                horizon_s: float = INF, seed: int = 0, truth: CostModel | None = None,
                calibrate: bool = True) -> Stage:
        """``replicas`` replicas of one cost model (a profile, or a profile at a layout) and config, each GPU
        running at ``truth`` (None: ``cost``)."""
        return cls(requests, [ReplicaSpec(f"r{i}", cost, serving, truth) for i in range(replicas)], horizon_s, seed,
                   calibrate)

    # ------------------------------------------------------------------ runs
    def run(self, policies: Sequence[SchedulingPolicy], router: Router | None = None,
            central: Callable[[], SchedulingPolicy] | None = None) -> Stage:
        """Run to the end (or the horizon): early binding with ``router``, or late binding with
        policies made by ``central`` (one per replica kind) picking batches from one queue.
        Returns self."""
        if (router is None) == (central is None):
            raise ConfigError("stage", "give a router (early binding) or a central policy (late binding)")
        with frozen_heap():
            if router is None:
                for _ in self._loop(policies, central, None):  # late binding: nothing to route
                    pass
                return self
            steps = self._loop(policies, None, router)
            try:
                request = next(steps)
                while True:
                    request = steps.send(router.route(request, self))
            except StopIteration:
                pass
        return self

    def routing(self, policies: Sequence[SchedulingPolicy]) -> Generator[Request, int, None]:
        """Early binding with the caller as the router (an environment, one decision a step): a
        generator that yields each arriving request at its arrival instant and is sent the index
        of its replica; ``run(policies, router)`` is this generator driven by ``router.route``.
        Exhausted when the run ends (the stage's own state is then that of a finished run)."""
        return self._loop(policies, None, None)

    def _loop(self, policies: Sequence[SchedulingPolicy], central: Callable[[], SchedulingPolicy] | None,
              router: Router | None) -> Generator[Request, int, None]:
        if len(policies) != len(self.replicas):
            raise ConfigError("policies", f"{len(policies)} policies for {len(self.replicas)} replicas")
        for sim, policy in zip(self.replicas, policies):
            policy.reset(sim.policy_view())
        if central is None and self.hubs:
            raise ConfigError("stage", "a fork of a late-binding stage runs with a central policy, not routed")
        hubs: list[SchedulingPolicy] = []
        if central is not None:
            hubs = self._open_central(central)
        elif router is not None:
            router.reset(self)
        who = getattr(router, "name", router) if router is not None else "routing()"
        sims = self._all()
        hub = len(self.replicas)  # the central views' first index in sims, when there are any
        arrivals, n = self._arrivals, len(self._arrivals)
        if self._resume is not None:  # a fork taken at a central decision: it goes on from that decision
            (r, decision), self._resume = self._resume, None
            self._dispatch(hubs, start=r, decided=decision)
        for sim, policy in zip(self.replicas, policies):  # a fork starts mid-instant: who must decide now does
            while sim.needs_decision:
                sim.apply(policy.decide(sim.policy_view()))
        times = [sim.next_event_s() for sim in sims]  # recomputed only for those touched at an instant
        # (time, simulator), a heap: an instant costs O(log R), not a scan of every replica's next event; an
        # entry whose time is no longer that simulator's (``times``) is dropped when it surfaces
        events = [(tr, r) for r, tr in enumerate(times) if tr != INF]
        heapify(events)
        while True:
            while events and times[events[0][1]] != events[0][0]:
                heappop(events)
            t = min(arrivals[self._next].arrival_s if self._next < n else INF, events[0][0] if events else INF)
            if t == INF or t > self.horizon_s:
                break
            self.now = t
            touched: list[int] = []
            while events and events[0][0] == t:  # index order, as the Simulator's own order asks
                r = heappop(events)[1]
                if times[r] == t and (not touched or touched[-1] != r):
                    touched.append(r)
            for r in touched:
                sim = sims[r]
                while sim.next_event_s() == t:
                    sim.fire_next()
                if hubs and r < hub:
                    self.central_queue.mark(r)
            while self._next < n and arrivals[self._next].arrival_s == t:
                self._next += 1  # consumed before routing: a fork taken by the router holds what is still to come
                req = arrivals[self._next - 1]
                if hubs:
                    self.central_queue.park(req, self.now)
                    touched.append(hub)
                else:
                    touched.append(self._bind_routed(req, (yield req), who))
            if hubs:
                touched += self._dispatch(hubs)
            if len(touched) > 1:
                touched = sorted(set(touched))
            for r in touched:
                if r >= hub:
                    continue
                sim, policy = sims[r], policies[r]
                while sim.needs_decision:
                    sim.apply(policy.decide(sim.policy_view()))
                if hubs:
                    self.central_queue.mark(r)
            for r in touched:
                tr = times[r] = self._ahead(r) if hubs and r < hub else sims[r].next_event_s()
                if tr != INF:
                    heappush(events, (tr, r))
        for sim in self.replicas:  # one makespan for every replica's utilisation
            sim.now = max(sim.now, self.now)

    def _ahead(self, r: int) -> float:
        """Replica ``r``'s next event, or (late binding, request mode) the instant its running wave comes
        within the lead of its end with nothing queued there — once per wave."""
        sim = self.replicas[r]
        t = sim.next_event_s()
        end = sim.predicted_end_s  # what the central queue is told of the wave (its profile's prediction)
        due = next_batch_s(len(sim.waiting), sim.gpu_end_s != INF, end, sim.step_mode, self.lead_s)
        if due == INF or self._woken_for[r] == end:
            return t
        wake = max(due, self.now)
        if wake >= t:
            return t
        if wake == self.now:  # already within the lead: the dispatch of this instant saw it
            self._woken_for[r] = end
            return t
        return wake

    def _all(self) -> list[Simulator]:
        return [*self.replicas, *self.hubs]

    def _bind_routed(self, req: Request, r: Any, who: Any) -> int:
        if type(r) is not int or not 0 <= r < len(self.replicas):
            raise InvalidDecision(f"router {who!r} chose replica {r!r} of {len(self.replicas)}")
        self.routed[req.id] = r
        self.replicas[r].receive(req, self.now)
        return r

    # ------------------------------------------------------------------ forks
    def fork(self, future_s: float = 0.0, horizon_s: float | None = None) -> Stage:
        """An independent copy of the present, to try a decision on and run forward (look-ahead).

        Every replica is forked (``Simulator.fork``: its waiting and running requests with their
        records copied, the running batch, timers and clock); the fork's arrivals are the stage's
        own still to come within the next ``future_s`` seconds (0: none, what a router can know;
        > 0: hindsight). ``routed`` holds the present requests. The fork runs (``run``) until
        ``horizon_s`` (None: this stage's horizon); its policies and router are the caller's,
        made fresh (a router reset on the fork sees its queues). Finished requests, statistics
        and callbacks are not copied. Late binding: the central views are forked too (their
        waiting requests, clock and timer) and the fork runs with a central policy of the
        caller's, made fresh per kind (``run(..., central=...)``); its arrivals wait centrally."""
        if not future_s >= 0:
            raise ConfigError("stage.fork", f"future_s must be >= 0, not {future_s!r}")
        ahead = [] if future_s == 0 else [r for r in self._arrivals[self._next:] if r.arrival_s <= self.now + future_s]
        fork = Stage(ahead, self.specs, self.horizon_s if horizon_s is None else horizon_s, self.seed, calibrate=False)
        fork.replicas = [sim.fork(0.0) for sim in self.replicas]
        fork.central_queue = self.central_queue.fork(_fork_view)
        fork._woken_for, fork.lead_s = list(self._woken_for), self.lead_s
        fork.now = self.now
        fork.routed = {rid: r for r, sim in enumerate(fork.replicas) for rid in sim.records}
        return fork

    def fork_deciding(self, decision: Decision, horizon_s: float | None = None, future_s: float = 0.0,
                      replay_s: float = 0.0) -> Stage:
        """Late binding, inside a central policy's ``decide`` (``dispatching`` set): a fork
        (``fork(future_s, horizon_s)``; 0: realizable) in which ``decision`` is what the central policy
        decided for the replica being served — a batch handed to it, or a wait that holds it idle — and
        the dispatch of this instant goes on from there as the real one would (the replicas after it,
        the kind's view not woken again) when the fork runs. ``replay_s`` > 0 (realizable, with
        ``future_s`` 0): the arrivals of the last ``replay_s`` seconds arrive again, ``replay_s`` later
        under new ids — the recent past as the forecast of the next ``replay_s`` seconds."""
        if self.dispatching is None:
            raise ConfigError("stage.fork_deciding", "only inside a central policy's decision (late binding)")
        fork = self.fork(future_s, horizon_s)
        fork._resume = (self.dispatching, decision)
        if replay_s > 0:
            past = [r for r in self._arrivals[:self._next] if r.arrival_s > self.now - replay_s]
            first = max(r.id for r in self._arrivals) + 1
            fork._arrivals = sorted([*fork._arrivals, *(replace(r, id=first + i, arrival_s=r.arrival_s + replay_s)
                                                        for i, r in enumerate(past))], key=_arrival)
        return fork

    def bind(self, request: Request, replica: int) -> None:
        """Deliver ``request`` to ``replica`` now, outside any router (a look-ahead fork binds the
        request being routed to each replica it tries). It must not be among this stage's arrivals."""
        if not 0 <= replica < len(self.replicas):
            raise InvalidDecision(f"replica {replica!r} of {len(self.replicas)}")
        if request.id in self.routed or any(r.id == request.id for r in self._arrivals[self._next:]):
            raise InvalidRequest("id", request.id, "already in this stage")
        self.routed[request.id] = replica
        self.replicas[replica].receive(request, self.now)

    # ----------------------------------------------------------- late binding
    @property
    def hubs(self) -> list[Simulator]:
        """Late binding: the central queue's views, one per replica kind (``CentralQueue.views``)."""
        return self.central_queue.views

    @property
    def central(self) -> Simulator | None:
        """The central queue (its first view); None under early binding."""
        return self.hubs[0] if self.hubs else None

    def _open_central(self, make: Callable[[], SchedulingPolicy]) -> list[SchedulingPolicy]:
        queue = self.central_queue
        queue.reset_candidates(range(len(self.replicas)))
        # a replica's cost: what the shipped profile became before its first decision (the device's memory)
        if not self.hubs:  # a fork has its parent's views already
            queue.open([(r, spec.cost, spec.serving) for r, spec in enumerate(self.specs)],
                       lambda r: Simulator([], self.replicas[r].cost, self.specs[r].serving, self.horizon_s))
            self._woken_for = [INF] * len(self.replicas)
        policies = []
        for view in self.hubs:
            policy = make()
            policy.reset(view)
            bind = getattr(policy, "bind_stage", None)  # a look-ahead teacher forks the stage it decides for
            if bind is not None:
                bind(self)
            policies.append(policy)
        forward: Callable[[RequestRecord], None] = self._forward_finish
        for r, sim in enumerate(self.replicas):  # the central policies' history sees every finish
            sim.on_finish.append(forward)
            # a replica's new calibration reaches its kind's central view (the engine's central pool takes it
            # from the replica's next published state: milliseconds later, not modelled)
            sim.on_calibrate.append(partial(_adopt_in, queue, r))
        return policies

    def _forward_finish(self, rec: RequestRecord) -> None:
        for view in self.hubs:
            for callback in view.on_finish:
                callback(rec)

    def _dispatch(self, policies: list[SchedulingPolicy], start: int = 0, decided: Decision | None = None) -> list[int]:
        """Hand the central policies' batches to the replicas that take their next batch, lowest first
        (``CentralQueue.visit``; each decided in that replica's kind's view); returns the simulators touched
        (the replicas served, and the central views). A fork goes on from replica ``start``, whose
        decision is ``decided`` (its kind's view woken for it at the instant forked)."""
        queue, n = self.central_queue, len(self.replicas)
        touched = list(range(n, n + len(queue.views)))
        for r in queue.visit(self.now, self._takes, start, decided is not None):
            sim = self.replicas[r]
            if sim.gpu_end_s != INF:
                self._woken_for[r] = sim.predicted_end_s
            k, view = queue.view_for(r, self.now)
            if not view.needs_decision:
                continue
            decision = decided if decided is not None and r == start else self._decide(policies[k], view, r)
            if decision.reject:
                view.apply(Decision(reject=decision.reject, reason=decision.reason))
                queue.drop_elsewhere(k, decision.reject)
            if isinstance(decision, Hold) and decision.wait_until is not None and decision.wait_until > self.now:
                queue.hold(r, decision.wait_until)
                view.apply(Decision(wait_until=decision.wait_until))  # its timer: the stage decides again then
                view.wake()  # the view serves the kind's other replicas at once
                continue
            if not decision.batch:
                view.apply(Decision(wait_until=decision.wait_until))
                continue
            for rec in queue.hand_out(k, decision.batch):
                self.routed[rec.request.id] = r
                sim.receive(rec.request, self.now)
            touched.append(r)
        return touched

    def _takes(self, r: int) -> tuple[bool, float]:
        """Whether replica ``r`` takes its next batch now, and if not when (``central.next_batch``)."""
        sim = self.replicas[r]
        running = sim.gpu_end_s != INF or bool(sim.running)
        return next_batch(len(sim.waiting), running, sim.predicted_end_s, self.now, sim.step_mode, self.lead_s)

    def _decide(self, policy: SchedulingPolicy, view: Simulator, r: int) -> Decision:
        self.dispatching = r
        try:
            return policy.decide(view)
        finally:
            self.dispatching = None

    # ----------------------------------------------------------------- views
    @property
    def records(self) -> dict[int, RequestRecord]:
        """Every request's record (each in the replica it ran on; late binding: or still central,
        from the first view, or rejected, from the view that rejected it)."""
        out: dict[int, RequestRecord] = {}
        for sim in [*self.replicas, *reversed(self.hubs)]:
            out.update(sim.records)
        return out

    @property
    def batch_sizes(self) -> list[int]:
        """Every batch's size, replica by replica."""
        return [b for sim in self.replicas for b in sim.batch_sizes]

    @property
    def arrivals_left(self) -> int:
        return len(self._arrivals) - self._next

    @property
    def total_requests(self) -> int:
        return len(self._arrivals)


def simulated(stage: StageView, router: str) -> Stage:
    """``stage`` as the simulator's ``Stage``, for a router that reads more than a ``StageView`` (a teacher's
    forks, the deployed-view wrapper's hooks on each replica); a typed refusal anywhere else."""
    if not isinstance(stage, Stage):
        raise ConfigError("router", f"{router} runs on the simulator's stage only (it reads the replicas' "
                                    f"true state), not on {type(stage).__name__}")
    return stage


def _adopt_in(queue: CentralQueue, r: int, replica: Simulator) -> None:
    queue.adopt(r, replica.cost)


def _fork_view(view: Simulator) -> Simulator:
    return view.fork(0.0)


RUN_GC_EVERY = 10_000
"""During a run the collector's youngest generation is collected after this many new container objects, not
Python's 700 (``frozen_heap``): a 1,024-replica run held most of what it made (records, the ledger's), and
collected 400 times for little."""


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects that exist before a run (its workload, scenario and replicas) kept out of the garbage
    collector's passes during it (``gc.freeze``, as vLLM's engine core and rlsched's plugin do after init), and
    its youngest generation collected less often (``RUN_GC_EVERY``); both handed back after the run
    (``gc.unfreeze``, the thresholds as they were): the passes of a 1,024-replica run took a sixth of its
    time. Nothing is frozen when something froze objects already (the plugin)."""
    threshold = gc.get_threshold()
    freeze = not gc.get_freeze_count()
    if freeze:
        gc.freeze()
    if 0 < threshold[0] < RUN_GC_EVERY:  # 0: collection switched off, left so
        gc.set_threshold(RUN_GC_EVERY, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if freeze:
            gc.unfreeze()


def _arrival(req: Request) -> float:
    return req.arrival_s


__all__ = ["CENTRAL_LEAD_S", "Hold", "ReplicaSpec", "Router", "Stage", "next_batch_s", "simulated", "takes_next_batch"]
