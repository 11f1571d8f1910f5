"""``publish_state``: a replica running RLDiffusionEngine publishes its scheduler state to the router in the
orchestrator (``rlsched.routing.views``), inside vLLM-Omni's real DiffusionEngine busy loop and its
``step_streaming`` (fake executor, no model; the plugin clock frozen, so ``remaining_s`` is exactly the
batch's predicted time)."""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from vllm_omni.diffusion.data import (  # noqa: E402
    OmniDiffusionConfig,
    is_diffusion_request_started_output,
)
from vllm_omni.diffusion.diffusion_engine import DiffusionEngine  # noqa: E402

from rlsched.integrations.vllm_omni import RLDiffusionEngine, RLRequestScheduler, RLStepScheduler  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.routing.views import STATE_KEY, ReplicaState  # noqa: E402
from tests.vllm.fakes import Clock, RunNothingExecutor, mk_req, plugin  # noqa: E402

BACKEND = "rlsched.integrations.vllm_omni.RLDiffusionEngine"


class FakePipe:
    supports_request_batch = True


class CostedExecutor(RunNothingExecutor):
    """Runs nothing (``RunNothingExecutor``) and notes, per call, the batch and the time the plugin's cost
    model gives it (the executor's own count of steps done). ``gate`` holds a step until the test sets it."""

    def _init_executor(self) -> None:
        super()._init_executor()
        self.calls: list[tuple[list[str], float]] = []
        self.sched: Any = None
        self.gate = threading.Event()
        self.gate.set()

    def _record(self, so, ids, step) -> None:
        if step:
            assert self.gate.wait(30)
        st = self.sched.rl_state
        recs = [st.records[st.int_id(r)] for r in ids]
        self.calls.append((ids, st.cost.batch_duration(recs, step, steps_done=[self.progress.get(r, 0) for r in ids])))


def make_engine(policy: str, step: bool, publish: bool, max_num_seqs: int = 2) -> RLDiffusionEngine:
    settings = PluginConfig(policy=policy, telemetry=False, decision_budget_ms=60e3, decision_deadline_ms=60e3,
                            publish_state=publish)
    od = OmniDiffusionConfig(max_num_seqs=max_num_seqs, request_batch_max_wait_ms=0, step_execution=step,
                             distributed_executor_backend=CostedExecutor,
                             custom_pipeline_args={"pipeline_class": FakePipe}, engine_backend=BACKEND)
    cls = RLStepScheduler if step else RLRequestScheduler
    engine = RLDiffusionEngine(od, scheduler=cls(settings=settings, clock=Clock(100.0)))
    engine.executor.sched = engine.scheduler
    engine.history = []  # (at, running ids) after every schedule() ("s") and update_from_output ("u")
    sched = engine.scheduler

    def spy(name: str, at: str) -> None:
        real = getattr(sched, name)

        def call(*args: Any) -> Any:
            out = real(*args)
            engine.history.append((at, tuple(sched._running)))
            return out
        setattr(sched, name, call)

    spy("schedule", "s")
    spy("update_from_output", "u")
    return engine


async def _stream(engine: RLDiffusionEngine, request: Any, got: list) -> None:
    async for outputs in engine.step_streaming(request):
        for out in outputs:
            got.append((request.request_id, out))


