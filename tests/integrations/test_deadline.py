"""DeadlineRunner: a decision that sleeps or loops cannot hold the caller past the deadline."""

import threading
import time

import pytest

from rlsched.integrations.vllm_omni.deadline import DeadlineRunner, DecisionTimeout


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
    assert runner.call(str, 7) == "7" and not runner.broken
    runner.close()


def test_a_slow_call_is_abandoned_at_the_deadline_and_breaks_the_runner() -> None:
    runner = DeadlineRunner(0.05)
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout, match="50 ms"):
        runner.call(time.sleep, 2.0)
    assert time.perf_counter() - t0 < 0.5 and runner.broken
    t0 = time.perf_counter()
    with pytest.raises(DecisionTimeout, match="earlier decision"):
        runner.call(lambda x: x, 1)  # refused at once: the late call still holds the policy
    assert time.perf_counter() - t0 < 0.01


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
    runner.close()
    assert wait_until(lambda: not runner._thread.is_alive())


def test_worker_is_a_daemon_thread() -> None:
    runner = DeadlineRunner(1.0)
    assert runner._thread.daemon and runner._thread in threading.enumerate()
    runner.close()
