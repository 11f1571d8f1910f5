"""A calibration version must not cost a decision (issue 47): inside the real ``RequestScheduler`` with
calibration on, a new version between two calls leaves the next call's work O(slice), not O(waiting) — counted
(records re-costed, index rebuilds, journal entries replayed), not timed; memory at once; every record at the
new version's times within a few batches; a queue that fits one slice re-costed at once (as the simulator)."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni.harness.overhead import Feeder, finish_wave, plugin_scheduler  # noqa: E402
from rlsched.integrations.vllm_omni.scheduler import RECOST_SLICE  # noqa: E402
from rlsched.sim.truth import rescaled  # noqa: E402

DEPTH = 1024


class CountingIndex:
    """Counts the rebuilds of a policy's ``QueueIndex`` (an O(queue) sort) and the journal entries it replays."""

    def __init__(self, index) -> None:
        self.rebuilds, self.replayed = 0, 0
        rebuild, add, remove = index._rebuild, index._add, index._remove

        def _rebuild(state):
            self.rebuilds += 1
            rebuild(state)

        def _add(rec):
            self.replayed += 1
            add(rec)

        def _remove(rec):
            self.replayed += 1
            remove(rec)

        index._rebuild, index._add, index._remove = _rebuild, _add, _remove


def _served(policy: str = "edf", depth: int = DEPTH):
    """The plugin with calibration on, ``depth`` waiting, warmed up; its calibrator moves only when told."""
    sched = plugin_scheduler(policy, step=False, calibrate=True)
    sched.gpu = None  # the clock stands still: no batch moves the calibrator on its own
    sched.rl_state.calibrator.min_batches = 10**9
    feeder = Feeder()
    for _ in range(3):
        _call(sched, feeder, depth)
    return sched, feeder


def _call(sched, feeder: Feeder, depth: int):
    feeder.refill(sched, depth)
    out = sched.schedule()
    finish_wave(sched, out)
    return out


def _version(sched, time: float = 1.3, memory: float = 1.0):
    st = sched.rl_state
    model = next(iter(st.shipped.models))
    new = rescaled(st.shipped, {model: (time, 1.0, memory)}, "test")
    st.adopt_cost(new)
    return new


def test_a_new_version_costs_the_next_decision_a_slice_not_the_queue() -> None:
    sched, feeder = _served()
    st = sched.rl_state
    counted = CountingIndex(sched.policy.index)
    before = {id(r): r.work_s for r in st.waiting.values()}
    _version(sched)
    finish_wave(sched, sched.schedule())  # the call right after the version, and its batch's update
    recosted = sum(1 for r in st.records.values() if id(r) in before and r.work_s != before[id(r)])
    assert 0 < recosted <= RECOST_SLICE < DEPTH / 8
    feeder.refill(sched, DEPTH)
    sched.schedule()  # the next decision replays the slice: no re-ranking of the queue
    assert counted.rebuilds == 0
    assert counted.replayed <= 2 * (RECOST_SLICE + 2 * 4)  # a re-enqueue is a remove and an add; + batch
    assert sched.fallbacks == 0


def test_every_record_reaches_the_new_version_and_its_memory_at_once() -> None:
    sched, feeder = _served()
    st = sched.rl_state
    new = _version(sched, time=1.3, memory=1.5)
    # memory at once, before any decision: every admission check reads the calibrated memory
    assert all(r.mem_gb == new.record(r.request).mem_gb for r in st.records.values())
    for _ in range(DEPTH // RECOST_SLICE + 2):
        _call(sched, feeder, DEPTH)
    assert not st.recosting.passing
    assert all(r.work_s == new.record(r.request).work_s and r.mem_gb == new.record(r.request).mem_gb
               for r in st.records.values())


def test_versions_during_a_pass_wait_for_it_then_the_newest_is_taken() -> None:
    sched, feeder = _served()
    st = sched.rl_state
    _version(sched, time=1.3)
    _call(sched, feeder, DEPTH)
    for scale in (1.4, 1.5):  # two more during the pass: the pass ends, then one more pass to the newest
        newest = _version(sched, time=scale)
    _call(sched, feeder, DEPTH)
    assert len({r.work_s for r in st.waiting.values() if r.request.height == 512}) <= 2  # arrivals: the pass's
    for _ in range(2 * (DEPTH // RECOST_SLICE + 2)):
        _call(sched, feeder, DEPTH)
    assert all(r.work_s == newest.record(r.request).work_s for r in st.records.values())


def test_a_queue_that_fits_one_slice_is_recosted_at_once_as_in_the_simulator() -> None:
    sched, _ = _served(depth=RECOST_SLICE // 2)
    st = sched.rl_state
    counted = CountingIndex(sched.policy.index)
    new = _version(sched)
    assert all(r.work_s == new.record(r.request).work_s for r in st.records.values())
    sched.schedule()
    assert counted.rebuilds == 1  # the journal restarted, as the simulator's
