"""A replica's scheduler state, as it publishes it to the router in the orchestrator (``publish_state``).

The wire format and the rule are ``rlsched.routing.views``' (its module docstring). The plugin's
scheduler builds a ``Published`` state on the engine's busy-loop thread — after a ``schedule()`` and an
``update_from_output`` whose running set changed or that finished requests — and swaps it in by
reference; ``RLDiffusionEngine.step_streaming``, on the asyncio thread, reads the latest one and turns it
into the wire dict (``message``), ``remaining_s`` taken on the plugin clock at that moment. A state is
immutable, so the two threads share nothing else.

A state may be replaced before any output carried it (two changes between two outputs): the next state
then also lists what that one had finished or preempted, so every finish and preemption reaches some
published state (a request listed twice is harmless: the router forgets a finished request once).

No vLLM import: the main test tier tests this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rlsched.routing.publication import PublicationDiff
from rlsched.routing.views import CARRIER_KEY, MAX_LISTED, Calibration, replica_state


@dataclass(frozen=True, slots=True)
class Published:
    """One state of the replica (module docstring); ``end_s`` on the plugin clock."""

    seq: int
    end_s: float
    """The running batch's predicted end (step mode: the current step's), on the scheduler's clock."""
    running: tuple[tuple[str, int], ...]
    finished: tuple[str, ...] = ()
    preempted: tuple[tuple[str, int], ...] = ()
    calibration: Calibration | None = None
    """The scheduler's online calibration when the state was taken (``routing.views.calibration_of``)."""


class StatePublisher:
    """The latest ``Published`` state (``update`` on the busy-loop thread, ``message`` on any thread)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.latest: Published | None = None
        self._sent = -1
        """The highest seq that ``message`` turned into a wire dict (written by the reading thread)."""

    def update(self, running: Iterable[tuple[str, int]], end_s: float, finished: Iterable[str] = (),
               preempted: Iterable[tuple[str, int]] = (), calibration: Calibration | None = None) -> Published:
        """Take a new state (seq + 1); returns it. O(batch + what it lists)."""
        prev = self.latest
        fin, pre = tuple(finished), tuple(preempted)
        if prev is not None and self._sent < prev.seq:  # never published: its news travel with this state
            fin = tuple(dict.fromkeys(prev.finished + fin))
            pre = tuple({rid: (rid, done) for rid, done in prev.preempted + pre}.values())
        state = Published(0 if prev is None else prev.seq + 1, end_s, tuple(running), fin[-MAX_LISTED:],
                          pre[-MAX_LISTED:], calibration)
        self.latest = state
        return state

    def message(self, state: Published | None = None, carrier: bool = False) -> dict[str, Any] | None:
        """The wire dict of ``state`` (default: the latest; None before any), ``remaining_s`` for now."""
        state = self.latest if state is None else state
        if state is None:
            return None
        if state.seq > self._sent:
            self._sent = state.seq
        remaining = state.end_s - self._clock() if state.running else 0.0
        msg = replica_state(state.seq, remaining if math.isfinite(remaining) else 0.0, state.running,
                            state.finished, state.preempted, state.calibration)
        if carrier:
            msg[CARRIER_KEY] = True
        return msg


class Publication:
    """The scheduler's side of ``publish_state``: when to take a new state and what it lists (the publication
    diff, ``rlsched.routing.publication``: the simulator's rule), the finished ids already listed, and the
    carrier state of the last ``schedule()``. ``states`` is vLLM-Omni's id -> request state (``is_finished``)."""

    def __init__(self, publisher: StatePublisher, clock: Callable[[], float]) -> None:
        self.publisher, self._clock = publisher, clock
        self.diff: PublicationDiff[str] = PublicationDiff()
        self._listed: set[str] = set()
        """Finished ids some state listed, until the engine pops them (so no later state lists them again)."""
        self._unlisted: list[str] = []
        """Ids popped before any state listed them as finished: the next state does."""
        self._carrier: Published | None = None

    def popped(self, request_id: str, ended: bool) -> None:
        """The engine popped ``request_id`` (``ended``: it had a state, outside warm-up): listed once."""
        if request_id in self._listed:
            self._listed.discard(request_id)
        elif ended:  # ended unseen (e.g. while paused): say so next
            self._unlisted.append(request_id)

    def take_carrier(self) -> Published | None:
        """The state built by the last ``schedule()`` if that call changed the running set (once)."""
        state, self._carrier = self._carrier, None
        return state

    def publish(self, finished: Iterable[str], at_schedule: bool, states: Mapping[str, Any], running: tuple[str, ...],
                steps_done: Callable[[str], int], predicted_s: Callable[[tuple[str, ...], list[int]], float],
                calibration: Calibration | None) -> None:
        """A new state when the running set changed, requests finished or left the batch unfinished since the
        last one: O(batch + finished), never O(queue)."""
        listed, pub = self._listed, self.diff
        unlisted, self._unlisted = self._unlisted, []
        for rid in unlisted:
            pub.finish(rid)
        for rid in finished:
            if rid not in listed and rid in states:
                listed.add(rid)
                pub.finish(rid)

        def left(rid: str) -> int | None:
            state = states.get(rid)
            if state is not None and not state.is_finished():
                return steps_done(rid)
            if state is not None and rid not in listed:  # finished, not yet reported (an abort)
                listed.add(rid)
                pub.finish(rid)
            return None

        diff = pub.take(running, left)
        if diff is None:
            return
        steps = [steps_done(rid) for rid in diff.running]
        now = self._clock()
        end = now + predicted_s(diff.running, steps) if diff.running else now
        built = self.publisher.update(zip(diff.running, steps), end, diff.finished, diff.preempted, calibration)
        if at_schedule and diff.changed:
            self._carrier = built
        if len(listed) > 1 << 16:  # ids the engine never popped (a bug upstream): bounded memory
            listed.clear()


__all__ = ["CARRIER_KEY", "Publication", "Published", "StatePublisher"]
