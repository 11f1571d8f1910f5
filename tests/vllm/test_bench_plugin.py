"""``rlsched bench plugin`` on tiny sizes: every cell present, native rows, sane numbers (no timing bars)."""

from __future__ import annotations

import argparse
import math
import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.bench import plugin as bench  # noqa: E402
from rlsched.bench.plugin import MODES, NATIVE, measure  # noqa: E402
from rlsched.errors import ConfigError  # noqa: E402

POLICIES = ("fifo", "rl:checkpoints/default")
QUEUES = (16, 64)
CALLS = 5


@pytest.fixture(scope="module")
def result() -> dict:
    return measure(policies=POLICIES, queues=QUEUES, modes=MODES, calls=CALLS, warmup=1)


def test_every_cell_and_native_row_is_there(result: dict) -> None:
    cells = [(r["mode"], r["policy"], r["queue"]) for r in result["rows"]]
    assert len(cells) == len(set(cells))
    assert set(cells) == {(m, p, q) for m in MODES for p in (NATIVE, *POLICIES) for q in QUEUES}
    assert result["calls"] == CALLS and result["decision_budget_ms"] == 5.0  # the default PluginConfig


def test_numbers_are_finite_and_fallbacks_counted(result: dict) -> None:
    for r in result["rows"]:
        assert r["calls"] == CALLS
        assert math.isfinite(r["p50_us"]) and math.isfinite(r["p99_us"]) and 0 < r["p50_us"] <= r["p99_us"], r
        assert math.isfinite(r["overhead_p50_us"])
        assert 0 <= r["cpu_p50_us"] <= r["cpu_p99_us"] and math.isfinite(r["cpu_p99_us"]), r
        assert isinstance(r["fallbacks"], int) and 0 <= r["fallbacks"] <= CALLS, r
        assert all(isinstance(v, int) and v > 0 for v in r["fallback_reasons"].values()), r
        assert sum(r["fallback_reasons"].values()) == r["fallbacks"], r
        assert all(isinstance(v, int) and v > 0 for v in r["warmup_fallback_reasons"].values()), r
        assert isinstance(r["disturbed"], int) and 0 <= r["disturbed"] <= CALLS, r
        assert 0 <= r["fallbacks_disturbed"] <= min(r["fallbacks"], r["disturbed"]), r
        assert r["probe_p50_us"] > 0, r
        assert 0 <= r["admitted_per_call"] <= result["max_num_seqs"], r
        if r["disturbed"] < CALLS:
            assert 0 < r["p99_undisturbed_us"] and math.isfinite(r["p99_undisturbed_us"]), r
        assert isinstance(r["gc_calls"], int) and 0 <= r["gc_calls"] <= CALLS, r
        assert (r["gc_p50_us"] > 0) == (r["gc_calls"] > 0), r
        if r["gc_calls"] < CALLS:
            assert 0 < r["p99_no_gc_us"] and math.isfinite(r["p99_no_gc_us"]), r
        assert r["work_p50"] > 0 and math.isfinite(r["work_p50"]), r
        assert isinstance(r["over_budget_used"], int) and 0 <= r["over_budget_used"] <= CALLS, r
        if r["policy"] == NATIVE:
            assert r["fallbacks"] == 0 and r["decisions"] == 0 and r["overhead_p50_us"] == 0
            if r["mode"] == "request":  # sizes alternate along the queue: FIFO's head run is one request
                assert r["admitted_per_call"] == 1.0, r
        else:
            # every call has waiting requests and no wave running: the policy decides or FIFO serves
            assert isinstance(r["decisions"], int) and r["decisions"] + r["fallbacks"] >= CALLS, r


