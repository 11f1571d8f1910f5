"""DeadlineRunner: a decision that sleeps or loops cannot hold the caller past the deadline.
InlineRunner: one that loops is interrupted on the caller's thread, and the interrupt never
lands outside the call."""

import random
import signal
import threading
import time

import pytest

from rlsched.integrations.vllm_omni.deadline import (
    DeadlineRunner,
    DecisionTimeout,
    InlineRunner,
    PolicyAbort,
    runner_for,
)
from rlsched.policies.baselines import Fifo


def wait_until(cond, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


@pytest.mark.parametrize("kind", [DeadlineRunner, InlineRunner])
def test_results_and_exceptions_pass_through(kind) -> None:
    runner = kind(5.0)
    assert runner.call(lambda x: x + 1, 41) == 42
    with pytest.raises(ZeroDivisionError):
        runner.call(lambda x: 1 / x, 0)
    assert runner.call(str, 7) == "7" and not runner.busy
    runner.close()


@pytest.mark.parametrize("kind, exc", [(DeadlineRunner, SystemExit(3)), (DeadlineRunner, KeyboardInterrupt()),
                                       (DeadlineRunner, GeneratorExit()), (InlineRunner, GeneratorExit())])
def test_a_non_exception_from_decide_stops_at_the_runner(exc, kind) -> None:
    """Caught: ``SystemExit``/``KeyboardInterrupt`` raised by ``decide`` propagated out of schedule()."""
    runner = kind(5.0)

    def boom(_):
        raise exc

    with pytest.raises(PolicyAbort, match=type(exc).__name__):
        runner.call(boom, None)
    assert runner.call(lambda x: x * 2, 21) == 42  # and the runner keeps serving
    runner.close()


def test_a_slow_call_is_abandoned_at_the_deadline_and_the_runner_recovers() -> None:
    """Caught: one overrun marked the runner broken for the rest of the process."""
    runner = DeadlineRunner(0.05)
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout, match="50 ms"):
        runner.call(time.sleep, 2.0)
    assert time.perf_counter() - t0 < 1.0 and runner.busy  # 20x the deadline, half the sleep: never flips
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout, match="still running"):
        runner.call(lambda x: x, 1)  # refused at once while the late call holds the policy
    assert time.perf_counter() - t0 < 1.0 and runner.busy  # not after the late call (it had over 1 s left)
    assert wait_until(lambda: not runner.busy)  # the sleep ended (C call: the interrupt lands after it)
    assert runner.call(lambda x: x + 1, 1) == 2 and runner.overruns == 1  # never the late call's result
    runner.close()


def _spin(_):
    spins = []
    while True:
        spins.append(1)
        del spins[:]


def test_a_looping_call_is_stopped_not_left_spinning() -> None:
    runner = DeadlineRunner(0.05)
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout):
        runner.call(_spin, None)
    assert time.perf_counter() - t0 < 0.5
    assert wait_until(lambda: not runner.busy)  # the interrupt ended the loop: no GIL contention for good
    assert runner.call(lambda x: x, "again") == "again"
    runner.close()
    assert wait_until(lambda: not runner._thread.is_alive())


def test_worker_is_a_daemon_thread() -> None:
    runner = DeadlineRunner(1.0)
    assert runner._thread.daemon and runner._thread in threading.enumerate()
    runner.close()


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_inline_a_signal_on_the_callers_thread_goes_on(exc) -> None:
    """The engine thread may be the main thread: a KeyboardInterrupt there may be the user's Ctrl-C,
    a SystemExit a signal handler's shutdown."""
    runner = InlineRunner(5.0)

    def signalled(_):
        raise exc

    with pytest.raises(exc):
        runner.call(signalled, None)
    assert runner.call(lambda x: x, 3) == 3
    runner.close()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_inline_a_signal_anywhere_in_call_leaves_nothing_armed() -> None:
    """Caught in review: a signal's exception leaving ``call`` between arming and the ``try`` (or
    before the disarm) left the watchdog armed, and it then raised into the caller's code."""
    runner = InlineRunner(0.002)
    rng = random.Random(0)

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, handler)
    stray = armed = signals = 0
    try:
        end = time.monotonic() + 3.0
        while signals < 150 and time.monotonic() < end:
            try:  # the timer may fire at any bytecode from arming it to just after disarming it
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(20e-6, 200e-6))
                    while True:
                        runner.call(lambda a: a, 0)
                except DecisionTimeout:  # a call past the deadline on a slow machine
                    pass
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    (lambda: None)()  # a Python call: a signal caught before the disarm is handled here
            except KeyboardInterrupt:
                signals += 1
            armed += runner._job is not None
            try:  # longer than deadline + poll: an armed watchdog would fire here
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 0.008:
                    pass
            except DecisionTimeout:
                stray += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        runner.close()
    assert signals >= 50 and (armed, stray) == (0, 0)