async def _until(cond, what: str) -> None:
    for _ in range(3000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def serve_queued(engine: RLDiffusionEngine, reqs: list) -> list[tuple[str, Any]]:
    """Every request queued before the first schedule() (the engine's own pause), then served."""
    got: list[tuple[str, Any]] = []

    async def main() -> None:
        engine._scheduling_paused = True
        tasks = [asyncio.create_task(_stream(engine, r, got)) for r in reqs]
        await _until(lambda: len(engine.scheduler._waiting) == len(reqs), "the queue")
        with engine._cv:
            engine._scheduling_paused = False
            engine._cv.notify_all()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    return got


def serve_preempting(engine: RLDiffusionEngine) -> list[tuple[str, Any]]:
    """Step mode: A runs; B (another key, a tighter deadline) arrives during A's first step and EDF
    preempts A for it; A resumes after B."""
    got: list[tuple[str, Any]] = []
    executor = engine.executor
    executor.gate.clear()

    async def main() -> None:
        a = asyncio.create_task(_stream(engine, mk_req("A", steps=4, slo_ms=60_000), got))
        await _until(lambda: engine.scheduler._running == ["A"], "A's first step")
        b = asyncio.create_task(_stream(engine, mk_req("B", 1024, steps=2, slo_ms=1000), got))
        await _until(lambda: "B" in engine.scheduler._waiting, "B queued")
        executor.gate.set()
        await asyncio.wait_for(asyncio.gather(a, b), 30)

    try:
        asyncio.run(main())
    finally:
        engine.close()
    return got


def changes(engine: RLDiffusionEngine) -> list[tuple[str, ...]]:
    """The running sets a schedule() started (the set differs from the one before it)."""
    out, before = [], set()
    for at, running in engine.history:
        if at == "s" and set(running) != before:
            out.append(running)
        before = set(running)
    return out


def check_published(got: list[tuple[str, Any]], names: str) -> dict[int, dict]:
    """Every output carries a readable state; one seq, one state; each request runs in a state before one
    lists it finished, and its last output's state comes no earlier. Returns the states by seq."""
    by_seq: dict[int, dict] = {}
    for _, out in got:
        state = out.metrics[STATE_KEY]
        ReplicaState.read(state)
        same = {k: v for k, v in state.items() if k != "carrier"}
        assert by_seq.setdefault(state["seq"], same) == same
    started, finished = {}, {}
    for seq in sorted(by_seq):
        for rid, _ in by_seq[seq]["running"]:
            started.setdefault(rid, seq)
            assert rid not in finished, f"{rid} runs after it finished"
        for rid in by_seq[seq]["finished"]:
            finished.setdefault(rid, seq)
    assert set(started) == set(finished) == set(names)
    assert all(started[r] < finished[r] for r in names)
    for rid, out in got:
        if out.finished:
            assert out.metrics[STATE_KEY]["seq"] >= finished[rid]
    return by_seq


def test_request_mode_publishes_every_wave_and_finish_with_one_carrier_per_wave() -> None:
    engine = make_engine("fifo", step=False, publish=True)
    reqs = [mk_req(n, emit_request_lifecycle=(n == "C")) for n in "ABCDE"]  # C opted into lifecycle events
    got = serve_queued(engine, reqs)
    executor = engine.executor
    assert [ids for ids, _ in executor.calls] == [["A", "B"], ["C", "D"], ["E"]]
    assert changes(engine) == [("A", "B"), ("C", "D"), ("E",)]
    check_published(got, "ABCDE")
    carriers = [(rid, out) for rid, out in got if out.metrics[STATE_KEY].get("carrier")]
    # one carrier per new wave, in order, on its first request that did not opt in (C's own started
    # output is C's client's: it carries the state but is no carrier)
    assert [rid for rid, _ in carriers] == ["A", "D", "E"]
    assert all(is_diffusion_request_started_output(out) and not out.finished for _, out in carriers)
    states = [out.metrics[STATE_KEY] for _, out in carriers]
    assert [s["seq"] for s in states] == sorted({s["seq"] for s in states})
    assert [[rid for rid, _ in s["running"]] for s in states] == [["A", "B"], ["C", "D"], ["E"]]
    assert all(done == 0 for s in states for _, done in s["running"])
    # remaining_s: the wave's predicted time (the plugin clock stands still), as the cost model gives it
    assert [s["remaining_s"] for s in states] == pytest.approx([cost for _, cost in executor.calls], rel=1e-12)
    assert all(s["remaining_s"] > 0 for s in states)
    started = [(rid, out) for rid, out in got if is_diffusion_request_started_output(out)]
    assert [rid for rid, out in started if not out.metrics[STATE_KEY].get("carrier")] == ["C"]
    assert engine.scheduler.fallbacks == 0


def test_step_mode_publishes_a_preemption_and_the_resumed_request() -> None:
    engine = make_engine("edf", step=True, publish=True)
    got = serve_preempting(engine)
    executor = engine.executor
    assert [ids for ids, _ in executor.calls] == [["A"], ["B"], ["B"], ["A"], ["A"], ["A"]]
    assert engine.scheduler.preemptions == 1
    assert changes(engine) == [("A",), ("B",), ("A",)]
    by_seq = check_published(got, "AB")
    carriers = [(rid, out.metrics[STATE_KEY]) for rid, out in got if out.metrics[STATE_KEY].get("carrier")]
    assert [rid for rid, _ in carriers] == ["A", "B", "A"]  # A's first step, B joins (A leaves), A resumes
    assert [s["running"] for _, s in carriers] == [[["A", 0]], [["B", 0]], [["A", 1]]]
    assert carriers[1][1]["preempted"] == [["A", 1]]  # A left the batch unfinished, one step done
    assert [s["seq"] for _, s in carriers] == sorted(s["seq"] for _, s in carriers)
    # remaining_s: the current step's predicted end (the first step of each: encode included)
    assert [s["remaining_s"] for _, s in carriers] == pytest.approx(
        [executor.calls[i][1] for i in (0, 1, 3)], rel=1e-12)
    preempted = [seq for seq, s in by_seq.items() if s["preempted"]]
    assert preempted and all(by_seq[seq]["preempted"] == [["A", 1]] for seq in preempted)
    assert all(is_diffusion_request_started_output(out) for rid, out in got
               if out.metrics[STATE_KEY].get("carrier"))
    assert sum(1 for _, out in got if is_diffusion_request_started_output(out)) == 3


@pytest.mark.parametrize("step", [False, True])
def test_off_the_outputs_are_vllm_omnis_own(step: bool) -> None:
    engine = make_engine("edf" if step else "fifo", step=step, publish=False)
    assert engine.scheduler.publisher is None
    gen = engine.step_streaming(mk_req("X"))  # vLLM-Omni's own generator, not a wrapper
    assert inspect.isasyncgen(gen) and gen.ag_code is DiffusionEngine.step_streaming.__code__
    asyncio.run(gen.aclose())
    if step:
        got = serve_preempting(engine)
        assert engine.scheduler.preemptions == 1
    else:
        got = serve_queued(engine, [mk_req(n, emit_request_lifecycle=(n == "C")) for n in "ABCDE"])
    assert got and all(STATE_KEY not in out.metrics for _, out in got)
    started = [rid for rid, out in got if is_diffusion_request_started_output(out)]
    assert started == ([] if step else ["C"])  # only the opted-in request's own
    assert sum(out.finished for _, out in got) == (2 if step else 5)


def test_remaining_follows_the_plugin_clock_and_a_carrier_is_taken_once() -> None:
    clock = Clock(10.0)
    sched = plugin("fifo", clock=clock, publish_state=True)
    for name in "AB":
        sched.add_request(mk_req(name))
    sched.schedule()
    st = sched.rl_state
    predicted = st.cost.batch_duration([st.records[st.int_id(n)] for n in "AB"])
    carrier = sched.take_carrier()
    assert carrier is not None and sched.take_carrier() is None
    assert sched.publisher.message(carrier, carrier=True)["remaining_s"] == pytest.approx(predicted)
    clock.t += predicted / 4
    message = sched.publisher.message()
    assert message["remaining_s"] == pytest.approx(predicted * 3 / 4) and "carrier" not in message
    clock.t += predicted
    assert sched.publisher.message()["remaining_s"] == 0.0  # past its predicted end: about to end
    seq = sched.publisher.latest.seq
    sched.schedule()  # mid-wave: nothing changed, no new state
    assert sched.publisher.latest.seq == seq and sched.take_carrier() is None


def test_a_state_is_built_from_the_batch_not_the_queue() -> None:
    """schedule() stays flat: the state lists the running batch only, whatever waits behind it."""
    sched = plugin("fifo", step=True, max_num_seqs=2, publish_state=True)
    for i in range(300):
        sched.add_request(mk_req(f"r{i}", steps=2))
    out = sched.schedule()
    state = sched.publisher.latest
    assert [rid for rid, _ in state.running] == ["r0", "r1"] == out.scheduled_request_ids
    assert state.finished == state.preempted == ()