def test_machine_probe_marks_the_calls_beside_a_slow_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe 10x its median (the machine running slow) marks the call before and the call after it."""
    from rlsched.integrations.vllm_omni.harness import overhead

    times = iter([20_000] * 3 + [200_000] + [20_000] * 10)
    monkeypatch.setattr(overhead, "probe", lambda: next(times))
    sched = overhead.native_scheduler(False)
    cell = overhead.time_cell(sched, 8, False, 6, 1)
    assert cell["disturbed"].tolist() == [False, False, True, True, False, False]
    assert cell["probe_us"].tolist() == [20.0, 20.0, 20.0, 200.0, 20.0, 20.0, 20.0]
    assert not cell["fell_back"].any()


def test_collections_inside_a_call_are_timed_and_set_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection forced inside every other ``schedule()`` is counted in exactly those calls,
    timed there, and left out of ``p99_no_gc_us``; one outside the calls is not counted."""
    import gc

    from rlsched.bench.plugin import _p99, _summarize
    from rlsched.integrations.vllm_omni.harness import overhead

    sched = overhead.native_scheduler(False)
    inner, calls = sched.schedule, []

    def schedule():  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) % 2 == 0:
            gc.collect()
        out = inner()
        gc.collect() if len(calls) == 3 else None  # inside the call too
        return out

    monkeypatch.setattr(sched, "schedule", schedule)
    refill = overhead.Feeder.refill
    monkeypatch.setattr(overhead.Feeder, "refill", lambda self, s, q: (refill(self, s, q), gc.collect()))  # outside
    cell = overhead.time_cell(sched, 8, False, 6, 0)
    collected = cell["gc_us"] > 0
    assert collected.tolist() == [False, True, True, True, False, True]
    free = cell["us"][~collected]
    row = _summarize(dict(cell))
    assert row["gc_calls"] == 4 and row["gc_p50_us"] > 0
    # the p99 of exactly the calls without a collection (not a comparison of two measured times, which a
    # noisy machine can flip: 43.2 <= 43.1 failed once)
    assert row["p99_no_gc_us"] == _p99(free)
    assert not any(isinstance(c, overhead.Collections) for c in gc.callbacks)  # removed after the cell


def test_table_and_command_line(result: dict) -> None:
    text = bench.table(result)
    assert "vllm-omni (native)" in text and "rl:checkpoints/default" in text
    ratio_lines = 1 + len(MODES)  # the depth-ratio heading, a line per mode
    assert len(text.splitlines()) == 3 + len(result["rows"]) + ratio_lines  # title, head, rule, rows, ratios
    assert f"p99 at {QUEUES[-1]:,} waiting / p99 at {QUEUES[0]:,}" in text
    kw = bench.parse(argparse.Namespace(policies="", queues="", modes="step", calls=None, rounds=1))
    assert kw == {"policies": list(bench.POLICIES), "queues": [16, 256, 1024, 4096], "modes": ["step"],
                  "calls": bench.CALLS, "rounds": 1, "threads": ["auto"], "calibrate": True}
    assert bench.parse(argparse.Namespace(policies="", queues="", modes="step", calls=None, rounds=1,
                                          calibrate="off"))["calibrate"] is False
    with pytest.raises(ConfigError, match="--calibrate"):
        bench.parse(argparse.Namespace(policies="", queues="", modes="step", calls=None, rounds=1, calibrate="of"))
    with pytest.raises(ConfigError, match="--decision-threads"):
        bench.parse(argparse.Namespace(policies="", queues="", modes="step", calls=None, rounds=1,
                                       decision_threads="auto,gpu"))
    with pytest.raises(ConfigError, match="--modes"):
        bench.parse(argparse.Namespace(policies="", queues="", modes="request,wave", calls=None, rounds=1))
    with pytest.raises(ConfigError, match="--rounds"):
        bench.parse(argparse.Namespace(policies="", queues="", modes="step", calls=None, rounds=0))


def test_depth_ratios_compare_the_deepest_queue_with_256_and_discount_a_slow_machine() -> None:
    """p99 at the deepest queue over p99 at 256 (the smallest depth when 256 is not measured); the machine
    ratio divides each cell by its median probe, so a cell timed while the VM ran 2x slower is not charged."""
    from rlsched.bench.plugin import depth_ratios

    def row(queue: int, p99: float, probe: float, policy: str = "edf", work: float = 100.0) -> dict:
        return {"mode": "request", "policy": policy, "decision_thread": "", "queue": queue, "p99_us": p99,
                "probe_p50_us": probe, "work_p50": work}

    rows = [row(16, 50.0, 15.0), row(256, 100.0, 15.0, work=200.0), row(4096, 300.0, 30.0, work=250.0),
            row(16, 10.0, 15.0, "fifo"), row(64, 15.0, 15.0, "fifo"), row(256, 7.0, 15.0, "one depth only")]
    got = {r["policy"]: r for r in depth_ratios(rows)}
    assert set(got) == {"edf", "fifo"}
    assert (got["edf"]["from"], got["edf"]["to"], got["edf"]["p99_ratio"], got["edf"]["p99_ratio_machine"],
            got["edf"]["work_ratio"]) == (256, 4096, 3.0, 1.5, 1.25)
    assert (got["fifo"]["from"], got["fifo"]["to"], got["fifo"]["p99_ratio"]) == (16, 64, 1.5)


