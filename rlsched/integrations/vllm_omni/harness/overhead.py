"""The cost of one ``schedule()`` call in the real vLLM-Omni schedulers (``rlsched bench plugin``).

Imports vLLM-Omni (the plugin tier only); ``rlsched.bench.plugin``
imports this module when the bench runs. Real ``OmniDiffusionRequest`` objects in
the real ``RequestScheduler``/``StepScheduler`` (native) and ``RLRequestScheduler``/
``RLStepScheduler`` (the plugin, default ``PluginConfig``: decision budget and
deadline as served, online calibration on, no NVML, metrics in their own registry), with a fake runner:

- the queue is refilled to ``queue`` waiting requests before every call, four
  compatibility keys (``SIZES``) mixed, alternating ``realtime``/``batch``;
- the timed region is exactly ``sched.schedule()``: wall time (``us``) and the CPU time the
  process spent in it, every thread (``cpu_us``: the decision thread included; a call that
  waited for a core, e.g. on a shared machine, costs wall time but no CPU time);
- after the call, request mode completes the whole wave; step mode runs one denoise
  step of every scheduled request (2 steps a request) and pops what finished; the plugin's
  clock moves by the batch's duration on a GPU that drifts (``DriftingGpu``), so the calibrator
  makes a new version every few batches, as on a GPU the profile does not match.

Machine probe: this runs on shared virtual machines whose CPU now and then runs ~10x slower for
tens of milliseconds (CPU time counted: no wait for a core, every operation slower). A fixed
piece of work (``probe``, ~20 µs) is timed just before every call and after the last one; a call
is *disturbed* when either probe took more than ``PROBE_SLOWDOWN`` × the cell's median probe. Each
row reports the disturbed calls, the fallbacks among them, and the p99 of the undisturbed calls
beside the p99 of all (which stays the headline number).

Collector: ``gc.callbacks`` time every collection that runs inside a timed call (``gc_us``: its
share of the call). A young collection walks what was allocated since the last one (here mostly
vLLM-Omni's request objects, churned by the refills), so when one lands in a call it, not the
decision, sets that call's time, and it costs more the larger the heap that holds the queue
(2-4x at 4,096 waiting what it costs at 256: cache misses); each row also reports the p99 of
the calls no collection ran in.

The queue is filled and its requests moved to the collector's oldest generation
(``gc.collect(1)``, not a full collection) before the calls, as a queue built up while
serving would be. ``warmup`` untimed calls precede the timed ones in every cell, and more until
the plugin state's journal has turned over once since the fill (``steady``): from then on each
entry it drops is an old one whose record has finished, freed as a new one comes, as in an engine
that has served a few thousand requests. Before that, the records it holds pile up and the
collector runs more often than it will in serving (2 to 8 journal entries a call: 500 to 4,000
untimed calls). Fallbacks are counted over the timed calls only, like the times
(``warmup_fallback_reasons``: the untimed calls', e.g. a timeout whose back-off covered the first
timed calls).

Work: after the timed calls, ``WORK_CALLS`` more, untimed, count the function calls (Python and C:
``sys.setprofile``'s ``call`` and ``c_call`` events) each ``schedule()`` makes on the engine thread.
The count does not depend on how fast the machine runs, so it says what a call's time cannot on a
VM whose speed drifts between cells: whether the work of a call grows with the queue (work linear
in the depth would count ~4x as many calls at 4,096 as at 1,024; a bisection ~1.2x). It misses the
work inside one C call (a ``deque.index`` scan counts one) and a decision on a worker thread
(``decision_thread`` ``worker``: NaN).
"""

from __future__ import annotations

import gc
import math
import sys
import time
from collections import Counter
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry
from vllm_omni.diffusion.data import DiffusionOutput
from vllm_omni.diffusion.request import OmniDiffusionRequest
from vllm_omni.diffusion.sched import RequestScheduler, StepScheduler
from vllm_omni.diffusion.worker.utils import BatchRunnerOutput, RunnerOutput
from vllm_omni.inputs.data import OmniDiffusionSamplingParams

from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.deadline import DeadlineRunner
from rlsched.integrations.vllm_omni.metrics import PluginMetrics
from rlsched.integrations.vllm_omni.scheduler import RLRequestScheduler, RLStepScheduler, freeze_gc_heap
from rlsched.policies.base import CALIBRATE, parse_spec
from rlsched.sim.truth import rescaled

SIZES = (512, 768, 1024, 1328)
"""Height = width of the requests: four compatibility keys, mixed in the queue."""
STEPS = 2
"""Denoise steps a request: in step mode requests finish (and leave) every other call."""
MAX_NUM_SEQS = 4


