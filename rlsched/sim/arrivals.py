"""A workload in arrival order, and how far it has arrived: a simulator's source of arrival events.

Ids are checked unique up front (``InvalidRequest``), so each request's record is keyed by its id. No
engine imports.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator

from rlsched.errors import InvalidRequest
from rlsched.sim.request import Request


def _arrival(req: Request) -> float:
    return req.arrival_s


class Arrivals:
    """The requests of a workload sorted by arrival time (stable: ties keep their order), with a cursor at
    the next one to arrive (``rlsched.sim.arrivals``). Iterating gives every request, arrived or not."""

    __slots__ = ("_requests", "_next", "next_s")

    def __init__(self, requests: Iterable[Request]) -> None:
        self._requests = sorted(requests, key=_arrival)
        ids = [r.id for r in self._requests]
        if len(set(ids)) != len(ids):
            dup = next(i for i, n in Counter(ids).items() if n > 1)
            raise InvalidRequest("id", dup, "duplicate request id in the workload")
        self._next = 0
        self.next_s = self._requests[0].arrival_s if self._requests else math.inf
        """When the next request arrives (inf: none is left). An attribute: the event loop reads it at
        every event."""

    @property
    def head(self) -> Request:
        """The next request to arrive (IndexError: none is left)."""
        return self._requests[self._next]

    def advance(self) -> None:
        """The head has arrived (its arrival handled: until then it counts as ``left``)."""
        self._next += 1
        self.next_s = self._requests[self._next].arrival_s if self._next < len(self._requests) else math.inf

    @property
    def left(self) -> int:
        """Requests still to arrive."""
        return len(self._requests) - self._next

    def ahead(self, until_s: float) -> list[Request]:
        """The requests still to arrive that arrive by ``until_s``, in order."""
        return [r for r in self._requests[self._next:] if r.arrival_s <= until_s]

    def __len__(self) -> int:
        return len(self._requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._requests)


__all__ = ["Arrivals"]
