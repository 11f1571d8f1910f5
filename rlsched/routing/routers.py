"""Routers of a multi-replica stage (early binding): which replica an arriving request joins.

vLLM-Omni 0.30's own, exactly as it routes:

* ``round-robin`` — ``StagePool.select_replica_id``: a running index over the live
  replicas, one step per new request (the in-process path; every replica is live here);
* ``random`` — the distributed ``LoadBalancer``'s ``RandomBalancer`` (seeded here);
* ``least-queue`` — ``LeastQueueLengthBalancer``: fewest requests queued or running,
  ties broken at random (seeded). vLLM-Omni reads each replica's reported queue length;
  the simulator reads the exact one.

Plain heuristics a user would try: ``least-work`` (least outstanding predicted work:
the running batch's remaining time plus the standalone work queued) and ``affinity``
(the replica already holding the request's compatibility key, so it can batch; else
least work). And ``rlsched``: the request's predicted finish on each replica (the queued
work due before it plus its own standalone time at that replica's layout, so a wide
replica is preferred for large shapes and a narrow one for small), replicas where it
still meets its SLO first, then the earliest predicted finish; a replica whose GPU cannot hold
the request alone is chosen only when none can. The work ahead of it is what rlsched's replica
policies run first: the savable requests due no later (a lost one, which can no longer meet its
SLO, waits until no savable one fits: ``rlsched.projection``'s "savable first").

Outstanding work is followed through each replica's journal (O(changes), not a scan of
the queue per arrival). A router spec is ``NAME[:ARG]`` (``random:SEED``).
"""

from __future__ import annotations

import importlib
import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from itertools import compress

import numpy as np

from rlsched.errors import ConfigError
from rlsched.policies.base import PolicySpec, make_policy, no_options, parse_spec, without_arguments
from rlsched.routing.load_index import LoadIndex
from rlsched.routing.spec import (
    CENTRAL_TEACHERS,
    ROUTER_KINDS,
    ROUTERS,
    TEACHERS,
    VIEW_OPTIONS,
    StageSpec,
    is_late,
    router_kind,
    split_pair,
    split_view,
)
from rlsched.routing.views import DEFAULT_VIEW, PUBLISH_DELAY_S, VIEWS, ViewRouter
from rlsched.sim.request import Request, RequestRecord
from rlsched.sim.stage import INF, Router, Stage
from rlsched.sim.view import JournalFollower, QueueView, ReplicaView, SchedulingPolicy, StageView


