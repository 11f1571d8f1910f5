"""Late binding's central queue (``POLICY@central``), written once for both drivers: the simulator's ``Stage``
(``rlsched.sim.stage``) and the engine's ``CentralStagePool`` (``rlsched.integrations.vllm_omni.central_pool``).

Requests wait in one central queue and are bound to a replica only when it takes its next batch
(``takes_next_batch``). The queue keeps one view per distinct replica kind (cost model and serving config:
``kind_key``), each with its own instance of the central policy, all holding the same waiting requests; a batch
handed out, or a request rejected, leaves every view. ``CentralQueue`` owns that rule — the kinds, parking, which
free replicas a dispatch visits and in what order, holding a replica idle, dropping a request from the other
views, adopting a replica's calibrated cost — over a small ``Hub`` protocol that each driver's view implements
(the simulator's: a ``Simulator`` that never runs a batch; the engine's: a ``PluginState``). The drivers keep
their own mechanics: the ``Stage`` its event loop and forks, the pool asyncio, the sends, the guard and the
orchestrator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Sequence
from heapq import heappop, heappush
from typing import Any, Protocol

from rlsched.sim.cost import CostModel

INF = math.inf
CENTRAL_LEAD_S = 0.05
"""Late binding, request mode: how long before a replica's running wave is predicted to end the central
queue sends it its next batch (wall-clock seconds at time scale 1). It covers the send from the API
process to the replica (a few ms on one host) and the dispatcher's wake-up; the engine's central pool
uses the same rule with this lead (``extras.rlsched_router.lead_ms``)."""


def takes_next_batch(queued: int, running: bool, end_s: float, now: float, step_mode: bool,
                     lead_s: float = CENTRAL_LEAD_S) -> bool:
    """The one rule of late binding, for the simulator and the engine's central pool alike: a replica
    takes its next batch from the central queue when nothing is queued there and it is idle, or — in
    request mode — its running wave is predicted to end within ``lead_s`` (one wave ahead). A step-mode
    replica takes requests at every step boundary and runs minutes-long requests: only when idle."""
    if queued:
        return False
    if not running:
        return True
    return not step_mode and end_s - now <= lead_s


def next_batch_s(queued: int, running: bool, end_s: float, step_mode: bool, lead_s: float = CENTRAL_LEAD_S) -> float:
    """When a busy replica comes to take its next batch by ``takes_next_batch``'s rule (its wave's predicted
    end less the lead); INF when the rule will not make it take one as its wave runs on (something queued,
    step mode, nothing running)."""
    if queued or step_mode or not running or end_s == INF:
        return INF
    return end_s - lead_s


def next_batch(queued: int, running: bool, end_s: float, now: float, step_mode: bool,
               lead_s: float = CENTRAL_LEAD_S) -> tuple[bool, float]:
    """Whether a replica takes its next batch now (``takes_next_batch``), and if not, when it comes to
    (``next_batch_s``): what a driver answers ``CentralQueue.visit`` for a replica it reads the state of."""
    if takes_next_batch(queued, running, end_s, now, step_mode, lead_s):
        return True, now
    return False, next_batch_s(queued, running, end_s, step_mode, lead_s)


def kind_key(cost: CostModel, serving: Hashable) -> tuple[int, Hashable]:
    """The one key of a replica kind: replicas of one cost model object and one serving config share a view of
    the central queue (and a central policy). The engine's stage has one serving config, so there the cost
    model alone tells kinds apart."""
    return id(cost), serving


class Hub(Protocol):
    """One replica kind's view of the central queue: what its central policy decides on. ``Simulator`` (a
    simulator that never runs a batch itself) implements it; the engine's ``CentralView`` (a ``PluginState``)
    does too."""

    now: float
    waiting: Collection[Any]

    @property
    def needs_decision(self) -> bool:
        """Whether the kind's policy decides for a free replica now (False: it waits for the next event)."""
        ...

    def receive(self, item: Any, now: float) -> None:
        """A request parked at ``now`` joins the tail of this view."""
        ...

    def release(self, ids: Iterable[Any]) -> list[Any]:
        """Waiting requests leave this view (handed out, rejected, gone): their records."""
        ...

    def wake(self) -> None:
        """A replica of this kind is free: decide again (read the clock, drop a pause)."""
        ...

    def adopt_cost(self, cost: CostModel) -> None:
        """Decide on ``cost`` from now on (a replica of this kind published a new calibration)."""
        ...