def test_rounds_pool_each_cells_calls() -> None:
    """Two rounds: every cell measured twice (the second round deepest queue first), one row each."""
    labels: list[str] = []
    result = measure(policies=("fifo",), queues=(8, 16), modes=("request",), calls=3, warmup=1,
                     progress=labels.append, rounds=2)
    assert labels == ["request vllm-omni @8", "request fifo @8", "request vllm-omni @16", "request fifo @16",
                      "request vllm-omni @16", "request fifo @16", "request vllm-omni @8", "request fifo @8"]
    assert [(r["policy"], r["queue"], r["calls"]) for r in result["rows"]] == [
        ("vllm-omni", 8, 6), ("fifo", 8, 6), ("vllm-omni", 16, 6), ("fifo", 16, 6)]
    assert result["calls"] == 6 and result["rounds"] == 2
    assert "2 rounds" in bench.table(result)


def test_decision_threads_are_timed_side_by_side() -> None:
    """``--decision-threads engine,worker``: both runners in every cell, interleaved; the rows say which."""
    labels: list[str] = []
    result = measure(policies=("edf",), queues=(8,), modes=("request",), calls=3, warmup=1,
                     progress=labels.append, threads=("engine", "worker"))
    assert labels == ["request vllm-omni @8", "request edf @8 [engine]", "request edf @8 [worker]"]
    assert [(r["policy"], r["decision_thread"]) for r in result["rows"]] == [
        ("vllm-omni", ""), ("edf", "engine"), ("edf", "worker")]
    assert all(r["fallbacks"] == 0 for r in result["rows"])
    work = {r["decision_thread"]: r["work_p50"] for r in result["rows"]}
    # the profile sees the engine thread only: a worker's decision is not counted, not counted as nothing
    assert work[""] > 0 and work["engine"] > work[""] and math.isnan(work["worker"])
    text = bench.table(result)
    assert "edf [engine]" in text and "edf [worker]" in text


@pytest.mark.slow
def test_a_calls_work_does_not_grow_with_the_queue() -> None:
    """Every shipped policy, both modes: the function calls a ``schedule()`` makes at 4,096 waiting are
    within 1.5x of those at 1,024 (work linear in the queue would make ~4x as many: a rebuild of the
    queue index every call made 3.9x for edf and static; a bisection makes ~1.2x). Counted, not timed:
    no machine's speed changes it. From 1,024: below it the bench's queue does not hold every request
    group yet (at 256 the realtime groups drain as they arrive), so the candidate policies have fewer
    candidates to weigh."""
    result = measure(policies=bench.POLICIES, queues=(1024, 4096), modes=MODES, calls=1, warmup=1)
    ratios = {(r["mode"], r["policy"]): r["work_ratio"] for r in result["depth_ratios"]}
    assert set(ratios) == {(m, p) for m in MODES for p in (NATIVE, *bench.POLICIES)}
    assert all(ratio <= 1.5 for ratio in ratios.values()), ratios


def test_the_bench_plugin_calibrates_as_deployed_on_a_gpu_that_moves_the_calibrator() -> None:
    """Calibration on by default (the settings users deploy), against a fake GPU whose batch durations drift:
    new versions come while the calls are timed (their cost is the bench's to time, and
    ``test_calibration_versions``'s to count); ``calibrate=False`` serves the shipped profile (a policy's own
    ``calibrate`` option kept)."""
    from rlsched.integrations.vllm_omni.harness import overhead

    cell = _cell("edf", calibrate=True)
    assert cell["versions"] >= 2, cell
    for policy, calibrate, calibrated in (("fifo", False, False), ("fifo;calibrate=on", False, True),
                                          ("fifo", True, True)):
        sched = overhead.plugin_scheduler(policy, step=False, calibrate=calibrate)
        try:
            assert (sched.rl_state.calibrator is not None) is calibrated, policy
        finally:
            overhead.close(sched)


def _cell(policy: str, calibrate: bool) -> dict:
    from rlsched.integrations.vllm_omni.harness import overhead

    sched = overhead.plugin_scheduler(policy, step=False, calibrate=calibrate)
    try:
        return overhead.time_cell(sched, 256, False, 100, 3)
    finally:
        overhead.close(sched)


def test_decisions_used_past_the_budget_are_counted_apart_from_fallbacks() -> None:
    """A lone overrun and the first call after a reset are used (guard.py): the bench says how many, so 0
    fallbacks cannot hide them."""
    from types import SimpleNamespace

    from rlsched.integrations.vllm_omni.harness.overhead import _over_budget_used

    assert _over_budget_used(SimpleNamespace()) == 0  # vLLM-Omni's own scheduler: no guard
    assert _over_budget_used(SimpleNamespace(_guard=SimpleNamespace(lone_overruns=2, rebuilds_over_budget=1))) == 3
