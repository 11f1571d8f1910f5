"""A policy's decision with a hard deadline: ``schedule()`` never waits on it longer than that.

``schedule()`` runs under the engine's lock, so a policy that sleeps or loops
would stall every request. ``DeadlineRunner`` runs ``decide`` on one long-lived
worker thread and waits at most ``deadline_s``; past it, the caller gets
``DecisionTimeout`` at once (FIFO then serves) and the runner is *broken*: it
refuses further calls, because the late call still holds the policy's state. A
Python thread cannot be killed, so the runner also raises ``DecisionTimeout``
inside the worker (CPython's ``PyThreadState_SetAsyncExc``): a pure-Python loop
stops at its next bytecode instead of competing for the GIL with the engine for
good; a call blocked in C stops when it returns. No vLLM import.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable
from typing import Any

from rlsched.errors import RlschedError


class DecisionTimeout(RlschedError, TimeoutError):
    """A policy's decision overran its deadline (or an earlier one did: the policy is broken)."""


_STOP = object()


class DeadlineRunner:
    """Runs ``fn(arg)`` on a worker thread, waiting at most ``deadline_s`` for the result."""

    def __init__(self, deadline_s: float, name: str = "rlsched-decide") -> None:
        self.deadline_s = deadline_s
        self.broken = False
        """True once a call overran: later calls raise ``DecisionTimeout`` without running."""
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)  # never blocks exit
        self._thread.start()

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)``, or ``DecisionTimeout`` after ``deadline_s``; ``fn``'s own exception is re-raised."""
        if self.broken:
            raise DecisionTimeout("an earlier decision overran its deadline; the policy is not called again")
        self._jobs.put((fn, arg))
        try:
            ok, value = self._results.get(timeout=self.deadline_s)
        except queue.Empty:
            self.broken = True
            self._interrupt()
            raise DecisionTimeout(f"no decision within {self.deadline_s * 1e3:g} ms") from None
        if not ok:
            raise value
        return value

    @property
    def busy(self) -> bool:
        """The worker is still inside an overrun call (it stops at its next Python bytecode)."""
        return self.broken and self._results.empty() and self._thread.is_alive()

    def close(self) -> None:
        self._jobs.put(_STOP)

    def _work(self) -> None:
        try:
            while (job := self._jobs.get()) is not _STOP:
                fn, arg = job
                try:
                    self._results.put((True, fn(arg)))
                except BaseException as exc:  # noqa: BLE001 (the interrupt lands here too): report, keep serving
                    self._results.put((False, exc))
        except DecisionTimeout:
            pass  # the interrupt arrived between calls; the runner is broken, nothing is left to run

    def _interrupt(self) -> None:
        ident = self._thread.ident
        if ident is not None and hasattr(ctypes, "pythonapi"):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(DecisionTimeout))
