"""An index over a stage's replicas by load, so a router's decision at a thousand replicas visits a few.

``RlschedRouter`` predicts a request's finish on a replica as ``now + busy + ahead + own``: the running
batch's remaining time, the work queued there that runs first, and the request's own time at that
replica's layout — each part at least 0. So a replica holding nothing (nothing running, nothing queued:
**empty**) predicts exactly ``now + own``, the least any replica of its kind (its cost model) can, and of
the empty replicas of a kind the lowest index wins every tie. Every other replica's finish is at least
``max(end, now) + own``, ``end`` being when its running batch ends (``gpu_end_s``; a free one's is
``now``). ``LoadIndex`` keeps the empty replicas per kind (lowest index first) and the others sorted by a
key at most that bound less ``own``: a decision reads the first empty replica of each kind, then the others
in key order until the bound passes the best prediction found — the same choice as reading them all.

With a ``floor`` (``RlschedRouter``'s) the key counts the queued work too: the least ``max(end, t) + due``
of any time ``t`` from the key's filing on, ``due`` being the work waiting there that is due by
``theta`` and still savable at ``t`` (``QueueWork.least_finish``) — what runs before any request due no
earlier than ``theta``. ``theta`` is the filing's clock plus ``slack_s``, a floor on how long after the
clock a routed request is due (lowered, and every key filed again, when one comes due sooner); a replica
holding work due later is filed again once the clock comes within ``slack_s`` of it. So at a
saturated fleet, where every batch end is near and what decides is the work queued behind it, the keys
still part the few replicas that may win from the many that cannot. Work sent to a replica after its key
was filed only raises what it can predict: a key stays a bound until the replica changes again.

The index follows each replica through its ``on_change``, ``on_finish`` and ``on_calibrate`` hooks (the
simulator's after its running batch changed, a request ended, a rejected one included, or its cost was
calibrated; the router's view after a state taken, a fall back, a request resolved) and the router's own
sends (``sent``); a replica so touched is filed again at the next read (``refresh``), once however often it
changed. A replica that changed unseen is caught where it matters: an empty candidate is checked before it
is used, and every other is read in full.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from functools import partial
from heapq import heappop, heappush

from rlsched.sim.view import ReplicaView

INF = math.inf


def is_empty(sim: ReplicaView) -> bool:
    """Nothing running, nothing queued: a request sent there starts at once."""
    return sim.gpu_end_s == INF and not sim.waiting and not sim.running


SLACK_MARGIN = 0.01
"""A lowered ``slack_s`` goes this share of the new request's slack (plus 1 ms) below it, so that requests
a few ms apart in when they are routed (the engine's clock runs on) do not each file every key again."""
KEY_SLACK = 1e-9
"""Each key is lowered by this share of its size (and as many seconds): the router adds the same terms in
another order, and a bound a rounding above an exact tie would drop the lower-index replica."""

Floor = Callable[[int, ReplicaView, float, float, float], tuple[float, float]]
"""``floor(i, replica, end, t0, theta)``: the least ``max(end, t) + due`` of replica ``i`` (its running batch
ending at ``end``, -INF: none runs) at any ``t >= t0`` for a request due no earlier than ``theta`` (module
docstring), and the earliest deadline of the work waiting there that it left out (due after ``theta``;
INF: none)."""


class LoadIndex:
    """The replicas of one stage by load (module docstring)."""

    def __init__(self, replicas: Sequence[ReplicaView], floor: Floor | None = None) -> None:
        self.replicas = replicas
        self.floor = floor
        self.now = -INF
        """The clock of the last ``refresh``: keys filed since hold from then on."""
        self.slack_s = INF
        """Keys count the work due by their filing's clock plus this (INF: they count none)."""
        self._dirty: set[int] = set()
        """Replicas touched since they were last filed."""
        self._later: list[tuple[float, int]] = []
        """(when, replica): a heap of the clocks at which a replica's key may count more of its work (its
        first request left out comes within ``slack_s``); an entry whose replica was filed again since is
        spent harmlessly (it files it once more)."""
        self._wake = [INF] * len(replicas)
        """Each replica's earliest entry in ``_later`` not yet spent (INF: none)."""
        self._key: list[float | None] = [None] * len(replicas)
        """Each replica's entry in ``_busy`` (its key: the running batch's end when last seen, -INF: free, or
        with a ``floor`` that end with the work queued behind it), None while it is filed empty."""
        self._busy: list[tuple[float, int]] = []
        self._empty: dict[int, list[int]] = {}
        """Kind (the cost model's id) -> the empty replicas of that kind, a heap of indices (lazily pruned)."""
        self._filed_empty = [False] * len(replicas)
        self._heaped: list[int | None] = [None] * len(replicas)
        """The kind whose heap holds an entry of each replica (None: none does)."""
        self._kind: list[int] = [0] * len(replicas)
        self.kinds: dict[int, set[int]] = {}
        """Kind -> its replicas (a decision reads one of each for the least own time of a request)."""
        self._hooks: list[tuple[list[Callable], Callable]] = []
        for i, sim in enumerate(replicas):
            self._kind[i] = id(sim.cost)
            self.kinds.setdefault(self._kind[i], set()).add(i)
            self._file(i)
            hook = partial(self._mark, i)
            for hooks in self._hook_lists(sim):
                hooks.append(hook)
                self._hooks.append((hooks, hook))

    def _hook_lists(self, sim: ReplicaView) -> list[list]:
        """Where replica ``sim`` tells of its changes: its running batch; with a ``floor`` also every request
        that ended (a rejected one leaves the queue with no batch changed) and, in the simulator, a new
        calibration (its queued work re-costed, in step mode at a step's end that changed nothing else)."""
        if self.floor is None:
            return [sim.on_change]
        calibrated = getattr(sim, "on_calibrate", None)  # the simulator's own; a view hears it in a state
        return [sim.on_change, sim.on_finish, *([calibrated] if calibrated is not None else [])]

    def _mark(self, i: int, _what: object = None) -> None:
        self._dirty.add(i)

    def refresh(self, now: float, slack_s: float) -> None:
        """Before a decision at ``now`` for a request due ``slack_s`` after it: every touched replica filed
        again; all of them when the request is due sooner than the keys assume, or the clock went back."""
        if self.floor is not None and (slack_s < self.slack_s or now < self.now):
            if slack_s < self.slack_s:
                self.slack_s = slack_s - SLACK_MARGIN * abs(slack_s) - 1e-3
            self._dirty.update(range(len(self.replicas)))
        self.now = now
        later = self._later
        while later and later[0][0] <= now:
            at, i = heappop(later)
            if at == self._wake[i]:
                self._wake[i] = INF
            self._dirty.add(i)
        self._flush()

    def _flush(self) -> None:
        if self._dirty:
            for i in self._dirty:  # in any order: each lands where its key and index put it
                self._touched(i)
            self._dirty.clear()

    def close(self) -> None:
        """Stop following the replicas (the router was reset)."""
        for hooks, hook in self._hooks:
            if hook in hooks:
                hooks.remove(hook)
        self._hooks = []

    def _touched(self, i: int, _sim: object = None) -> None:
        self._unfile(i)
        kind = id(self.replicas[i].cost)
        if kind != self._kind[i]:
            members = self.kinds[self._kind[i]]
            members.discard(i)
            if not members:
                del self.kinds[self._kind[i]]
            self._kind[i] = kind
            self.kinds.setdefault(kind, set()).add(i)
        self._file(i)

    def _file(self, i: int) -> None:
        sim = self.replicas[i]
        end = sim.gpu_end_s
        if end == INF and not sim.waiting and not sim.running:  # is_empty
            self._filed_empty[i] = True
            kind = self._kind[i]
            if self._heaped[i] != kind:
                self._heaped[i] = kind
                heappush(self._empty.setdefault(kind, []), i)
            return
        self._filed_empty[i] = False
        key = -INF if end == INF else end
        if self.floor is not None and self.slack_s != INF:
            key, due = self.floor(i, sim, key, self.now, self.now + self.slack_s)
            key -= KEY_SLACK * (1.0 + abs(key))
            at = due - self.slack_s
            if at < self._wake[i]:
                self._wake[i] = at
                heappush(self._later, (at, i))
        self._key[i] = key
        insort(self._busy, (key, i))

    def _unfile(self, i: int) -> None:
        key = self._key[i]
        if key is not None:
            busy = self._busy
            del busy[bisect_left(busy, (key, i))]
            self._key[i] = None
        self._filed_empty[i] = False

    def sent(self, i: int) -> None:
        """A request was sent to replica ``i``: it holds work now."""
        if self.floor is not None:  # filed again at the next decision, the request in its queue by then
            self._dirty.add(i)
            return
        if self._key[i] is None:
            self._touched(i)
            if self._key[i] is None:  # not in its queue yet (the stage delivers it after the decision)
                self._filed_empty[i] = False
                self._key[i] = -INF
                insort(self._busy, (-INF, i))

    def empty_candidates(self) -> list[int]:
        """The lowest-index empty replica of each kind (each checked: one that changed unseen is re-filed,
        and the kinds are read again)."""
        self._flush()
        while True:
            out, refiled = [], False
            for kind in list(self._empty):
                heap = self._empty[kind]
                while heap:
                    i = heap[0]
                    current = self._filed_empty[i] and self._kind[i] == kind
                    if current and is_empty(self.replicas[i]) and id(self.replicas[i].cost) == kind:
                        out.append(i)
                        break
                    heappop(heap)
                    if self._heaped[i] == kind:
                        self._heaped[i] = None
                    if current:  # changed unseen
                        self._touched(i)
                        refiled = True
                if not heap:
                    del self._empty[kind]
            if not refiled:
                return out

    def by_end(self) -> list[tuple[float, int]]:
        """The replicas not filed empty, ``(key, index)`` in that order (the key: the end when last seen,
        or with a ``floor`` that end with the work queued behind it; read it before the next change)."""
        self._flush()
        return self._busy


__all__ = ["Floor", "LoadIndex", "is_empty"]
