"""A policy's decision with a deadline: two runners, one bound each.

``InlineRunner`` (the shipped policies' runner) decides on the calling thread and a
watchdog interrupts a decision that overruns at its next Python bytecode: no thread
hand-off, a bound for Python code only. ``DeadlineRunner`` (any other policy) decides on
a worker thread: ``schedule()`` never waits on it longer than the deadline, whatever it
does. ``runner_for`` picks one (``PluginConfig.decision_thread``).

``schedule()`` runs under the engine's lock, so a policy that sleeps or loops
would stall every request. ``DeadlineRunner`` runs ``decide`` on one long-lived
worker thread and waits at most ``deadline_s``; past it, the caller gets
``DecisionTimeout`` at once (FIFO then serves). A Python thread cannot be killed, so
the runner also raises ``DecisionTimeout`` inside the worker (CPython's
``PyThreadState_SetAsyncExc``): a pure-Python loop stops at its next bytecode instead
of competing for the GIL with the engine; a call blocked in C stops when it returns.

An overrun does not end the policy: while the late call is still running the runner
is ``busy`` (calls are refused at once, FIFO serves), then it serves again. The caller
decides how long to back off and must ``reset`` the policy first: an interrupted
decision may have left its own structures half-updated. Results carry the job's
number, so a late call's result is never taken for a later call's. No vLLM import.

Each runner also says how long the decision itself ran (``last_own_s``, what a budget is checked
against), apart from the time the caller waited: ``InlineRunner`` the calling thread's CPU time (its
Python code never blocks, so every other moment of the call was the host's: a wait for a CPU, or for
the GIL while another thread of the process ran); ``DeadlineRunner`` the worker's time inside the
call less its waits for a CPU (``runnable_s``: a policy rlsched does not ship may sleep or block, which
counts), so neither the two thread hand-offs nor the host's load count against the policy.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from rlsched.errors import RlschedError


def runnable_s() -> float:
    """Seconds of the calling thread's life that it was not waiting for a CPU: the wall clock less the
    kernel's run-queue delay of the thread (Linux ``/proc/thread-self/schedstat``); the wall clock alone
    where that file cannot be read."""
    now = time.perf_counter()
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return now - int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return now


class _Schedstat:
    """``runnable_s`` of one thread of the process, read by any thread (``InlineRunner``'s watchdog reads the
    caller's): its ``schedstat`` file kept open, one ``pread`` a read (~2 µs; opening it each time ~8 µs)."""

    def __init__(self, native_id: int) -> None:
        self.native_id = native_id
        try:
            self._fd: int | None = os.open(f"/proc/self/task/{native_id}/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None
        self._closer = weakref.finalize(self, _close_fd, self._fd)

    def runnable_s(self) -> float:
        """``runnable_s`` of the thread (the wall clock alone where the file cannot be read)."""
        now = time.perf_counter()
        if self._fd is None:
            return now
        try:
            return now - int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return now

    def close(self) -> None:
        self._closer()


def _close_fd(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


class DecisionTimeout(RlschedError, TimeoutError):
    """A policy's decision overran its deadline (or an earlier one is still running)."""


class PolicyAbort(RlschedError):
    """``decide`` raised an exception that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt``, ``GeneratorExit``): it stops at the runner, not in the engine."""


_STOP = object()


class DeadlineRunner:
    """Runs ``fn(arg)`` on a worker thread, waiting at most ``deadline_s`` for the result."""

    def __init__(self, deadline_s: float, name: str = "rlsched-decide") -> None:
        self.deadline_s = deadline_s
        self.overruns = 0
        """Calls that overran the deadline, in all."""
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[tuple[int, bool, Any]] = queue.SimpleQueue()
        self._seq = itertools.count()
        self._late: int | None = None
        """The number of the overrun job while the worker is still inside it."""
        self._running_job = -1
        self.last_own_s = 0.0
        """The last completed call's time on the worker less its waits for a CPU (``runnable_s``)."""
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)  # never blocks exit
        self._thread.start()

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)``, or ``DecisionTimeout`` after ``deadline_s`` (or at once while an overrun
        call still runs); ``fn``'s own exception is re-raised (``PolicyAbort`` for a non-Exception)."""
        if self.busy:
            raise DecisionTimeout("an earlier decision overran its deadline and is still running")
        seq = next(self._seq)
        self._jobs.put((seq, fn, arg))
        while True:
            try:
                done, ok, value = self._results.get(timeout=self.deadline_s)
            except queue.Empty:
                self.overruns += 1
                self._late = seq
                self._interrupt(seq)
                raise DecisionTimeout(f"no decision within {self.deadline_s * 1e3:g} ms") from None
            if done == seq:
                break
            # a late call's result, arriving now: dropped (a stale decision must never be acted on)
        if not ok:
            if not isinstance(value, Exception):
                raise PolicyAbort(f"decide raised {type(value).__name__}: {value}") from None
            raise value
        value, self.last_own_s = value
        return value

    @property
    def busy(self) -> bool:
        """The worker is still inside an overrun call (it stops at its next Python bytecode)."""
        if self._late is None:
            return False
        while not self._results.empty():
            done, _, _ = self._results.get_nowait()
            if done == self._late:
                self._late = None
                return False
        if not self._thread.is_alive():  # cannot happen (the worker survives stray interrupts): be safe
            self._late = None
            return False
        return True

    def close(self) -> None:
        self._jobs.put(_STOP)

    def _work(self) -> None:
        while True:
            seq = None
            try:
                job = self._jobs.get()
                if job is _STOP:
                    return
                seq, fn, arg = job
                self._running_job = seq
                result: tuple[int, bool, Any]
                try:
                    t0 = runnable_s()
                    value = fn(arg)
                    result = (seq, True, (value, runnable_s() - t0))
                except BaseException as exc:  # noqa: BLE001 (the interrupt lands here too): report, keep serving
                    result = (seq, False, exc)
                self._running_job = -1
                self._results.put(result)
                seq = None
            except DecisionTimeout as exc:  # an interrupt outside fn (between jobs, or while reporting)
                self._running_job = -1
                if seq is not None:  # the job's result was not reported yet: report the interrupt
                    self._results.put((seq, False, exc))

    def _interrupt(self, seq: int) -> None:
        ident = self._thread.ident
        if ident is not None and self._running_job == seq:
            _set_async_exc(ident, DecisionTimeout)


class InlineRunner:
    """Runs ``fn(arg)`` on the calling thread; a watchdog thread interrupts it past ``deadline_s``.

    No thread hand-off: ``DeadlineRunner``'s two wake-ups a call (the worker's, then the
    caller's) cost ~50-150 µs median and millisecond tails on a shared 2-vCPU machine
    (``rlsched bench plugin --decision-threads worker,engine``). The bound it keeps is the one
    that holds for Python code: from the deadline on, the watchdog raises ``DecisionTimeout`` in
    the caller's thread at every poll (``poll_s``, a quarter of the deadline; it needs the GIL, so
    up to the interpreter's switch interval later) until the call ends; a call that ends past its
    deadline is a timeout however it ended. The deadline counts the caller's time less its waits for
    a CPU (``runnable_s``), as ``DeadlineRunner``'s own time does: the decision runs on the caller's
    thread, so while the host does not run that thread neither the decision nor the engine moves, and
    interrupting it saves the engine nothing. A 0.3 ms decision whose engine thread waited 141 ms for
    a CPU (``rlsched bench plugin`` at load 5.5 on 2 cores, issue 47) timed out on the wall clock,
    and the policy was reset and backed off after it. A call blocked in C (a sleep, I/O) holds the caller
    until it returns — hence the worker thread for policies rlsched does not ship
    (``PluginConfig.decision_thread``). A decision must not take a lock and then run Python code
    that the interrupt could stop before it releases the lock (``logging`` does): the lock would
    stay taken.

    The interrupt never lands outside the call: the watchdog raises only while the call is
    armed, under the lock that ``call`` takes to disarm it; ``call`` disarms first on every way
    out (the first bytecode of its ``finally``, before any point where an asynchronous exception
    or a signal's could be delivered) and takes delivery of an interrupt still pending.
    ``KeyboardInterrupt`` and ``SystemExit`` pass through on the main thread only: there they may
    be the process's Ctrl-C or a signal handler's shutdown, which must reach the caller. CPython
    runs signal handlers on the main thread alone, so on any other thread (vLLM-Omni's engine busy
    loop, the orchestrator's thread, ``DeadlineRunner``'s worker) they can only be the decision's
    own, and stop as ``PolicyAbort``. One thread calls a runner; a call made from inside a decision
    runs under the outer call's deadline.
    """

    busy = False
    """Never: an overrun call is interrupted on the caller's thread, so none outlives ``call``."""

    def __init__(self, deadline_s: float, name: str = "rlsched-watchdog") -> None:
        self.deadline_s = deadline_s
        self.poll_s = deadline_s / 4
        self.overruns = 0
        self.last_own_s = 0.0
        """The last completed call's CPU time on the calling thread (``time.thread_time``)."""
        self._lock = threading.Lock()
        self._job: tuple[int, float, _Schedstat, float] | None = None
        """(thread id, wall-clock due time, the thread's ``_Schedstat``, its ``runnable_s`` at the start) of the call
        in progress: past the due time, it is late once the thread's runnable time since the start reaches the
        deadline."""
        self._schedstat: _Schedstat | None = None
        """The calling thread's (one thread calls a runner; another one gets its own)."""
        self._fired = False
        self._stop = threading.Event()
        # the watchdog holds the runner weakly: a runner nobody keeps (a scheduler initialized again,
        # or dropped) ends its watchdog at the next poll instead of leaving it polling for good
        self._thread = threading.Thread(target=_watch, args=(weakref.ref(self), self.poll_s, self._stop),
                                        name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)``, or ``DecisionTimeout`` when it ran past ``deadline_s``; ``fn``'s own
        exception is re-raised (``PolicyAbort`` for ``GeneratorExit`` and other non-Exceptions
        but ``KeyboardInterrupt`` and ``SystemExit``)."""
        ident = threading.get_ident()
        job = self._job
        if job is not None and job[0] == ident:  # called from inside a decision: the outer deadline holds
            return fn(arg)
        due = time.monotonic() + self.deadline_s
        stat = self._schedstat_of(threading.get_native_id())
        start = stat.runnable_s()
        late = False  # the watchdog fired, or the call ended past its deadline (however it ended)
        try:
            try:
                with self._lock:
                    self._job, self._fired = (ident, due, stat, start), False
                cpu = time.thread_time()
                value = fn(arg)
                self.last_own_s = time.thread_time() - cpu
            finally:
                self._job = None  # first, before any point where an exception could be delivered
                try:
                    with self._lock:  # a poll in progress ends first; none can fire after this
                        late = self._fired
                    if late:
                        _deliver()  # one still pending is raised here, not in the caller's code
                except DecisionTimeout:
                    late = True
                late = late or (time.monotonic() >= due and stat.runnable_s() - start >= self.deadline_s)
        except (KeyboardInterrupt, SystemExit):
            if threading.current_thread() is threading.main_thread():
                raise  # it may be the process's Ctrl-C or a signal handler's shutdown: it goes on
            raise PolicyAbort(f"decide raised {type(sys.exc_info()[1]).__name__}") from None
        except BaseException as exc:
            if late:
                raise self._timeout() from None
            if isinstance(exc, Exception):
                raise
            raise PolicyAbort(f"decide raised {type(exc).__name__}: {exc}") from None  # GeneratorExit and the like
        if late:  # it ended late, or swallowed the interrupt
            raise self._timeout()
        return value

    def _timeout(self) -> DecisionTimeout:
        return DecisionTimeout(f"no decision within {self.deadline_s * 1e3:g} ms")

    def _schedstat_of(self, native_id: int) -> _Schedstat:
        stat = self._schedstat
        if stat is None or stat.native_id != native_id:
            stat = self._schedstat = _Schedstat(native_id)  # the one it replaces is closed when dropped
        return stat

    def close(self) -> None:
        self._stop.set()

    def _check(self) -> None:
        """The watchdog's poll: interrupt the call in progress if it is past its deadline (again at
        every poll, should the decision catch the interrupt and go on)."""
        with self._lock:
            job = self._job
            if job is not None and time.monotonic() >= job[1] and job[2].runnable_s() - job[3] >= self.deadline_s:
                if not self._fired:
                    self._fired = True
                    self.overruns += 1
                _set_async_exc(job[0], DecisionTimeout)


def _deliver() -> None:
    """A Python call: the interpreter delivers a pending asynchronous exception on entering it."""


def _watch(runner: weakref.ref[InlineRunner], poll_s: float, stop: threading.Event) -> None:
    while not stop.wait(poll_s):
        alive = runner()
        if alive is None:
            return
        try:
            alive._check()
        except Exception:  # noqa: BLE001 (a failed poll must not end the watchdog: the next one retries)
            pass
        del alive


def _set_async_exc(ident: int, exc: type[BaseException]) -> None:
    """Raise ``exc`` in thread ``ident`` at its next check point (CPython's ``PyThreadState_SetAsyncExc``)."""
    if hasattr(ctypes, "pythonapi"):
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc))


def runner_for(policy: object, thread: str, deadline_s: float) -> DeadlineRunner | InlineRunner:
    """The runner ``PluginConfig.decision_thread`` asks for: ``"engine"`` an ``InlineRunner``,
    ``"worker"`` a ``DeadlineRunner``; ``"auto"`` the engine thread for a policy whose class
    rlsched ships (its code is Python and numpy over a decision's few candidates: the watchdog
    always reaches it), a worker for any other (it may sleep or block in C)."""
    if thread == "auto":
        thread = "engine" if type(policy).__module__.partition(".")[0] == "rlsched" else "worker"
    return InlineRunner(deadline_s) if thread == "engine" else DeadlineRunner(deadline_s)
