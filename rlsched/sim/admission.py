"""Memory-safe admission: what may go to the GPU whoever decided, written once for every engine.

Three rules, each O(batch), shared by the simulator and every site of the vLLM-Omni plugin (the engine's
scheduler, the central queue), so a batch reaches the GPU through the same memory check whether a policy
chose it, a fallback did, or it carries a request an out-of-memory batch sent back:

* ``admitted`` — how much of a chosen batch the memory check lets start: its longest prefix that fits the
  GPU by the cost believed now (the calibrated one), never less than its first request (alone if need be:
  a request that fits nothing runs alone, where only it can fail), cut before a request that must go
  alone and after one at the head.
* ``fifo_that_fits`` — vLLM-Omni 0.30's FIFO (the head run: from the head of the queue while the key
  matches the running batch's, or the head's, up to ``max_num_seqs``; stop at the first mismatch) with
  that memory check added. What every fallback runs: bounded work however deep the queue.
* ``split_oom`` — which requests of a batch that ran out of memory go back to the queue: each, unless it
  failed alone; one that had been sent back already goes alone next time, so a request fails only after
  failing alone (where ``admitted`` keeps it alone), and is sent back at most twice.

No engine imports: records and a ``CostModel`` only.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

from rlsched.sim.cost import CostModel
from rlsched.sim.request import RequestRecord

NOBODY: frozenset[int] = frozenset()
"""No request must go alone."""


def admitted(batch: Sequence[RequestRecord], cost: CostModel, alone: Container[int] = NOBODY) -> int:
    """How many leading records of ``batch`` may start together: while ``cost.fits`` their prefix (the same
    sum, so the same answer), at least one; a request in ``alone`` starts only as the whole batch."""
    room, used = cost.gpu_memory_gb, 0.0
    weights = cost.weights_gb
    for n, rec in enumerate(batch):
        lone = rec.request.id in alone
        if n and (lone or weights + (used + rec.mem_gb) > room):
            return n
        used += rec.mem_gb
        if lone:
            return 1
    return len(batch)


def fifo_that_fits(waiting: Iterable[RequestRecord], running: Sequence[RequestRecord], cost: CostModel, cap: int,
                   alone: Container[int] = NOBODY) -> tuple[int, ...]:
    """vLLM-Omni's FIFO admission with the memory check: the ids of the next batch — step mode: every
    ``running`` id (already on the GPU, never cut), then the waiting requests that join it; request mode
    (``running`` empty): the head run as far as ``admitted`` lets it start. Reads at most ``cap + 1``
    waiting records."""
    out = [r.request.id for r in running]
    used = 0.0
    for r in running:
        used += r.mem_gb
    key = running[0].key if running else None
    for rec in waiting:
        if len(out) >= cap or (key is not None and rec.key != key):
            break
        lone = rec.request.id in alone
        if out and (lone or cost.weights_gb + (used + rec.mem_gb) > cost.gpu_memory_gb):
            break
        out.append(rec.request.id)
        used += rec.mem_gb
        key = rec.key
        if lone:
            break
    return tuple(out)


@dataclass(frozen=True, slots=True)
class OomSplit:
    """What becomes of the requests of a batch that ran out of memory (``split_oom``)."""

    retry: tuple[RequestRecord, ...]
    """Back to the head of the queue, in the batch's order."""
    alone: tuple[RequestRecord, ...]
    """Those of ``retry`` sent back before: they go alone next time."""
    failed: tuple[RequestRecord, ...]
    """Failed now: the batch was theirs alone (or step mode, where nothing is sent back)."""


def split_oom(batch: Sequence[RequestRecord], retried: Container[int], fail_all: bool = False,
              alone: Container[int] = NOBODY) -> OomSplit:
    """The requests of ``batch`` (out of memory) to send back and to fail. ``retried``: ids sent back before;
    ``alone``: ids sent back to go alone (one in a batch of more was not kept alone: it fails, so no request
    is sent back a third time whoever batched it). ``fail_all``: none is sent back (step mode: the worker
    keeps a request's denoise state and refuses it as a new request; or an engine that does not retry)."""
    if fail_all or len(batch) <= 1:
        return OomSplit((), (), tuple(batch))
    again = tuple(r for r in batch if r.request.id not in alone)
    failed = tuple(r for r in batch if r.request.id in alone)
    return OomSplit(again, tuple(r for r in again if r.request.id in retried), failed)


__all__ = ["NOBODY", "OomSplit", "admitted", "fifo_that_fits", "split_oom"]