# ------------------------------------------------------------------ fakes
def mk_req(rid: str, size: int, steps: int = STEPS, priority: str = "batch", slo_ms: float | None = None
           ) -> OmniDiffusionRequest:
    """A Qwen-Image-like request; ``size`` sets height = width."""
    extra: dict[str, Any] = {"priority": priority}
    if slo_ms is not None:
        extra["slo_ms"] = slo_ms
    params = OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=steps, seed=0,
                                         extra_args=extra)
    return OmniDiffusionRequest(prompt=f"prompt {rid}", sampling_params=params, request_id=rid)


def od(max_num_seqs: int = MAX_NUM_SEQS) -> SimpleNamespace:
    """The two ``od_config`` fields the schedulers read."""
    return SimpleNamespace(max_num_seqs=max_num_seqs, request_batch_max_wait_ms=0.0)


class Feeder:
    """Tops the waiting queue up to a depth with fresh requests (ids ``R0``, ``R1``, …)."""

    def __init__(self) -> None:
        self.n = 0

    def refill(self, sched: Any, queue: int) -> None:
        while sched.num_waiting_requests() < queue:
            n = self.n
            sched.add_request(mk_req(f"R{n}", SIZES[n % len(SIZES)], priority=("realtime", "batch")[n % 2],
                                     slo_ms=1000 + 37 * (n % 50)))
            self.n += 1


def pop_finished(sched: Any, finished: Iterable[str]) -> None:
    """What the engine does with finished ids: pop their state."""
    for rid in sorted(finished):
        if sched.get_request_state(rid) is not None:
            sched.pop_request_state(rid)


def finish_wave(sched: Any, out: Any) -> None:
    """Request mode: every scheduled request completes."""
    ro = BatchRunnerOutput.from_list([RunnerOutput(request_id=r, finished=True, result=DiffusionOutput())
                                      for r in out.scheduled_request_ids])
    pop_finished(sched, sched.update_from_output(out, ro))


class StepRunner:
    """Step mode: one denoise step of every scheduled request; ``step_index`` = completed steps."""

    def __init__(self) -> None:
        self.progress: dict[str, int] = {}
        self.total: dict[str, int] = {}

    def step(self, sched: Any, out: Any) -> None:
        for nr in out.scheduled_new_reqs:
            self.total[nr.request_id] = nr.req.sampling_params.num_inference_steps
            self.progress.setdefault(nr.request_id, nr.req.sampling_params.step_index or 0)
        outs = []
        for rid in out.scheduled_request_ids:
            self.progress[rid] += 1
            done = self.progress[rid] >= self.total[rid]
            outs.append(RunnerOutput(request_id=rid, step_index=self.progress[rid], finished=done,
                                     result=DiffusionOutput() if done else None))
            if done:
                del self.progress[rid], self.total[rid]
        pop_finished(sched, sched.update_from_output(out, BatchRunnerOutput.from_list(outs)))


# --------------------------------------------------------------- schedulers
def native_scheduler(step: bool) -> Any:
    sched = StepScheduler() if step else RequestScheduler()
    sched.initialize(od())
    freeze_gc_heap()  # the same heap state as the plugin's cells
    return sched


def plugin_scheduler(policy: str, step: bool, decision_thread: str = "auto", calibrate: bool = True) -> Any:
    """The plugin as served: default ``PluginConfig`` except no NVML (and ``decision_thread``);
    its own metrics registry. With ``calibrate`` (the default, as users deploy it) online calibration is
    on and the plugin's clock is a ``DriftingGpu``'s (``scheduler.gpu``): every batch the runner completes
    takes its duration on a GPU whose speed drifts, so the calibrator keeps making new versions while the
    calls are timed. ``calibrate=False`` serves ``calibrate=off`` on the wall clock (the fake runner's
    batches take microseconds), unless ``policy`` names the option itself."""
    cls = RLStepScheduler if step else RLRequestScheduler
    if not calibrate and CALIBRATE not in parse_spec(policy).options:
        policy = f"{policy};{CALIBRATE}=off"
    settings = PluginConfig(policy=policy, telemetry=False, decision_thread=decision_thread)
    gpu = DriftingGpu() if calibrate else None
    sched = cls(policy, settings, metrics=PluginMetrics(CollectorRegistry()), clock=gpu)
    sched.gpu = gpu
    sched.initialize(od())
    sched.end_warmup()  # serving starts as the engine starts it (a fresh view, the start-up heap frozen)
    return sched


