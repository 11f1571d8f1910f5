"""What a replica's next published state says since its last one: the publication diff (issue 49).

A replica publishes a new state (``rlsched.routing.views``' wire format) when its running set changed, a
request finished, or a request left the running batch unfinished (preempted, step mode) since the last
state it took; otherwise it publishes nothing. The steps a running request makes are not news: the router's
view extrapolates them from the batch's predicted end.

Defined once, engine-neutral: the simulator's ``ViewRouter`` (``view=engine``, one ``PublicationDiff`` per
replica, ids the simulator's) and the vLLM-Omni plugin's scheduler (``integrations.vllm_omni.scheduler``,
ids vLLM's) both ask ``PublicationDiff.take`` whether to publish and what; each then builds the state its
own way (the seq, the batch's predicted end, the calibration).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Diff(Generic[K]):
    """What the next state lists: the running ids in the batch's order, what finished and what was preempted
    (with its steps done) since the last state."""

    running: tuple[K, ...]
    finished: tuple[K, ...]
    preempted: tuple[tuple[K, int], ...]
    changed: bool
    """The running set differs from the last state's (the plugin sends such a state on a carrier output)."""


class PublicationDiff(Generic[K]):
    """One replica's publication diff: the running ids of the last state taken and what finished since.

    ``finish`` is told each request that ended (once); ``take`` is asked at each change of the batch.
    O(batch + finished) a call, never O(queue)."""

    def __init__(self) -> None:
        self.running: tuple[K, ...] = ()
        """The running ids of the last state taken, in the batch's order."""
        self.finished: list[K] = []
        """Requests that ended since the last state (the next one lists them)."""

    def finish(self, rid: K) -> None:
        """``rid`` ended: the next state lists it as finished."""
        self.finished.append(rid)

    def take(self, running: Sequence[K], left: Callable[[K], int | None], force: bool = False) -> Diff[K] | None:
        """The next state's diff, taken (the next diff is against it); None when there is nothing to publish
        (the same running set, nothing finished or preempted) and not ``force``. ``left(rid)`` is asked of each
        request of the last state that left the batch: its steps done when it left unfinished (preempted),
        None when not (it finished: told to ``finish``, even from within ``left``, it is listed as such)."""
        now = set(running)
        preempted = []
        for rid in self.running:
            if rid not in now:
                done = left(rid)
                if done is not None:
                    preempted.append((rid, done))
        changed = now != set(self.running)
        if not (changed or self.finished or preempted or force):
            return None
        finished, self.finished, self.running = tuple(self.finished), [], tuple(running)
        return Diff(self.running, finished, tuple(preempted), changed)


__all__ = ["Diff", "PublicationDiff"]