class QueueWork(JournalFollower):
    """Standalone work and requests per compatibility key waiting in one replica, kept in step
    with its journal; and the work due before a deadline (sorted by deadline)."""

    def __init__(self) -> None:
        super().__init__()
        self._clear()

    def _clear(self) -> None:
        self.work_s = 0.0
        self.keys: Counter[Hashable] = Counter()
        self._work: dict[int, tuple[float, float]] = {}
        """id -> (deadline, work) of every waiting request."""
        self._by_deadline: list[tuple[float, int]] = []
        self._works: list[float] = []
        """Parallel to ``_by_deadline``: a C-level slice sum gives the work due first."""
        self._weights: list[float] = []
        """Parallel to ``_by_deadline``: each request's class weight."""
        self._latest: list[float] = []
        """Parallel to ``_by_deadline``: each request's latest start (deadline - work; lost once past)."""
        self._sizes: list[float] = []
        """Every waiting request's work, sorted: the largest bounds which of them can be lost."""
        self._starts: list[float] = []
        """Every waiting request's latest start, sorted: none is lost while the first is not past."""

    def sync(self, state: QueueView) -> None:
        if state is not self._state or self._cursor != state.journal.end:  # read most often with nothing new
            super().sync(state)

    def _rebuild(self, state: QueueView) -> None:
        self._clear()
        for rec in state.waiting.values():
            self._add(rec)

    def due_before(self, deadline_s: float) -> float:
        """Standalone work of the waiting requests whose deadline is not later than ``deadline_s``
        (what a deadline-ordered replica policy runs first)."""
        return sum(self._works[:bisect_right(self._by_deadline, (deadline_s, _LAST))])

    def due_first(self, deadline_s: float, now: float) -> float:
        """Standalone work of the waiting requests due no later than ``deadline_s`` that can still meet
        their deadline started at ``now``: what a savable-first, deadline-ordered replica policy
        (``static``, the learned ones) runs before a request of that deadline. A lost request (its work
        ends past its deadline even started now) waits until no savable one fits."""
        by_deadline, works = self._by_deadline, self._works
        i1 = bisect_right(by_deadline, (deadline_s, _LAST))
        if not i1 or self._starts[0] >= now:  # none lost (the common case below overload)
            return sum(works[:i1])
        i0 = bisect_right(by_deadline, (now, _LAST))  # due by now: lost
        if i0 >= i1:
            return 0.0
        # a lost one is due before now + its work, so before now + the largest work waiting
        i2 = min(i1, max(i0, bisect_left(by_deadline, (now + self._sizes[-1], -1))))
        return sum(works[i2:i1]) + sum(compress(works[i0:i2], map(now.__le__, self._latest[i0:i2])))

    LEAST_FINISH_READS = 64
    """``least_finish`` reads at most this many requests (a deeper queue: its batch end alone)."""

    def least_finish(self, end_s: float, t0: float, theta: float, savable_first: bool = True) -> tuple[float, float]:
        """A lower bound of ``max(end_s, t) + due_first(d, t)`` (``due_before(d)``: not ``savable_first``) for
        every ``t >= t0`` and ``d >= theta``: the work due by ``theta`` counts while it is savable (its latest
        start not past), so the least is at ``t0`` or just as one of them is lost (``load_index``'s key of a
        replica whose batch ends at ``end_s``, -INF: none runs); and the first deadline after ``theta``."""
        base = end_s if end_s > t0 else t0
        by_deadline = self._by_deadline
        i1 = bisect_right(by_deadline, (theta, _LAST))
        later = by_deadline[i1][0] if i1 < len(by_deadline) else INF
        if not savable_first:
            return base + sum(self._works[:i1]), later
        if not i1 or i1 > self.LEAST_FINISH_READS:
            return base, later
        left = sorted((start, w) for start, w in zip(self._latest[:i1], self._works[:i1]) if start >= t0 and w > 0)
        rest = sum(w for _, w in left)
        least = base + rest
        for start, w in left:  # just after ``start`` that one is lost
            rest -= w
            at = (end_s if end_s > start else start) + rest
            if at < least:
                least = at
        return least, later

    def due_after(self, deadline_s: float) -> int:
        """How many waiting requests are due later than ``deadline_s`` (those a deadline-ordered
        replica policy runs after a request of that deadline: what it pushes back)."""
        return len(self._by_deadline) - bisect_right(self._by_deadline, (deadline_s, _LAST))

    def made_late(self, deadline_s: float, start_s: float, extra_s: float) -> float:
        """Class-weighted count of the waiting requests due after ``deadline_s`` that would finish
        in time, run in deadline order from ``start_s``, but not with ``extra_s`` more work ahead
        of them (the collateral of inserting a request of that deadline and standalone time)."""
        i = bisect_right(self._by_deadline, (deadline_s, _LAST))
        t, lost = start_s + sum(self._works[:i]), 0.0
        for (due, _), w, weight in zip(self._by_deadline[i:], self._works[i:], self._weights[i:]):
            t += w
            if t <= due < t + extra_s:
                lost += weight
        return lost

    def _add(self, rec: RequestRecord) -> None:
        self._remove(rec)  # a re-enqueue (preemption) replaces the entry
        rid, w = rec.request.id, rec.remaining_s
        self._work[rid] = (rec.deadline_s, w)
        self.work_s += w
        self.keys[rec.key] += 1
        i = bisect_left(self._by_deadline, (rec.deadline_s, rid))
        self._by_deadline.insert(i, (rec.deadline_s, rid))
        self._works.insert(i, w)
        self._weights.insert(i, rec.request.weight)
        self._latest.insert(i, rec.deadline_s - w)
        insort(self._sizes, w)
        insort(self._starts, rec.deadline_s - w)

    def _remove(self, rec: RequestRecord) -> None:
        rid = rec.request.id
        entry = self._work.pop(rid, None)
        if entry is None:
            return
        deadline, w = entry
        self.work_s -= w
        self.keys[rec.key] -= 1
        if not self.keys[rec.key]:
            del self.keys[rec.key]
        i = bisect_left(self._by_deadline, (deadline, rid))
        del self._by_deadline[i], self._works[i], self._weights[i], self._latest[i]
        del self._sizes[bisect_left(self._sizes, w)]
        del self._starts[bisect_left(self._starts, deadline - w)]


