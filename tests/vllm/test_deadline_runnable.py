"""Issue 47's last timeouts: on the engine thread (``InlineRunner``) the deadline counts the thread's time less
its waits for a CPU, as a worker's own time does. ``rlsched bench plugin`` at load 5.5 on 2 cores: a decision
that ran 0.3 ms of CPU while its thread waited 141 ms for one timed out on the wall clock (then its back-off,
and the reset policy's rebuild). Deterministic: the kernel's run-queue figure is faked."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni import deadline  # noqa: E402
from rlsched.integrations.vllm_omni.deadline import DecisionTimeout, InlineRunner  # noqa: E402


def _waits(seconds: float) -> Any:
    return lambda x: time.sleep(seconds) or x


def test_a_call_whose_thread_waited_for_a_cpu_past_the_deadline_is_not_a_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel says the thread waited for a CPU all along: its runnable time stands still, so neither the
    watchdog (5 polls past the deadline) nor the check at the end calls it late."""
    still = time.perf_counter()
    monkeypatch.setattr(deadline._Schedstat, "runnable_s", lambda self: still)
    runner = InlineRunner(0.02)
    try:
        assert runner.call(_waits(0.1), 7) == 7 and runner.overruns == 0
    finally:
        runner.close()


def test_a_call_that_ran_past_the_deadline_is_a_timeout_as_before() -> None:
    runner = InlineRunner(0.02)  # a sleep is not a wait for a CPU: it counts
    try:
        with pytest.raises(DecisionTimeout):
            runner.call(_waits(0.1), 7)
        assert runner.call(lambda x: x, 8) == 8
    finally:
        runner.close()


def test_the_watchdog_reads_the_callers_run_queue_delay() -> None:
    """``runnable_s`` of a thread of the process, read from any thread (its ``schedstat`` kept open); the wall
    clock where it cannot be read."""
    me = deadline._Schedstat(threading.get_native_id())
    if os.path.exists("/proc/thread-self/schedstat"):  # Linux: the file is read, not the wall clock
        assert me._fd is not None
    assert abs(me.runnable_s() - deadline.runnable_s()) < 0.05
    gone = deadline._Schedstat(2**31 - 1)  # no such task
    assert abs(gone.runnable_s() - time.perf_counter()) < 1.0
    me.close()
    gone.close()
