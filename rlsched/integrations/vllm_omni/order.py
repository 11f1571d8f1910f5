"""Where an id sits in vLLM-Omni's waiting deque, in O(log n) instead of a scan.

The plugin moves the requests a policy chose to the head of vLLM-Omni's ``_waiting``
deque before vLLM-Omni's own loop admits from the head. ``deque.remove`` compares the
id with every entry ahead of it (~40 µs a request at 4,096 waiting), so one decision
cost grew with the queue. vLLM-Omni changes the deque in three ways only: ``append``
(an arrival), ``appendleft`` (a preemption; ``extendleft`` of deferred ids puts back
what it just took from the head, in the same order) and removals that keep the order
(admission from the head, a finish or abort rebuilding the deque without some ids).
So if every id gets a rank when it joins — arrivals increasing ranks, pushes to the head
decreasing ones below every rank given so far — the deque stays sorted by rank, and
bisection on it (a deque supports indexing) finds an id's position in O(log n) probes;
``del waiting[i]`` then costs a block copy in C, no comparisons. An id whose rank is
missing or wrong (an insertion this did not see) is found by the plain scan: always
correct, at worst as slow as before. No vLLM import.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence


class QueueOrder:
    """Ranks of the ids in one scheduler's waiting deque (see the module docstring)."""

    __slots__ = ("_rank", "_tail", "_head")

    def __init__(self) -> None:
        self._rank: dict[str, int] = {}
        self._tail = 0
        """The next arrival's rank (ranks >= 0 increase along the tail)."""
        self._head = -1
        """The next push-to-head's rank (ranks < 0 decrease: each push lands ahead of all)."""

    def appended(self, rid: str) -> None:
        """``rid`` joined the tail (vLLM-Omni's ``add_request``)."""
        self._rank[rid] = self._tail
        self._tail += 1

    def pushed_front(self, rid: str) -> None:
        """``rid`` was put ahead of every waiting id (``preempt_request``'s ``appendleft``)."""
        self._rank[rid] = self._head
        self._head -= 1

    def forget(self, rid: str) -> None:
        """``rid`` left the engine."""
        self._rank.pop(rid, None)

    def clear(self) -> None:
        self._rank.clear()

    def __len__(self) -> int:
        return len(self._rank)

    def index(self, waiting: Sequence[str], rid: str) -> int:
        """Position of ``rid`` in ``waiting`` (ValueError when absent, as ``deque.index``)."""
        rank = self._rank.get(rid)
        if rank is not None:
            try:
                i = bisect_left(waiting, rank, key=self._rank.__getitem__)
            except KeyError:  # an id this never saw join: the order is not known
                i = -1
            if 0 <= i < len(waiting) and waiting[i] == rid:
                return i
        return waiting.index(rid)

    def move_to_head(self, waiting: deque[str], names: list[str]) -> None:
        """Put ``names`` (in this order) at the head of ``waiting``, the rest keeping their order:
        O(len(names) · log n) Python steps."""
        for rid in names:
            del waiting[self.index(waiting, rid)]
        waiting.extendleft(reversed(names))
        for rid in reversed(names):
            self.pushed_front(rid)


__all__ = ["QueueOrder"]