_LAST = 1 << 62
"""An id above every request id: ``(deadline, _LAST)`` sorts after every entry of that deadline."""


def backlog_s(sim: ReplicaView, work: QueueWork, now: float) -> float:
    """Seconds of work ahead on a replica: the running batch's remaining time plus what waits."""
    busy = sim.gpu_end_s
    return (busy - now if busy != INF else 0.0) + max(work.work_s, 0.0)


class _Followed:
    """A router that keeps a ``QueueWork`` per replica."""

    name = "followed"

    def reset(self, stage: StageView) -> None:
        self.work = [QueueWork() for _ in stage.replicas]
        self.rng = np.random.default_rng(stage.seed)

    def sync(self, stage: StageView) -> None:
        """Bring each replica's ``QueueWork`` up to its queue (before reading ``self.work``)."""
        for sim, work in zip(stage.replicas, self.work):
            work.sync(sim)


class RoundRobin:
    name = "round-robin"
    reads_state = False
    """Decides on nothing a replica holds: every view routes it alike (``make_router`` does not wrap it)."""

    def reset(self, stage: StageView) -> None:
        self._next = 0

    def route(self, request: Request, stage: StageView) -> int:
        r = self._next % len(stage.replicas)
        self._next = (self._next + 1) % len(stage.replicas)
        return r


class RandomRouter:
    name = "random"
    reads_state = False

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    def reset(self, stage: StageView) -> None:
        self.rng = np.random.default_rng(stage.seed if self.seed is None else self.seed)

    def route(self, request: Request, stage: StageView) -> int:
        return int(self.rng.integers(len(stage.replicas)))


class LeastQueue(_Followed):
    name = "least-queue"

    def route(self, request: Request, stage: StageView) -> int:
        lengths = [len(s.waiting) + len(s.running) for s in stage.replicas]
        low = min(lengths)
        ties = [i for i, n in enumerate(lengths) if n == low]
        return ties[0] if len(ties) == 1 else int(ties[int(self.rng.integers(len(ties)))])


class LeastWork(_Followed):
    name = "least-work"

    def route(self, request: Request, stage: StageView) -> int:
        self.sync(stage)
        now = stage.now
        loads = [backlog_s(s, w, now) for s, w in zip(stage.replicas, self.work)]
        return int(np.argmin(loads))


class Affinity(_Followed):
    name = "affinity"

    def route(self, request: Request, stage: StageView) -> int:
        self.sync(stage)
        now = stage.now
        holding = [i for i, (s, w) in enumerate(zip(stage.replicas, self.work))
                   if w.keys.get(request.key(s.step_mode), 0) or any(r.key == request.key(s.step_mode)
                                                                     for r in s.running)]
        pool = holding or range(len(stage.replicas))
        return min(pool, key=lambda i: (backlog_s(stage.replicas[i], self.work[i], now), i))


MANY_KINDS = 8
"""Above this many kinds of replica (cost models) ``RlschedRouter`` reads every replica (``_scan``): a bound
on each request's own time costs a visit per kind."""


