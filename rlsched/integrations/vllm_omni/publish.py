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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

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


__all__ = ["CARRIER_KEY", "Published", "StatePublisher"]
