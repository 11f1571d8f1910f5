"""A simulator's waiting requests in queue order, and the journal of every change to them.

``waiting`` is a dict in vLLM-Omni's queue order: arrivals at the tail, preempted and OOM-retried requests
at the head (``push_front``). Every change is journaled (``Journal``), so a policy keeps its per-key
structures in step by replaying the journal rather than scanning the queue. No engine imports.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rlsched.errors import InvalidDecision
from rlsched.sim.request import WAITING, RequestRecord
from rlsched.sim.view import DEQUEUED, ENQUEUED, Journal


class Waiting:
    """The waiting records of one ``Simulator`` (``rlsched.sim.waiting``)."""

    __slots__ = ("waiting", "journal", "_dequeued")

    def __init__(self) -> None:
        self.waiting: dict[int, RequestRecord] = {}
        """Waiting records in queue order (arrival order; preempted ones first). Rebuilt, not changed in
        place, by ``push_front`` and ``compact``: read it through its owner, never keep it."""
        self.journal = Journal()
        """Every change of ``waiting`` in order, ``(ENQUEUED | DEQUEUED, record)``: policies keep
        their own per-key structures in step by replaying it from where they last read, so a
        decision costs O(log n) rather than a scan of the whole queue."""
        self._dequeued = 0

    def add(self, rec: RequestRecord) -> None:
        """An arrival, at the tail."""
        self.waiting[rec.request.id] = rec
        self.journal.append(ENQUEUED, rec)

    def push_front(self, recs: Sequence[RequestRecord]) -> None:
        """Put ``recs`` (in this order) ahead of every waiting record: preempted, or sent back by an OOM."""
        for rec in recs:
            self.journal.append(ENQUEUED, rec)
        self.waiting = {**{r.request.id: r for r in recs}, **self.waiting}

    def preempt(self, recs: Sequence[RequestRecord]) -> None:
        """Running ``recs`` back to the head of the queue, their progress kept."""
        for rec in recs:
            rec.status = WAITING
            rec.preemptions += 1
        self.push_front(recs)

    def take_batch(self, ids: Sequence[int],
                   running: Sequence[RequestRecord]) -> tuple[list[RequestRecord], list[RequestRecord]]:
        """The records of batch ``ids`` (each waiting or ``running``), out of the queue; and the records of
        ``running`` it leaves out (for the caller to ``preempt``)."""
        waiting, keep = self.waiting, {r.request.id: r for r in running}
        batch = [waiting.get(rid) or keep[rid] for rid in ids]
        for rec in batch:
            rid = rec.request.id
            if waiting.pop(rid, None) is not None:  # ``take``, inline: once per request started
                self.journal.append(DEQUEUED, rec)
                self._dequeued += 1
            keep.pop(rid, None)
        return batch, list(keep.values())

    def pop(self, rid: int) -> RequestRecord | None:
        """Take request ``rid`` out (None: it is not waiting)."""
        rec = self.waiting.pop(rid, None)
        if rec is not None:
            self.journal.append(DEQUEUED, rec)
        return rec

    def release(self, ids: Iterable[int]) -> list[RequestRecord]:
        """``take`` each of ``ids`` (counted towards ``compact``: a central queue's views lose every request
        this way); each must be waiting (``InvalidDecision``)."""
        out = []
        for rid in ids:
            rec = self.take(rid)
            if rec is None:
                raise InvalidDecision(f"request {rid} is not waiting here")
            out.append(rec)
        return out

    def take(self, rid: int) -> RequestRecord | None:
        """``pop`` counted towards ``compact``: the request leaves to start or to be rejected."""
        rec = self.pop(rid)
        if rec is not None:
            self._dequeued += 1
        return rec

    def compact(self) -> None:
        """Rebuild ``waiting`` (same order) once more requests left it than it holds: a dict keeps
        the slots of popped keys until it resizes, and iterating from the head (FIFO's head run)
        walks every one of them — quadratic in a deep backlog. Amortised O(1) per dequeue."""
        if self._dequeued > 1024 and self._dequeued > len(self.waiting):
            self.waiting = dict(self.waiting)
            self._dequeued = 0


__all__ = ["Waiting"]