class RlschedRouter(_Followed):
    """Where the request fits, savable first, then the earliest predicted finish (module docstring).

    A request's predicted finish on a replica: the running batch's remaining time, plus the
    standalone work queued there that runs before it (``QueueWork.due_first``: the savable requests
    due no later, as rlsched's replica policies — ``static``, the learned ones — run them), plus its
    own standalone time at that replica's layout. Measured on training seeds (8 replicas,
    ``default``'s profile, ``static`` replicas): total backlog instead of the work due first lost
    3-11 points at x1-x1.5; among replicas where it meets its SLO, the least-loaded instead of the
    earliest lost up to 4 points (``omni-mix`` x1.5), the tightest fit up to 11. Counting the lost
    requests due first too (plain deadline order, ``savable_first=False``: what this router did
    before 2026-12-04, and the proposer of learned routers of ``dit-route-obs/2``) lost 10-17 points
    on the Qwen-Image pools at x1.25-x3, 4-10 on azure-8gpu at x1.25-x3 and 8-20 on video-8gpu at
    x2-x3 (training seeds 0-2, ``static``, the deployed view): in overload every queue holds lost
    requests due early, every replica looked hopeless and routing fell back to the earliest finish."""

    name = "rlsched"

    def __init__(self, savable_first: bool = True) -> None:
        self.savable_first = savable_first
        self.index: LoadIndex | None = None
        """The replicas by load (``load_index``), built at the first decision after a reset."""

    def _due(self, work: QueueWork, deadline_s: float, now: float) -> float:
        return work.due_first(deadline_s, now) if self.savable_first else work.due_before(deadline_s)

    def _unseen(self, sim: ReplicaView, deadline_s: float, now: float) -> float:
        """Work sent to ``sim`` that no state it published reflects yet and ``_due`` left out (due later, or
        lost), while the view sees ``sim`` free (nothing running, or its batch past its predicted end): the
        oldest such send may have started there already, so it is ahead whatever its deadline (those sent
        after it wait for it, in deadline order). Without it, arrivals inside one publication delay all saw
        an idle replica that had just been sent a request due later, and joined it (the lowest index among
        equals): 10 points lost to least-queue at 1,024 replicas. Sent to a replica seen busy, a request
        waits for that batch's end and runs in deadline order like the rest (counting every unacknowledged
        send ahead there lost 8 points at x1.25, 128 replicas)."""
        rec = sim.started_unseen
        if rec is None:
            return 0.0
        if rec.deadline_s > deadline_s or (self.savable_first and rec.deadline_s - rec.remaining_s < now):
            return rec.remaining_s
        return 0.0

    def reset(self, stage: StageView) -> None:
        super().reset(stage)
        self._records: dict[tuple[int, Hashable], tuple[object, RequestRecord, bool]] = {}
        if self.index is not None:
            self.index.close()
        self.index = None

    def _shape(self, i: int, sim: QueueView, request: Request, key: Hashable) -> tuple[RequestRecord, bool]:
        """A record of ``request``'s shape at replica ``i`` and whether that replica's GPU holds it alone
        (cost figures and memory depend on the key only, at the replica's cost: a new calibration, a new one)."""
        shape = self._records.get((i, key))
        if shape is None or shape[0] is not sim.cost:
            rec = sim.cost.record(request)
            shape = self._records[(i, key)] = (sim.cost, rec, sim.cost.fits([rec]))
        return shape[1], shape[2]

    def route(self, request: Request, stage: StageView) -> int:
        index = self.index
        if index is None or index.replicas is not stage.replicas:
            if index is not None:
                index.close()
            index = self.index = LoadIndex(stage.replicas, self._least_finish)
        best = self._scan(request, stage) if len(index.kinds) > MANY_KINDS else self._search(request, stage, index)
        index.sent(best)
        return best

    def _least_finish(self, i: int, sim: ReplicaView, end: float, t0: float, theta: float) -> tuple[float, float]:
        """``LoadIndex``'s floor: replica ``i``'s batch end (``end``, -INF: none runs) with the work queued behind
        it that runs before any request due no earlier than ``theta``, at its least from ``t0`` on
        (``QueueWork.least_finish``)."""
        if not sim.waiting:  # nothing queued (the common case below saturation)
            return (end if end > t0 else t0), INF
        work = self.work[i]
        work.sync(sim)
        return work.least_finish(end, t0, theta, self.savable_first)

    def _score(self, i: int, sim: ReplicaView, request: Request, now: float,
               deadline: float) -> tuple[bool, bool, float, int]:
        """The request's predicted finish on replica ``i``, as the key ``choose`` ranks by."""
        self.work[i].sync(sim)
        rec, fits, busy, due = self._parts(i, sim, request, now, deadline)
        finish = now + busy + due + rec.work_s
        return (not fits, finish > deadline, finish, i)

    def _parts(self, i: int, sim: ReplicaView, request: Request, now: float,
               deadline: float) -> tuple[RequestRecord, bool, float, float]:
        """The terms of the request's predicted finish on replica ``i`` (its queue synced): its record there,
        whether it fits, the time until that replica is free of what runs (or may run unseen), the work due
        before it (``predict`` and ``_score`` both add them up)."""
        rec, fits = self._shape(i, sim, request, request.key(sim.step_mode))
        end = sim.gpu_end_s
        busy = end - now if end != INF else 0.0
        busy += self._unseen(sim, deadline, now)
        return rec, fits, busy, self._due(self.work[i], deadline, now)

    def _search(self, request: Request, stage: StageView, index: LoadIndex) -> int:
        """``_scan``'s choice, reading a few replicas (``load_index``): the first empty one of each kind,
        then the others by when their batch ends with the work queued behind it, until even the least they
        could predict is worse."""
        now, deadline, sims = stage.now, request.arrival_s + request.slo_s, stage.replicas
        best: tuple[bool, bool, float, int] | None = None
        index.refresh(now, deadline - now)
        for i in index.empty_candidates():
            score = self._score(i, sims[i], request, now, deadline)
            if best is None or score < best:
                best = score
        own, fits = INF, False
        for members in index.kinds.values():
            i = next(iter(members))
            rec, fit = self._shape(i, sims[i], request, request.key(sims[i].step_mode))
            own, fits = min(own, rec.work_s), fits or fit
        for key, i in index.by_end():
            least = (key if key > now else now) + own
            if best is not None:
                bound = (not fits, least > deadline, least)
                if bound > best[:3]:
                    break
                if bound == best[:3] and i > best[3]:  # at best a tie, lost on the index
                    continue
            score = self._score(i, sims[i], request, now, deadline)
            if best is None or score < best:
                best = score
        assert best is not None
        return best[3]

    def _scan(self, request: Request, stage: StageView) -> int:
        """Every replica read (a pool of many kinds: each replica calibrated its own cost model)."""
        now, deadline = stage.now, request.arrival_s + request.slo_s
        return min(self._score(i, sim, request, now, deadline) for i, sim in enumerate(stage.replicas))[3]

    def predict(self, request: Request, stage: StageView) -> list[Prediction]:
        """The request's predicted finish on every replica (the queues synced by the caller)."""
        now, deadline = stage.now, request.arrival_s + request.slo_s
        out = []
        for i, sim in enumerate(stage.replicas):
            rec, fits, busy, due = self._parts(i, sim, request, now, deadline)
            out.append(Prediction(rec, busy, due, now + busy + due + rec.work_s, fits))
        return out

    @staticmethod
    def choose(request: Request, predictions: list[Prediction]) -> int:
        """Where it fits, savable first, then the earliest predicted finish, then the lowest index."""
        deadline = request.arrival_s + request.slo_s
        return min(range(len(predictions)), key=lambda i: (not predictions[i].fits, predictions[i].finish_s > deadline,
                                                           predictions[i].finish_s, i))


