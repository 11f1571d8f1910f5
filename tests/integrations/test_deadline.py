"""DeadlineRunner: a decision that sleeps or loops cannot hold the caller past the deadline."""

import threading
import time

import pytest

from rlsched.integrations.vllm_omni.deadline import DeadlineRunner, DecisionTimeout, PolicyAbort


def wait_until(cond, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def test_results_and_exceptions_pass_through() -> None:
    runner = DeadlineRunner(5.0)
    assert runner.call(lambda x: x + 1, 41) == 42
    with pytest.raises(ZeroDivisionError):
        runner.call(lambda x: 1 / x, 0)
    assert runner.call(str, 7) == "7" and not runner.busy
    runner.close()


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_a_non_exception_from_decide_stops_at_the_runner(exc) -> None:
    """Caught: ``SystemExit``/``KeyboardInterrupt`` raised by ``decide`` propagated out of schedule()."""
    runner = DeadlineRunner(5.0)

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
        runner.call(time.sleep, 0.3)
    assert time.perf_counter() - t0 < 0.25 and runner.busy
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout, match="still running"):
        runner.call(lambda x: x, 1)  # refused at once while the late call holds the policy
    assert time.perf_counter() - t0 < 0.01
    assert wait_until(lambda: not runner.busy)  # the sleep ended (C call: the interrupt lands after it)
    assert runner.call(lambda x: x + 1, 1) == 2 and runner.overruns == 1  # never the late call's result
    runner.close()


def test_a_looping_call_is_stopped_not_left_spinning() -> None:
    runner = DeadlineRunner(0.05)
    spins = []

    def loop(_):
        while True:
            spins.append(1)
            del spins[:]

    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout):
        runner.call(loop, None)
    assert time.perf_counter() - t0 < 0.5
    assert wait_until(lambda: not runner.busy)  # the interrupt ended the loop: no GIL contention for good
    assert runner.call(lambda x: x, "again") == "again"
    runner.close()
    assert wait_until(lambda: not runner._thread.is_alive())


def test_worker_is_a_daemon_thread() -> None:
    runner = DeadlineRunner(1.0)
    assert runner._thread.daemon and runner._thread in threading.enumerate()
    runner.close()
