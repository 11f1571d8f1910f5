"""Faults a careless or hostile policy or client brings into the engine: each stays inside the
plugin, is counted, and the scheduler keeps serving (no request lost or started twice)."""

from __future__ import annotations

import itertools
import os
import socket
import time

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from tests.vllm.fakes import finish_wave, mk_req, new_ids, plugin  # noqa: E402
from tests.vllm.test_scheduler import Fixed, fifo_waves, waves  # noqa: E402


def _abc():
    return [mk_req("A"), mk_req("B", 1024), mk_req("C")]


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_decide_raising_systemexit_or_keyboardinterrupt_falls_back(exc) -> None:
    """Caught: ``SystemExit``/``KeyboardInterrupt`` from ``decide`` propagated out of schedule()."""
    def boom(state):
        raise exc()

    sched = plugin(Fixed(boom))
    for r in _abc():
        sched.add_request(r)
    assert waves(sched) == fifo_waves(_abc)
    assert set(sched.fallback_reasons) == {"exception"}


class _Endless:
    batch = property(lambda self: itertools.count())
    wait_until = None


class _SlowBatch:
    wait_until = None

    @property
    def batch(self):
        time.sleep(1.0)
        return (0,)


def test_an_endless_batch_is_cut_at_the_cap_off_the_engine_thread() -> None:
    """Caught: the decision's ``batch`` was consumed on the engine thread without a bound."""
    sched = plugin(Fixed(lambda state: _Endless()))
    for r in _abc():
        sched.add_request(r)
    t0 = time.perf_counter()
    out = sched.schedule()
    assert time.perf_counter() - t0 < 0.5 and new_ids(out) == ["A"]  # FIFO: head-of-line at B
    assert dict(sched.fallback_reasons) == {"too_large": 1}


def test_a_slow_batch_property_is_bounded_by_the_deadline() -> None:
    sched = plugin(Fixed(lambda state: _SlowBatch()), deadline_ms=50)
    for r in _abc():
        sched.add_request(r)
    t0 = time.perf_counter()
    sched.schedule()
    assert time.perf_counter() - t0 < 0.5 and dict(sched.fallback_reasons) == {"timeout": 1}


@pytest.mark.parametrize("field, extra", [("slo_ms", {"extra_args": {"slo_ms": 10**400}}),
                                          ("height", {"height": 10**400})])
def test_a_number_past_floats_range_is_defaulted_and_the_request_tracked(field, extra) -> None:
    """Caught: ``slo_ms=10**400`` raised OverflowError inside add(): the request went untracked and
    every call while it waited fell back to FIFO, not counted as invalid."""
    sched = plugin("edf")
    params = dict(extra)
    size = params.pop("height", 512)
    req = mk_req("X", 512, **params) if field == "slo_ms" else mk_req("X", 512)
    if field == "height":
        req.sampling_params.height = size
    sched.add_request(req)
    sched.add_request(mk_req("Y"))
    assert sched.rl_state.int_id("X") is not None  # tracked
    assert sched.rl_state.invalid[field] == 1 or sched.rl_state.invalid["request"] == 1
    while sched.has_requests():
        finish_wave(sched, sched.schedule())
    assert "untracked" not in sched.fallback_reasons


def test_a_request_no_gpu_can_hold_does_not_start_ahead_of_ones_that_fit() -> None:
    """Caught: ``static`` (waiting for a fuller batch, overridden while idle) let FIFO admit a
    100000x100000 request ahead of three 512x512 ones."""
    sched = plugin("static:agents/tuned/default.json")
    huge = mk_req("H", 512)
    huge.sampling_params.height = huge.sampling_params.width = 100_000
    for r in (huge, mk_req("a"), mk_req("b"), mk_req("c")):
        sched.add_request(r)
    first = new_ids(sched.schedule())
    assert "H" not in first and first
    order = [first]
    while sched.has_requests():
        out = sched.schedule()
        order.append(new_ids(out))
        finish_wave(sched, out)
    assert order[-1] == ["H"] or "H" in order[-1]  # started last, when nothing else could run


def test_a_metrics_port_in_use_is_logged_not_raised(caplog) -> None:
    """Caught: a bound ``metrics_port`` made ``initialize`` raise a raw OSError."""
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        sched = plugin("fifo", metrics_port=port)  # initialize() must not raise
        for r in _abc():
            sched.add_request(r)
        assert waves(sched) == fifo_waves(_abc)
    assert "metrics_port" in caplog.text


def test_a_finish_at_the_same_instant_does_not_serve_stale_step_candidates() -> None:
    """Caught: the candidate cache was stamped by (state, clock, journal) only; in step mode the
    running batch is part of the candidates, so a request finishing while the engine's clock
    stood still left it in the next proposal (unknown_id on 123 of 400 calls)."""
    from tests.vllm.test_overhead import _timed_calls

    sched = plugin("static", step=True)  # the fake clock never moves
    _timed_calls(sched, 8, True)
    assert "unknown_id" not in sched.fallback_reasons and sched.decisions > 0


@pytest.mark.parametrize("freeze", [True, False])
def test_serving_starts_with_the_start_up_heap_frozen(freeze: bool) -> None:
    """A full collection of the stage process's heap inside schedule() took 15-20 ms (bench
    plugin, pick at 256 and 1,024 waiting); the engine's warm-up end freezes it, as vLLM's own
    engine core does (``freeze_gc: false`` opts out)."""
    import gc

    gc.unfreeze()
    try:
        sched = plugin("fifo", freeze_gc=freeze)
        sched.end_warmup()
        assert (gc.get_freeze_count() > 0) == freeze
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("pause", [True, False])
def test_the_collector_is_paused_while_the_policy_decides(pause: bool) -> None:
    """A collection due inside a decision (a full one: ~10 ms at 4,096 waiting) threw the decision
    away as slow; paused, it runs after the decision. The collector is on again after schedule(),
    also when the decision overran its deadline (``pause_gc_in_decisions: false`` opts out)."""
    import gc

    from rlsched.sim import Decision

    seen = []

    def decide(state):
        seen.append(gc.isenabled())
        if len(seen) == 2:
            time.sleep(0.3)  # past the deadline: schedule() stops waiting, the decision runs on
        return Decision(tuple(state.waiting)[:1])

    assert gc.isenabled()
    sched = plugin(Fixed(decide), deadline_ms=50, pause_gc_in_decisions=pause)
    for r in _abc():
        sched.add_request(r)
    for _ in range(2):
        finish_wave(sched, sched.schedule())
        assert gc.isenabled()
    assert seen == [not pause] * 2 and sched.fallback_reasons["timeout"] == 1