class DriftingGpu:
    """The plugin clock of a calibrating cell: it stands still during a ``schedule()`` and moves by each
    batch's duration on a GPU that drifts (``run``, before the batch's ``update_from_output``): the
    shipped profile's time ×``1.25 + 0.25·sin``, its attention term ×``1 + 0.2·cos`` more, over a period
    of ``PERIOD`` batches. The fit follows it (``CostCalibrator.forget``), so a new version comes every
    few batches, at every depth alike (``versions``: how many the calibrator has made)."""

    PERIOD = 1000

    def __init__(self) -> None:
        self.t, self.batches = 1.0, 0

    def __call__(self) -> float:
        return self.t

    def run(self, sched: Any, out: Any, step: bool) -> None:
        """``out``'s batch ran: the clock moves by its duration on the drifting GPU."""
        st, ids = sched.rl_state, tuple(out.scheduled_request_ids)
        recs, done = sched._batch_records(ids, [sched._steps_done(rid) for rid in ids])
        if st is None or not recs:
            return
        phase = 2 * math.pi * self.batches / self.PERIOD
        self.batches += 1
        model = recs[0].request.model
        truth = rescaled(st.shipped, {model: (1.25 + 0.25 * math.sin(phase), 1.0 + 0.2 * math.cos(phase), 1.0)},
                         "drift")
        cfg = st.config
        self.t += truth.batch_duration([truth.record(r.request) for r in recs], step, cfg.engine_overhead_ms,
                                       cfg.engine_overhead_ms_per_mpx, done)


def versions(sched: Any) -> int:
    """The calibration versions the plugin's calibrator has made (0 without one)."""
    cal = getattr(getattr(sched, "rl_state", None), "calibrator", None)
    return cal.version if cal is not None else 0


def close(sched: Any) -> None:
    guard = getattr(sched, "_guard", None)  # the plugin's decision thread
    if guard is not None:
        guard.close()


# ------------------------------------------------------------------ timing
class Collections:
    """Nanoseconds the garbage collector ran while ``armed`` (a ``gc.callbacks`` entry; a collection
    runs to its end on the thread that started it, so start and stop pair up)."""

    def __init__(self) -> None:
        self.armed, self.ns, self._t0 = False, 0, 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.armed:
            return
        if phase == "start":
            self._t0 = time.perf_counter_ns()
        else:
            self.ns += time.perf_counter_ns() - self._t0


PROBE_SLOWDOWN = 3.0
"""A probe this many times slower than the cell's median marks the calls beside it as disturbed."""
_PROBE = np.arange(64.0)


def probe() -> int:
    """Nanoseconds of a fixed piece of work shaped like a decision's (small numpy reductions and
    Python arithmetic, ~20 µs): the machine's speed at this moment."""
    t0 = time.perf_counter_ns()
    x = 0.0
    for i in range(16):
        x += float(_PROBE.sum()) * i
    return time.perf_counter_ns() - t0