@dataclass(frozen=True, slots=True)
class Prediction:
    """What ``RlschedRouter`` predicts for a request on one replica."""

    record: RequestRecord
    """The request's shape there (standalone work, memory at that replica's layout)."""
    busy_s: float
    """Remaining time of the running batch."""
    due_s: float
    """Standalone work queued there that runs before the request (``QueueWork.due_first``)."""
    finish_s: float
    fits: bool = True
    """That replica's GPU holds the request alone (memory at its layout)."""


round_robin = without_arguments(RoundRobin, "router")
least_queue = without_arguments(LeastQueue, "router")
least_work = without_arguments(LeastWork, "router")
affinity = without_arguments(Affinity, "router")
rlsched_router = without_arguments(RlschedRouter, "router")


def random_router(spec: PolicySpec) -> RandomRouter:
    no_options(spec)
    if spec.arg and not spec.arg.isdigit():
        raise ConfigError(f"router {spec}", "random takes a seed, an integer >= 0")
    return RandomRouter(int(spec.arg) if spec.arg else None)


def make_router(spec: str, policy: str | None = None) -> Router:
    """A router from its spec (``round-robin``, ``random:7``, ``rlsched``); a teacher (``lookahead``,
    ``hindsight``) also needs the replica ``policy`` spec it simulates.

    Every router takes ``;view=engine|ledger|replica`` (``router_views.VIEWS``; default ``engine``: what
    the router deployed in vLLM-Omni sees, the replicas' published states heard ``delay_ms`` late, option
    ``;delay_ms=``, default 10) — except the teachers, which decide on forks of the replicas' true state
    (``view=replica`` only: ceilings)."""
    parsed, view, delay_s = _view_options(parse_spec(spec))
    if parsed.name in TEACHERS:
        if policy is None:
            raise ConfigError("router", f"{parsed.name} simulates the replica policy: give it as POLICY@{spec}")
        if view != "replica":
            raise ConfigError(f"router {spec!r}", f"{parsed.name} decides on forks of the replicas' true state "
                                                  "(a ceiling): it takes view=replica only")
        teacher: Callable[[PolicySpec, str], Router] = _load(TEACHERS[parsed.name])
        return teacher(parsed, policy)
    target = ROUTERS.get(parsed.name)
    if target is None:
        raise ConfigError("router", f"unknown router {spec!r} (known: {', '.join(sorted([*ROUTERS, *TEACHERS]))}, "
                                    "or central for late binding)")
    factory: Callable[[PolicySpec], Router] = _load(target)
    router = factory(parsed)
    if view == "replica" or not getattr(router, "reads_state", True):
        return router
    return ViewRouter(router, view, delay_s)


