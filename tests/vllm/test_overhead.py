"""schedule() cost: the plugin against vLLM-Omni's own scheduler on the same queue.

Prints a table (``pytest -s``) of median / p99 microseconds per call; docs/deploy.md
quotes it. The assertion is the acceptance bar: the plugin's median overhead stays
well under a millisecond with a realistic queue.
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from vllm_omni.diffusion.sched import RequestScheduler, StepScheduler  # noqa: E402

from tests.vllm.fakes import StepRunner, finish_wave, mk_req, od, plugin  # noqa: E402

SIZES = (512, 768, 1024, 1328)  # four compatibility keys, mixed in the queue
CALLS = 400


def _timed_calls(sched, queue: int, step: bool) -> list[float]:
    """Seconds per schedule() with ``queue`` requests waiting; the queue is refilled after each call."""
    n, times, runner = 0, [], StepRunner()

    def refill() -> None:
        nonlocal n
        while sched.num_waiting_requests() < queue:
            sched.add_request(mk_req(f"R{n}", SIZES[n % 4], steps=2, priority=("realtime", "batch")[n % 2],
                                     slo_ms=1000 + 37 * (n % 50)))
            n += 1

    for _ in range(CALLS):
        refill()
        t0 = time.perf_counter()
        out = sched.schedule()
        times.append(time.perf_counter() - t0)
        if step:  # one fake denoise step on what was scheduled (its own schedule() is not timed)
            sched.schedule = lambda out=out: out
            runner.step(sched)
            del sched.schedule
        else:
            finish_wave(sched, out)
    return times


def _stats(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times) * 1e6, times[int(0.99 * len(times))] * 1e6


@pytest.mark.parametrize("step", [False, True], ids=["request", "step"])
def test_schedule_overhead_is_well_under_a_millisecond(step: bool) -> None:
    rows = []
    for queue in (8, 64):
        base = StepScheduler() if step else RequestScheduler()
        base.initialize(od(4))
        base_med, base_p99 = _stats(_timed_calls(base, queue, step))
        rows.append(("vllm-omni", queue, base_med, base_p99, 0))
        for policy in ("fifo", "edf", "sjf", "seed-composite", "static"):
            sched = plugin(policy, step=step, budget_ms=0.5)
            med, p99 = _stats(_timed_calls(sched, queue, step))
            rows.append((policy, queue, med, p99, sched.fallbacks))
            if policy in ("edf", "sjf"):  # a sanity bound (O(n^2) would show), not a speed target:
                assert med - base_med < 1000, (policy, queue, med, base_med)  # numbers: the printout
    mode = "step" if step else "request"
    print(f"\nschedule() µs, {mode} mode, max_num_seqs 4, {CALLS} calls (median / p99 / fallbacks):")
    for name, queue, med, p99, fb in rows:
        print(f"  {name:15s} queue {queue:3d}: {med:7.1f} / {p99:7.1f}  fallbacks {fb}")