class CallCounter:
    """A ``sys.setprofile`` function counting the calls it sees (Python functions and C functions)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            self.n += 1


WORK_CALLS = 50
"""Untimed ``schedule()`` calls after the timed ones whose function calls are counted (``work``)."""


STEADY_MAX_CALLS = 10_000
"""Most untimed calls spent turning the journal over (``steady``): a policy that admits little per call
does it slowly (two entries a request, a step-mode call admits ~0.5)."""


def steady(sched: Any, queue: int) -> bool:
    """Whether the scheduler's state is as in an engine that has served a while: native vLLM-Omni keeps
    none; the plugin's once its journal has taken as many entries since the ``queue`` of the initial
    fill as it keeps (so the entries it drops are of finished requests)."""
    st = getattr(sched, "rl_state", None)
    return st is None or st.journal.end >= queue + st.journal.keep


def time_cell(sched: Any, queue: int, step: bool, calls: int, warmup: int) -> dict[str, Any]:
    """``calls`` timed ``schedule()`` calls with ``queue`` requests waiting at each: ``us`` and
    ``cpu_us`` (each call's wall and process CPU microseconds), the fallbacks and decisions
    counted during the timed calls, and the machine probe's verdict (module docstring):
    ``disturbed`` (per call), ``fell_back`` (per call), ``probe_us``, ``admitted`` (requests each
    call admitted: a policy whose batches grow with the queue does more work per call there),
    ``gc_us`` (µs the garbage collector ran inside each call), ``versions`` (new calibration versions during
    the timed calls: ``DriftingGpu``), ``over_budget_used`` (decisions past the budget the guard used: a lone
    overrun, or the first after a reset) and ``work`` (function calls in each of
    ``WORK_CALLS`` untimed calls after them; NaN where the decision runs on a worker thread)."""
    feeder, runner, collections = Feeder(), StepRunner(), Collections()
    us, cpu, admitted, gc_us = np.empty(calls), np.empty(calls), np.zeros(calls), np.zeros(calls)
    probes, fell_back = np.empty(calls + 1), np.zeros(calls, dtype=bool)
    feeder.refill(sched, queue)
    # the queue is built in one go here; in serving it built up over many collections, and its
    # requests sit in the oldest generation. Without this the young collections of the first
    # timed calls walk the whole fill (~3 ms at 4,096), a cost of the set-up, not of the depth.
    gc.collect(1)
    gc.callbacks.append(collections)
    try:
        for i in range(warmup + STEADY_MAX_CALLS):  # untimed until warmed up and steady
            if i >= warmup and steady(sched, queue):
                break
            feeder.refill(sched, queue)
            _complete(sched, sched.schedule(), step, runner)
        fb0, reasons0, dec0 = _counts(sched)
        v0, over0 = versions(sched), _over_budget_used(sched)
        for i in range(calls):
            feeder.refill(sched, queue)
            before = int(getattr(sched, "fallbacks", 0))
            probes[i] = probe() / 1e3
            collections.ns, collections.armed = 0, True
            c0, t0 = time.process_time_ns(), time.perf_counter_ns()
            out = sched.schedule()
            dt, dc = time.perf_counter_ns() - t0, time.process_time_ns() - c0
            collections.armed = False
            us[i], cpu[i], gc_us[i] = dt / 1e3, dc / 1e3, collections.ns / 1e3
            fell_back[i] = int(getattr(sched, "fallbacks", 0)) > before
            admitted[i] = len(out.scheduled_new_reqs)
            _complete(sched, out, step, runner)
    finally:
        gc.callbacks.remove(collections)
    probes[calls] = probe() / 1e3
    slow = probes > PROBE_SLOWDOWN * float(np.median(probes))
    fb, reasons, dec = _counts(sched)  # before the counted calls: profiled, they run slower than served
    new_versions = versions(sched) - v0
    over_budget_used = _over_budget_used(sched) - over0
    work = _count_work(sched, queue, step, runner, feeder, WORK_CALLS)
    reasons.subtract(reasons0)
    return {"us": us, "cpu_us": cpu, "fallbacks": fb - fb0, "fallback_reasons": _positive(reasons),
            "decisions": dec - dec0, "warmup_fallback_reasons": _positive(reasons0), "versions": new_versions,
            "over_budget_used": over_budget_used,
            "disturbed": slow[:-1] | slow[1:], "fell_back": fell_back, "probe_us": probes,
            "admitted": admitted, "gc_us": gc_us, "work": work}


def _over_budget_used(sched: Any) -> int:
    """Decisions past the budget that the guard used all the same (a lone overrun, or the first call after a
    reset: ``guard.py``): not fallbacks, but the calls that would have been before issue 47's guard rules."""
    guard = getattr(sched, "_guard", None)
    return 0 if guard is None else guard.lone_overruns + guard.rebuilds_over_budget


def _count_work(sched: Any, queue: int, step: bool, runner: StepRunner, feeder: Feeder, calls: int) -> np.ndarray:
    """Function calls in each of ``calls`` more ``schedule()`` calls (module docstring), the decision
    budget lifted for them; NaN for a call that fell back to FIFO all the same (the deadline, a back-off),
    and for every call when the decision runs on a thread the profile does not see."""
    work = np.full(calls, np.nan)
    guard = getattr(sched, "_guard", None)
    if guard is not None and isinstance(guard.runner, DeadlineRunner):
        return work
    counter = CallCounter()
    budget = guard.budget_s if guard is not None else None
    if guard is not None:  # profiled, a call runs 2-4x slower: not a reason to cut it to FIFO here
        guard.budget_s = float("inf")
    try:
        for i in range(calls):
            feeder.refill(sched, queue)
            before = int(getattr(sched, "fallbacks", 0))
            counter.n = 0
            sys.setprofile(counter)
            try:
                out = sched.schedule()
            finally:
                sys.setprofile(None)
            if int(getattr(sched, "fallbacks", 0)) == before:  # a FIFO fallback's calls are not the policy's work
                work[i] = counter.n
            _complete(sched, out, step, runner)
    finally:
        if guard is not None and budget is not None:
            guard.budget_s = budget
    return work


def _complete(sched: Any, out: Any, step: bool, runner: StepRunner) -> None:
    """What the runner does with a call's batch: one step of each (step mode), the whole wave (request mode);
    a calibrating cell's clock moves by the batch's duration first (``DriftingGpu``)."""
    gpu = getattr(sched, "gpu", None)
    if gpu is not None:
        gpu.run(sched, out, step)
    if step:
        runner.step(sched, out)
    else:
        finish_wave(sched, out)


def _positive(counts: Counter[str]) -> dict[str, int]:
    return {k: int(v) for k, v in sorted(counts.items()) if v > 0}


def _counts(sched: Any) -> tuple[int, Counter[str], int]:
    return (int(getattr(sched, "fallbacks", 0)), Counter(getattr(sched, "fallback_reasons", {})),
            int(getattr(sched, "decisions", 0)))
