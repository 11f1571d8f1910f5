"""schedule() cost: the plugin against vLLM-Omni's own scheduler on the same queue.

Prints a table (``pytest -s``) of median / p99 microseconds per call (docs/benchmarks.md
says what it checks; its last quoted run is in CHANGELOG.md). This is not the acceptance bar:
timings on this shared 2-core machine move
with whatever else runs, so speed is measured, not asserted, by ``rlsched bench plugin``
(``make bench-plugin``: every shipped policy against the native scheduler at 16-4,096
waiting requests, default ``PluginConfig``). The one assertion here is a sanity bound,
``SANITY_US`` above the native scheduler's median, far from any speed target.
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
SANITY_US = 20_000.0
"""Median µs per call above the native scheduler's that fails the test: 20 ms, about 50x the
slowest median measured here (~0.4 ms, seed-composite and static at 64 waiting), so a loaded
machine (which may slow a median a few times over) never trips it, while a decision path gone
pathological does: a per-call reload of a checkpoint, a decision that sleeps, blocks on its
thread or simulates ahead."""


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
def test_schedule_overhead_table_and_sanity_bound(step: bool) -> None:
    """Prints the table; fails only past ``SANITY_US`` (a sanity check, not a speed target)."""
    rows, over = [], []
    for queue in (8, 64):
        base = StepScheduler() if step else RequestScheduler()
        base.initialize(od(4))
        base_med, base_p99 = _stats(_timed_calls(base, queue, step))
        rows.append(("vllm-omni", queue, base_med, base_p99, 0))
        for policy in ("fifo", "edf", "sjf", "seed-composite", "static"):
            sched = plugin(policy, step=step, budget_ms=0.5)
            med, p99 = _stats(_timed_calls(sched, queue, step))
            rows.append((policy, queue, med, p99, sched.fallbacks))
            if med - base_med >= SANITY_US:
                over.append((policy, queue, round(med), round(base_med)))
    mode = "step" if step else "request"
    print(f"\nschedule() µs, {mode} mode, max_num_seqs 4, {CALLS} calls (median / p99 / fallbacks):")
    for name, queue, med, p99, fb in rows:
        print(f"  {name:15s} queue {queue:3d}: {med:7.1f} / {p99:7.1f}  fallbacks {fb}")
    assert not over, f"median schedule() cost {SANITY_US / 1e3:g} ms or more above vLLM-Omni's: {over}"
