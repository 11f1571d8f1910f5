"""What a scheduling policy sees and answers: the ``QueueView`` protocol and its change ``Journal``, the
``SchedulingPolicy`` protocol and its ``Decision`` (and a router's ``ReplicaView`` and ``StageView``).

Two states implement ``QueueView``: the ``Simulator`` and the vLLM-Omni plugin's
``PluginState``. Policies type against the protocol and never ask which one they were
given (SB3's ``PolicyPredictor`` idea, on the state side): what differs between the two
is expressed by the protocol itself — ``can_reject``, ``open_telemetry()``.

The journal is what makes a decision cost the same at 16 and 4,096 waiting requests in
both states: every change of ``waiting`` is appended in order, and a policy's own
structures (``QueueIndex``) replay it from where they last read instead of re-sorting
the queue. Its ``end`` (changes ever appended) doubles as a generation stamp for
per-decision caches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rlsched.sim.request import RequestRecord

if TYPE_CHECKING:
    from rlsched.sim.cost import CostModel
    from rlsched.sim.serving import ServingConfig
    from rlsched.sim.telemetry import Telemetry

ENQUEUED, DEQUEUED = 1, -1
"""Journal operations: a record joined ``waiting`` (arrival, preemption) or left it (started,
rejected, aborted)."""

ENGINE_KEEP = 4096
"""Journal entries a state inside the engine keeps (``PluginState``, the router's ledger). Its readers
(a policy's queue index) sync at every ``schedule()`` call, so they lag by the changes since the last
call; one that lags by more rebuilds, and at that many changes one sort of the queue costs about
what replaying them would. The simulator keeps ``Journal``'s default."""

Entry = tuple[int, RequestRecord]
Hook = Callable[[RequestRecord], None]


class Journal:
    """Every change of a queue, ``(ENQUEUED | DEQUEUED, record)``, in order, with bounded memory.

    Readers keep an absolute cursor (``end`` when they last read). Only the newest ``keep``
    entries are kept, the oldest dropped as each new one arrives (a ``deque`` with ``maxlen``:
    O(1) an append, never a bulk trim): a reader that fell further behind than that gets None
    from ``since`` and rebuilds from the queue itself — correct, just not incremental. A
    1,000,000-request replay would otherwise hold two million entries that no reader needs.

    Each entry holds its record, so a finished request's record lives on until its entries
    leave: in the engine (``PluginState``) that is memory, and objects the garbage collector
    counts and walks. A list trimmed by halves there freed tens of thousands of records in one
    call every few thousand requests; an unbounded one let every young collection's survivors
    pile up in the older generations.
    """

    __slots__ = ("_entries", "_end", "_keep")

    def __init__(self, keep: int = 1 << 16) -> None:
        if keep < 1:
            raise ValueError(f"a journal keeps at least 1 entry, not {keep}")
        self._entries: deque[Entry] = deque(maxlen=keep)
        self._end = 0
        self._keep = keep

    @property
    def keep(self) -> int:
        """Most entries kept."""
        return self._keep

    def append(self, op: int, rec: RequestRecord) -> None:
        self._entries.append((op, rec))
        self._end += 1

    def restart(self) -> None:
        """Every reader rebuilds from the queue at its next read (the records' cost figures changed: a new
        calibration, ``rlsched.sim.online``)."""
        self._entries.clear()
        self._end += 1

    @property
    def end(self) -> int:
        """Changes appended since the journal was created (the cursor of an up-to-date reader)."""
        return self._end

    def since(self, cursor: int) -> Sequence[Entry] | None:
        """The entries from ``cursor`` on, oldest first: O(entries returned); None when some were
        dropped or ``cursor`` is not of this journal."""
        behind = self._end - cursor
        if behind < 0 or behind > len(self._entries):
            return None
        out = list(islice(reversed(self._entries), behind))  # from the newest end: no walk past the rest
        out.reverse()
        return out

    def __len__(self) -> int:
        """Entries kept (not ``end``)."""
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)


class QueueView(Protocol):
    """The read-only state a ``SchedulingPolicy`` decides on (``Simulator``, ``PluginState``).

    Policies read, never write; the hooks are the one exception (a policy may append its
    own callbacks at ``reset``). Every member is read-only here (a property), so a state may
    hold a narrower type (a ``dict`` for ``waiting``, a ``list`` for ``running``).
    """

    @property
    def now(self) -> float:
        """Seconds on the state's clock."""
        ...

    @property
    def waiting(self) -> Mapping[int, RequestRecord]:
        """Waiting records by id, in queue order (preempted ones first)."""
        ...

    @property
    def running(self) -> Sequence[RequestRecord]:
        """The batch on the GPU (request mode: the wave; step mode: the last step's batch)."""
        ...

    @property
    def config(self) -> ServingConfig: ...

    @property
    def cost(self) -> CostModel: ...

    @property
    def step_mode(self) -> bool: ...

    @property
    def journal(self) -> Journal:
        """Every change of ``waiting``, in order (see ``Journal``)."""
        ...

    @property
    def can_reject(self) -> bool:
        """Whether ``Decision.reject`` (load shedding) can be carried out."""
        ...

    @property
    def on_arrival(self) -> list[Hook]:
        """Callbacks ``f(record)`` when a request arrives."""
        ...

    @property
    def on_finish(self) -> list[Hook]:
        """Callbacks ``f(record)`` when a request completes or fails (not on a client's abort)."""
        ...

    @property
    def memory_used_gb(self) -> float: ...

    def open_telemetry(self) -> Telemetry | None:
        """A reader of this state's GPU telemetry (simulated, or the engine's NVML samples);
        None when there is none. Call once per policy (at ``reset``), read at every decision."""
        ...


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy wants now.

    ``batch`` — request ids to run. Request mode: waiting requests that start a wave.
    Step mode: the whole batch for the next step (running ids left out are preempted).
    An empty batch means wait: until ``wait_until`` if given, else until the next event.
    ``reject`` — waiting request ids to drop now (load shedding), each finished as
    ``rejected`` with ``reason``; applied before the batch.
    """

    batch: tuple[int, ...] = ()
    wait_until: float | None = None
    reject: tuple[int, ...] = ()
    reason: str = ""


@runtime_checkable
class SchedulingPolicy(Protocol):
    """Owns the whole decision: admission, order, batch size, waiting, preemption.

    ``decide`` is called at every decision point with a read-only ``QueueView`` (the
    simulator, or the plugin's engine state); ``reset`` once before the first decision.
    """

    name: str

    def reset(self, state: QueueView) -> None: ...

    def decide(self, state: QueueView) -> Decision: ...


class ReplicaView(QueueView, Protocol):
    """One replica of a stage as a router reads it: its queue (``QueueView``) and when its running batch
    ends. Two implement it: a ``Simulator`` (the replica's true state) and, in the orchestrator, the
    router's ``LedgerReplica`` (the requests it bound, corrected by what the replica last published)."""

    @property
    def gpu_end_s(self) -> float:
        """When the running batch is predicted to end, on the view's clock; INF when nothing runs."""
        ...

    @property
    def on_change(self) -> list[Callable[[Any], None]]:
        """Callbacks ``f(replica)`` after its running batch (``gpu_end_s``) changed, or (the router's view)
        what it holds may have shrunk: how a router's index over the replicas follows them."""
        ...

    @property
    def started_unseen(self) -> RequestRecord | None:
        """A request sent here (among ``waiting``) that may run already although no state the view took says
        so, whatever its deadline (``routing.views``: the oldest unacknowledged send to a replica seen free);
        None in the true state."""
        ...


class StageView(Protocol):
    """What a ``Router`` decides on: the live replicas (index = the router's answer), the clock and the seed.
    Two implement it: the simulator's ``Stage`` and the router plugin's ``LedgerStage``."""

    @property
    def replicas(self) -> Sequence[ReplicaView]: ...

    @property
    def now(self) -> float: ...

    @property
    def seed(self) -> int: ...


class JournalFollower:
    """A structure kept in step with one state's ``waiting`` through its ``Journal`` (a policy's
    ``QueueIndex``, a router's per-replica work): ``sync`` replays the changes since the last sync
    (``_add``, ``_remove``), or rebuilds from the queue for a new state or a journal trimmed past it
    (``_rebuild``: a fork starts with an empty journal and a full queue)."""

    def __init__(self) -> None:
        self._state: QueueView | None = None
        self._cursor = 0

    def sync(self, state: QueueView) -> None:
        """Bring the structure up to ``state.waiting``."""
        entries = state.journal.since(self._cursor) if state is self._state else None
        if entries is None:
            self._state = state
            self._rebuild(state)
        else:
            for op, rec in entries:
                if op == ENQUEUED:
                    self._add(rec)
                else:
                    self._remove(rec)
        self._cursor = state.journal.end

    def _rebuild(self, state: QueueView) -> None:
        raise NotImplementedError

    def _add(self, rec: RequestRecord) -> None:
        raise NotImplementedError

    def _remove(self, rec: RequestRecord) -> None:
        raise NotImplementedError


def batch_problem(state: QueueView, ids: Sequence[int]) -> str | None:
    """The one validity check of a batch: why ``state`` cannot start ``ids`` now, else None.

    Codes (the plugin's fallback reasons): ``too_large`` (more than ``max_num_seqs``),
    ``duplicate`` (an id twice), ``unknown_id`` (neither waiting nor, in step mode, running),
    ``mixed_keys`` (compatibility keys differ). Memory is not checked here: vLLM-Omni does
    not either, and the simulator lets an over-full batch fail as an OOM.
    """
    if len(ids) > state.config.max_num_seqs:
        return "too_large"
    if len(set(ids)) != len(ids):
        return "duplicate"
    waiting = state.waiting
    running = {r.request.id: r for r in state.running} if state.step_mode and state.running else {}
    key = None
    for i in ids:
        rec = waiting.get(i) or running.get(i)
        if rec is None:
            return "unknown_id"
        if key is None:
            key = rec.key
        elif rec.key != key:
            return "mixed_keys"
    return None


__all__ = ["DEQUEUED", "ENQUEUED", "Decision", "Entry", "Hook", "Journal", "JournalFollower", "QueueView",
           "ReplicaView", "SchedulingPolicy", "StageView", "batch_problem"]