class _Candidates:
    """Late binding: the replicas that may take the central queue's next batch, lowest first — a superset of
    those ``takes_next_batch`` lets (each is checked when visited), so that a dispatch reads the replicas that
    were free, or whose state or clock has moved since (an event, a batch, a hold or a wave's lead running
    out), not the whole fleet: at 1,024 replicas under overload the scan read ~860 replicas a dispatch and
    took three quarters of the run (issue 50). A replica found not free leaves until it is ``mark``-ed (its
    state moved: the stage marks every replica it touches) or its timer (``at``: a hold's end, its wave's
    end less the lead) comes due."""

    def __init__(self, replicas: Iterable[int]) -> None:
        self._heap = sorted(replicas)  # ascending: already a heap
        self._in = set(self._heap)
        self._timers: list[tuple[float, int]] = []

    def mark(self, r: int) -> None:
        if r not in self._in:
            self._in.add(r)
            heappush(self._heap, r)

    def at(self, t: float, r: int) -> None:
        """Mark ``r`` again at ``t`` (a little before: a timer early by rounding is checked, one late is not)."""
        heappush(self._timers, (t - 1e-9 * max(1.0, abs(t)), r))

    def due(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            self.mark(heappop(timers)[1])

    def pop(self) -> int | None:
        if not self._heap:
            return None
        r = heappop(self._heap)
        self._in.discard(r)
        return r


class CentralQueue:
    """The central queue of late binding (see the module docstring): its views (``views``, one per replica kind,
    in order of each kind's first replica) and the replicas it serves, by index (the simulator's replica, the
    engine's slot)."""

    def __init__(self) -> None:
        self.views: list[Any] = []
        """One ``Hub`` per replica kind."""
        self._kind: dict[int, int] = {}
        """Replica -> its kind's index in ``views``."""
        self._shipped: list[tuple[CostModel, Hashable]] = []
        """Per view, the cost model and serving config its kind was keyed on (``open`` keeps views of the same)."""
        self._held_until: dict[int, float] = {}
        """Per replica, until when a central decision holds it idle (``hold``)."""
        self._adopted: dict[int, int] = {}
        """Per replica, the calibration version its kind's view last adopted from it (``adopt``)."""
        self._candidates = _Candidates(())
        self._woken: set[int] = set()
        """The kinds whose view this dispatch has woken."""

    # ----------------------------------------------------------------- kinds
    def open(self, replicas: Iterable[tuple[int, CostModel, Hashable]], make_view: Callable[[int], Any]) -> bool:
        """The replicas served, each ``(index, cost, serving)``: their kinds by ``kind_key``, and a view per kind
        made by ``make_view(its first replica)``. Views of the same kinds as before are kept (returns False);
        otherwise every view is made afresh (True) and adoptions start over."""
        keys: dict[tuple[int, Hashable], int] = {}
        shipped: list[tuple[CostModel, Hashable]] = []
        firsts: list[int] = []
        self._kind = {}
        for r, cost, serving in replicas:
            k = self._kind[r] = keys.setdefault(kind_key(cost, serving), len(keys))
            if k == len(firsts):
                firsts.append(r)
                shipped.append((cost, serving))
        if len(shipped) == len(self._shipped) and all(
                c is old_c and s == old_s for (c, s), (old_c, old_s) in zip(shipped, self._shipped)):
            return False
        self._shipped, self._adopted = shipped, {}
        self.views = [make_view(r) for r in firsts]
        return True

    def kind(self, r: int) -> int:
        """Replica ``r``'s kind: its view's index in ``views``."""
        return self._kind[r]

    def fork(self, fork_view: Callable[[Any], Any]) -> CentralQueue:
        """A copy of the present (the views forked by ``fork_view``, the kinds and holds copied); its candidates
        start afresh when its driver opens it."""
        out = CentralQueue()
        out.views = [fork_view(view) for view in self.views]
        out._kind, out._shipped, out._held_until = dict(self._kind), list(self._shipped), dict(self._held_until)
        return out

    # ------------------------------------------------------------- requests
    def park(self, item: Any, now: float) -> None:
        """A new request waits centrally: it joins every view."""
        for view in self.views:
            view.receive(item, now)

    def hand_out(self, k: int, ids: Sequence[Any]) -> list[Any]:
        """``ids``, decided in view ``k``, leave the queue (bound to a replica): their records in view ``k``."""
        recs = self.views[k].release(ids)
        self.drop_elsewhere(k, ids)
        return recs

    def drop_elsewhere(self, k: int | None, ids: Sequence[Any]) -> None:
        """Requests that left view ``k`` (handed out or rejected) leave every other view (``k`` None: every view)."""
        for j, other in enumerate(self.views):
            if j != k:
                other.release(ids)

    def adopt(self, r: int, cost: CostModel, version: int | None = None) -> None:
        """Replica ``r`` calibrated its cost: its kind's view decides on ``cost`` from now on. With ``version``
        (a replica's published calibration, heard again and again), only once per version of that replica."""
        k = self._kind.get(r)
        if k is None or k >= len(self.views):
            return
        if version is not None:
            if self._adopted.get(r, 0) == version:
                return
            self._adopted[r] = version
        self.views[k].adopt_cost(cost)

    # -------------------------------------------------------------- dispatch
    def reset_candidates(self, replicas: Iterable[int]) -> None:
        """Every one of ``replicas`` a candidate of the next dispatch (a run opens)."""
        self._candidates = _Candidates(replicas)

    def mark(self, r: int) -> None:
        """Replica ``r``'s state moved: the next dispatch visits it."""
        self._candidates.mark(r)

    def hold(self, r: int, until: float) -> None:
        """Keep replica ``r`` idle until ``until``: no dispatch visits it before then (the others go on)."""
        self._held_until[r] = until

    def visit(self, now: float, state: Callable[[int], tuple[bool, float]], start: int = 0, resumed: bool = False,
              among: Iterable[int] | None = None) -> Iterator[int]:
        """One dispatch at ``now``: the replicas that take the queue's next batch, lowest first, while a request
        waits — each one the driver then serves (``view_for``, its decision, ``hand_out``) before the next is
        read. ``state(r)``: whether ``r`` takes its next batch now and if not, when it comes to (``next_batch``;
        INF: not by a timer, only when its state moves). Visited: the candidates (those ``mark``-ed, or whose
        timer came due) or, with ``among``, exactly those (a scan, no timers kept). A fork goes on from replica
        ``start``, its kind's view woken already (``resumed``); the lower ones wait for the next dispatch."""
        candidates = self._candidates if among is None else _Candidates(among)
        self._woken = {self._kind[start]} if resumed else set()
        keep: list[int] = []
        candidates.due(now)
        try:
            while self.views[0].waiting:
                r = candidates.pop()  # lowest first, as a scan of every replica would visit them
                if r is None:
                    break
                if r < start:
                    keep.append(r)
                    continue
                held = self._held_until.get(r, -INF)
                if now < held:
                    candidates.at(held, r)
                    continue
                free, due = state(r)
                if not free:
                    if due != INF:
                        candidates.at(due, r)
                    continue
                keep.append(r)  # free now: it stays a candidate whatever this dispatch gives it
                yield r
        finally:
            for r in keep:
                candidates.mark(r)

    def view_for(self, r: int, now: float) -> tuple[int, Any]:
        """Replica ``r``'s kind and view, during a dispatch: a replica of the kind is free, so the view is woken
        (at ``now``; once a dispatch) and its policy decides again, as after any event."""
        k = self._kind[r]
        view = self.views[k]
        if k not in self._woken:
            self._woken.add(k)
            view.now = now
            view.wake()
        return k, view


__all__ = ["CENTRAL_LEAD_S", "CentralQueue", "Hub", "kind_key", "next_batch", "next_batch_s", "takes_next_batch"]