def _view_options(spec: PolicySpec) -> tuple[PolicySpec, str, float]:
    """``spec`` without its ``view`` and ``delay_ms`` options, and their values (checked)."""
    bare, given = split_view(spec)
    view = given.get("view")
    if view is None:
        view = "replica" if spec.name in TEACHERS else DEFAULT_VIEW
    if view not in VIEWS:
        raise ConfigError(f"router {spec} option view", f"one of {', '.join(VIEWS)}, not {view!r}")
    delay = given.get("delay_ms")
    delay_s = PUBLISH_DELAY_S
    if delay is not None:
        try:
            delay_s = float(delay) / 1e3
        except ValueError:
            delay_s = math.nan
        if not 0 <= delay_s <= 3600:
            raise ConfigError(f"router {spec} option delay_ms", f"milliseconds in [0, 3600000], not {delay!r}")
        if view != "engine":
            raise ConfigError(f"router {spec} option delay_ms", "only with view=engine (the published state's delay)")
    return bare, view, delay_s


def _load(target: str) -> Callable:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


LATE_REPLICA_POLICY = "fifo"
"""Late binding: what each replica runs of the batches the central queue hands it (``run_spec``, the teachers'
forks)."""


def central_policies(router: str, policy: str) -> Callable[[], SchedulingPolicy]:
    """Late binding: what makes the central policy of each replica kind — ``policy`` itself (``@central``)
    or a central teacher over it; built once here, so a bad spec fails before a run."""
    if router == "central":
        make_policy(policy)
        return lambda: make_policy(policy)
    parsed = parse_spec(router)
    teacher: Callable[[PolicySpec, str], SchedulingPolicy] = _load(CENTRAL_TEACHERS[parsed.name])
    teacher(parsed, policy)
    return lambda: teacher(parsed, policy)


def check_spec(spec: StageSpec | str) -> None:
    """Build ``POLICY[@ROUTER]``'s parts once (reads any file they name), so a typo or a missing
    checkpoint fails before a grid runs."""
    stage = StageSpec.of(spec)
    if is_late(stage.router):
        central_policies(stage.router, stage.policy)
    else:
        make_policy(stage.policy)
        make_router(stage.router, stage.policy)


def run_spec(stage: Stage, spec: StageSpec | str) -> Stage:
    """Run ``POLICY@ROUTER`` on ``stage``: that policy on every replica behind that router, or —
    ``@central``, late binding — that policy picking batches from one queue for replicas that run
    what they are handed (``fifo``; ``@central-lookahead``: late binding's teacher over that policy).
    Returns the finished stage."""
    parsed = StageSpec.of(spec)
    policy, router = parsed.policy, parsed.router
    if is_late(router):
        return stage.run([make_policy(LATE_REPLICA_POLICY) for _ in stage.replicas],
                         central=central_policies(router, policy))
    return stage.run([make_policy(policy) for _ in stage.replicas], make_router(router, policy))


__all__ = ["CENTRAL_TEACHERS", "LATE_REPLICA_POLICY", "ROUTERS", "ROUTER_KINDS", "TEACHERS", "VIEW_OPTIONS", "Affinity",
           "check_spec", "LeastQueue", "LeastWork", "QueueWork", "RandomRouter", "Prediction", "RlschedRouter",
           "RoundRobin", "central_policies", "is_late", "make_router", "router_kind", "run_spec", "split_pair",
           "split_view"]
