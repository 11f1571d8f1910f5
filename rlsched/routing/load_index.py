"""An index over a stage's replicas by load, so a router's decision at a thousand replicas visits a few.

``RlschedRouter`` predicts a request's finish on a replica as ``now + busy + ahead + own``: the running
batch's remaining time, the work queued there that runs first, and the request's own time at that
replica's layout — each part at least 0. So a replica holding nothing (nothing running, nothing queued:
**empty**) predicts exactly ``now + own``, the least any replica of its kind (its cost model) can, and of
the empty replicas of a kind the lowest index wins every tie. Every other replica's finish is at least
``max(end, now) + own``, ``end`` being when its running batch ends (``gpu_end_s``; a free one's is
``now``). ``LoadIndex`` keeps the empty replicas per kind (lowest index first) and the others sorted by
``end``: a decision reads the first empty replica of each kind, then the others in order of ``end`` until
that bound passes the best prediction found — the same choice as reading them all.

The index follows each replica through its ``on_change`` hooks (the simulator's after its running batch
changed; the router's view after a state taken, a fall back, a request resolved) and the router's own
sends (``sent``). A replica that changed unseen is caught where it matters: an empty candidate is checked
before it is used, and every other is read in full.
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


class LoadIndex:
    """The replicas of one stage by load (module docstring)."""

    def __init__(self, replicas: Sequence[ReplicaView]) -> None:
        self.replicas = replicas
        self._key: list[float | None] = [None] * len(replicas)
        """Each replica's entry in ``_busy`` (its running batch's end when last seen, -INF: free), None
        while it is filed empty."""
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
            hook = partial(self._touched, i)
            sim.on_change.append(hook)
            self._hooks.append((sim.on_change, hook))

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
        if is_empty(sim):
            self._filed_empty[i] = True
            kind = self._kind[i]
            if self._heaped[i] != kind:
                self._heaped[i] = kind
                heappush(self._empty.setdefault(kind, []), i)
            return
        self._filed_empty[i] = False
        end = sim.gpu_end_s
        key = -INF if end == INF else end
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
        if self._key[i] is None:
            self._touched(i)
            if self._key[i] is None:  # not in its queue yet (the stage delivers it after the decision)
                self._filed_empty[i] = False
                self._key[i] = -INF
                insort(self._busy, (-INF, i))

    def empty_candidates(self) -> list[int]:
        """The lowest-index empty replica of each kind (each checked: one that changed unseen is re-filed,
        and the kinds are read again)."""
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
        """The replicas not filed empty, ``(end when last seen, index)`` in that order (read it before the
        next change)."""
        return self._busy


__all__ = ["LoadIndex", "is_empty"]