def test_inline_a_call_that_ends_late_is_a_timeout_even_before_the_watchdog_fires() -> None:
    """Caught in review: a call past its deadline that returned before the next poll returned its value."""
    runner = InlineRunner(0.01)
    runner.close()  # no watchdog: only the deadline check at the end is left
    assert wait_until(lambda: not runner._thread.is_alive())

    def late(_):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.03:
            pass
        return "late"

    with pytest.raises(DecisionTimeout):
        runner.call(late, None)
    assert runner.call(lambda x: x, "in time") == "in time"


def test_inline_a_call_made_from_inside_a_decision_keeps_the_outer_deadline() -> None:
    runner = InlineRunner(0.05)
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout):
        runner.call(lambda _: runner.call(_spin, None), None)
    assert time.perf_counter() - t0 < 0.5
    runner.close()


def test_inline_a_looping_call_is_interrupted_on_the_callers_thread() -> None:
    runner = InlineRunner(0.05)
    callers = []
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout, match="50 ms"):
        runner.call(lambda x: (callers.append(threading.get_ident()), _spin(x)), None)
    assert time.perf_counter() - t0 < 0.5 and callers == [threading.get_ident()]
    assert not runner.busy and runner.overruns == 1
    assert runner.call(lambda x: x + 1, 1) == 2  # and it serves again at once
    runner.close()
    assert wait_until(lambda: not runner._thread.is_alive())


def test_inline_a_call_that_swallows_the_interrupt_is_still_a_timeout() -> None:
    def stubborn(_):
        try:
            _spin(None)
        except DecisionTimeout:
            return "late"

    def very_stubborn(_):  # catches every interrupt: the watchdog raises again at each poll
        for _ in range(3):
            try:
                _spin(None)
            except DecisionTimeout:
                pass
        return "late"

    runner = InlineRunner(0.05)
    for fn in (stubborn, very_stubborn):
        t0 = time.perf_counter()
        with pytest.raises(DecisionTimeout):
            runner.call(fn, None)
        assert time.perf_counter() - t0 < 1.0
    runner.close()


def test_inline_the_interrupt_never_lands_after_the_call() -> None:
    """Calls that end right at the deadline, many times: whichever side wins, the interrupt is
    raised inside ``call`` or cleared there, never in the caller's code after it."""
    runner = InlineRunner(0.002)
    runner.poll_s = 0.0005
    outcomes = set()
    for i in range(300):  # from well inside the deadline to well past it, around it most often
        try:
            runner.call(lambda s: time.sleep(s) or sum(range(2000)), 0.004 * (i % 20) / 19)
            outcomes.add("value")
        except DecisionTimeout:
            outcomes.add("timeout")
        t0 = time.perf_counter()  # a pending interrupt would land in this loop
        while time.perf_counter() - t0 < 0.001:
            pass
    assert outcomes == {"value", "timeout"}  # both sides of the race were taken
    runner.close()


def test_auto_runs_shipped_policies_inline_and_any_other_on_a_worker() -> None:
    class Custom:
        pass

    runners = [runner_for(Fifo(), "auto", 1.0), runner_for(Custom(), "auto", 1.0),
               runner_for(Custom(), "engine", 1.0), runner_for(Fifo(), "worker", 1.0)]
    assert [type(r) for r in runners] == [InlineRunner, DeadlineRunner, InlineRunner, DeadlineRunner]
    for r in runners:
        r.close()


def test_inline_a_dropped_runner_ends_its_watchdog() -> None:
    """Caught in review: a runner nobody keeps (a scheduler initialized again) left its watchdog
    polling for the rest of the process."""
    import gc

    runner = InlineRunner(0.02)
    watchdog = runner._thread
    del runner
    gc.collect()
    assert wait_until(lambda: not watchdog.is_alive())
