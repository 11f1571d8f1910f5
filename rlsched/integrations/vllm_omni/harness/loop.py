"""Sim-in-the-loop: a real vLLM-Omni scheduler decides, the simulator plays clock and GPU.

``run_in_loop`` replays a seeded workload through any vLLM-Omni diffusion scheduler
(vLLM-Omni's own ``RequestScheduler``/``StepScheduler`` or the plugin's) the way
``DiffusionEngine``'s busy loop drives it — ``add_request`` at each arrival, the
admission wait, ``schedule()``, ``update_from_output()``, ``pop_request_state()`` —
while a ``Simulator`` supplies the clock and runs each scheduled batch with its cost
model. The result is an ordinary finished ``Simulator``, so ``summarize`` reports the
same metrics as a pure simulation of the same workload.

The engine's admission wait (``_wait_for_admission_if_needed_locked``) is replayed with
the scheduler's own ``get_admission_wait_decision``/``should_end_admission_wait`` on the
simulated clock, in continuous time: where the engine polls every 2 ms, the loop looks
exactly at the next arrival, the stable-window end and the deadline — the same
idealisation as ``Fifo._admission_wait`` in the simulator.

Run ``python -m rlsched.integrations.vllm_omni.harness.loop --help`` for the comparison table.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from vllm_omni.diffusion.data import DiffusionOutput
from vllm_omni.diffusion.request import OmniDiffusionRequest
from vllm_omni.diffusion.sched import RequestScheduler, StepScheduler
from vllm_omni.diffusion.worker.utils import BatchRunnerOutput, RunnerOutput
from vllm_omni.inputs.data import OmniDiffusionSamplingParams

from rlsched import bounds
from rlsched.argtypes import flag, seed_arg
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.metrics import PluginMetrics
from rlsched.integrations.vllm_omni.scheduler import RLRequestScheduler, RLStepScheduler
from rlsched.policies import make_policy
from rlsched.policies.base import calibrates
from rlsched.sim import load_scenario
from rlsched.sim.cost import CostModel
from rlsched.sim.metrics import summarize
from rlsched.sim.request import COMPLETED, Request
from rlsched.sim.simulator import Decision, ServingConfig, Simulator
from rlsched.sim.telemetry import SimTelemetry
from rlsched.sim.truth import Truth

CFG_GUIDANCE = 4.0
"""guidance_scale sent for a request with CFG (> 1 turns CFG on); None (→ 1.0) without."""


class SimClock:
    """The plugin's clock in the loop: simulated seconds, set by the driver."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class LoopResult:
    sim: Simulator
    """The finished simulator (records, metrics via ``summarize``)."""
    batches: list[tuple[int, ...]] = field(default_factory=list)
    """Request ids of every scheduled batch (sorted), in order; step mode: one per step."""
    scheduler: Any = None


def to_vllm_request(req: Request) -> OmniDiffusionRequest:
    """The vLLM-Omni request a client would send for ``req`` (priority/SLO in ``extra_args``)."""
    extra: dict[str, Any] = {"priority": req.priority}
    if math.isfinite(req.slo_s):
        extra["slo_ms"] = req.slo_s * 1e3
    params = OmniDiffusionSamplingParams(
        height=req.height, width=req.width, num_frames=req.num_frames,
        num_inference_steps=req.num_inference_steps, guidance_scale=CFG_GUIDANCE if req.cfg else None,
        seed=0, extra_args=extra)
    # condition_key keeps different models apart, as the simulator's key does
    return OmniDiffusionRequest(prompt=f"request {req.id}", sampling_params=params, request_id=str(req.id),
                                batch_compatibility_key=(req.model,))


def make_loop_scheduler(serving: ServingConfig, cost: CostModel, policy: str | None = None,
                        clock: SimClock | None = None, settings: PluginConfig | None = None) -> Any:
    """An initialized scheduler: vLLM-Omni's own (``policy=None``) or the plugin's.

    The plugin gets an effectively unlimited decision budget: the loop checks what the
    plugin decides, not how fast (a "slow" fallback would make runs machine-dependent).
    """
    od = SimpleNamespace(max_num_seqs=serving.max_num_seqs,
                         request_batch_max_wait_ms=serving.request_batch_max_wait_ms)
    if policy is None:
        sched = StepScheduler() if serving.step_mode else RequestScheduler()
    else:
        settings = settings or PluginConfig(policy=policy, profile=cost.name, decision_budget_ms=bounds.MAX_MS,
                                            decision_deadline_ms=bounds.MAX_MS,
                                            telemetry=False)
        cls = RLStepScheduler if serving.step_mode else RLRequestScheduler
        sched = cls(policy, settings, cost=cost, clock=clock, metrics=PluginMetrics(_registry()))
    sched.initialize(od)
    return sched


def _registry() -> Any:
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:
        return None
    return CollectorRegistry()


def run_in_loop(requests: Sequence[Request], cost: CostModel, serving: ServingConfig, scheduler: Any,
                clock: SimClock | None = None) -> LoopResult:
    """Drive ``scheduler`` over ``requests`` with the simulator as clock and GPU (an out-of-memory batch's
    requests queued again where the plugin retries them: a plugin that calibrates)."""
    state = getattr(scheduler, "rl_state", None)
    sim = Simulator(requests, cost, serving, retry_oom=getattr(state, "calibrator", None) is not None)
    if state is not None:  # the simulator plays the GPU, so it also plays NVML
        state.use_telemetry(SimTelemetry(sim))
    clock = clock or SimClock()
    result = LoopResult(sim, scheduler=scheduler)
    arrivals = sorted(requests, key=lambda r: r.arrival_s)  # the simulator's order
    nxt, inflight, end, oom = 0, None, 0.0, False
    wait = _AdmissionWait(scheduler)

    def arrive_until(t: float, nxt: int) -> int:
        while nxt < len(arrivals) and arrivals[nxt].arrival_s <= t:
            clock.t = arrivals[nxt].arrival_s  # the engine adds a request when it arrives
            scheduler.add_request(to_vllm_request(arrivals[nxt]))
            nxt += 1
        return nxt

    while sim.advance_to_next_decision():
        if inflight is not None:  # the engine hears of a finished batch when the GPU ends it
            nxt = arrive_until(end, nxt)
            clock.t = end
            _complete(scheduler, inflight, sim, oom)
            inflight = None
        nxt = arrive_until(sim.now, nxt)
        clock.t = sim.now
        wake = wait.wake_time(sim.now)
        if wake is not None:
            sim.apply(Decision((), wait_until=wake))
            continue
        out = scheduler.schedule()
        ids = tuple(int(rid) for rid in out.scheduled_request_ids)
        if not ids:
            raise RuntimeError(f"t={sim.now:.6f}: schedule() returned no batch while requests wait (a stall)")
        result.batches.append(tuple(sorted(ids)))
        ooms = sim.oom_batches
        sim.apply(Decision(ids))
        inflight, end, oom = out, sim.gpu_end_s if sim.gpu_end_s != math.inf else sim.now, sim.oom_batches > ooms
    if inflight is not None:
        clock.t = sim.now
        _complete(scheduler, inflight, sim, oom)
    return result


class _AdmissionWait:
    """``DiffusionEngine._wait_for_admission_if_needed_locked`` on the simulated clock."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.active: tuple[Any, float, int] | None = None  # (decision, stable_since, last_waiting)

    def wake_time(self, now: float) -> float | None:
        """None: schedule now; else keep waiting and look again at this time (or the next arrival)."""
        s = self.scheduler
        if self.active is None:
            decision = s.get_admission_wait_decision(now=now)
            if not decision.should_wait:
                return None
            self.active = (decision, now, -1)
        decision, stable_since, last = self.active
        waiting = s.num_waiting_requests()
        if waiting > last:
            stable_since, last = now, waiting
        self.active = (decision, stable_since, last)
        if self._ends(decision, now, stable_since):
            self.active = None
            return None
        return min(decision.deadline, stable_since + decision.stable_window_s)

    def _ends(self, decision: Any, now: float, stable_since: float) -> bool:
        # Woken exactly at stable_since + window, (a + b) - a can round just below b; the
        # engine polls every 2 ms and always looks past the boundary, so look a few ulps on.
        t = now
        for _ in range(4):
            if self.scheduler.should_end_admission_wait(decision, now=t, stable_since=stable_since):
                return True
            t = math.nextafter(t, math.inf)
        return False


def _complete(scheduler: Any, out: Any, sim: Simulator, oom: bool) -> None:
    """The worker's reply for a finished batch (``oom``: it ran out of memory), then what the engine does
    with it."""
    outputs = []
    for rid in out.scheduled_request_ids:
        rec = sim.records[int(rid)]
        if oom:
            outputs.append(RunnerOutput(request_id=rid, finished=True,
                                        result=DiffusionOutput(error="CUDA out of memory (simulated)")))
        elif sim.step_mode:
            done = rec.status == COMPLETED
            outputs.append(RunnerOutput(request_id=rid, step_index=rec.steps_done, finished=done,
                                        result=DiffusionOutput() if done else None))
        else:
            outputs.append(RunnerOutput(request_id=rid, finished=True, result=DiffusionOutput()))
    finished = scheduler.update_from_output(out, BatchRunnerOutput.from_list(outputs))
    for rid in sorted(finished):
        if scheduler.get_request_state(rid) is not None:  # finished_req_ids repeats popped ids
            scheduler.pop_request_state(rid)


class Recorder:
    """Wraps a policy and records every batch it starts (step mode: one per step), as the simulator's memory
    check cuts it (``Simulator.admitted_batch``)."""

    def __init__(self, policy: Any) -> None:
        self.policy, self.name = policy, getattr(policy, "name", "policy")
        self.batches: list[tuple[int, ...]] = []

    def reset(self, state: Any) -> None:
        self.policy.reset(state)

    def decide(self, state: Any) -> Decision:
        decision = self.policy.decide(state)
        if decision.batch:
            self.batches.append(tuple(sorted(state.admitted_batch(tuple(decision.batch)))))
        return decision


def compare(scenario: str = "default", policy: str = "fifo", seed: int = 0, duration_s: float | None = None,
            rate_scale: float = 1.0, mode: str | None = None, wait_ms: float | None = None,
            plugin: bool | None = None, truth: Truth | None = None) -> dict[str, Any]:
    """The same seeded workload twice: pure simulator, and simulator + real scheduler.

    ``plugin`` (default: any policy but fifo) drives the plugin scheduler with ``policy``;
    otherwise vLLM-Omni's own scheduler runs (only meaningful for ``fifo``). ``truth``: the GPU runs at
    that cost (``rlsched.sim.truth``) while both decide on the scenario's profile, each calibrating it
    online unless the policy says ``calibrate=off``.
    """
    sc = load_scenario(scenario)
    changes = {k: v for k, v in (("mode", mode), ("request_batch_max_wait_ms", wait_ms)) if v is not None}
    sc = sc.with_serving(**changes) if changes else sc
    cost = sc.cost()
    true = truth.apply(cost) if truth is not None else None
    reqs = sc.requests(seed, rate_scale, duration_s, cost=cost)
    recorder = Recorder(make_policy(policy))
    pure = Simulator(reqs, cost, sc.serving, truth=true, calibrate=calibrates(policy)).run(recorder)
    use_plugin = policy != "fifo" if plugin is None else plugin
    clock = SimClock()
    sched = make_loop_scheduler(sc.serving, cost, policy if use_plugin else None, clock)
    loop = run_in_loop(reqs, true or cost, sc.serving, sched, clock)
    a, b = summarize(pure), summarize(loop.sim)
    return {
        "scenario": sc.name, "policy": policy, "seed": seed, "mode": sc.serving.mode,
        "max_num_seqs": sc.serving.max_num_seqs, "wait_ms": sc.serving.request_batch_max_wait_ms,
        "requests": len(reqs), "scheduler": type(sched).__name__,
        "identical_batches": recorder.batches == loop.batches, "batches": [len(recorder.batches), len(loop.batches)],
        "slo_attainment": [a["slo_attainment"], b["slo_attainment"]],
        "weighted_slo_attainment": [a["weighted_slo_attainment"], b["weighted_slo_attainment"]],
        "calibration_versions": [pure.calibrator.version if pure.calibrator else 0,
                                 _calibration_version(sched)],
        "fallbacks": dict(getattr(sched, "fallback_reasons", {})),
        "waits_overridden": getattr(sched, "waits_overridden", 0),
    }


def _calibration_version(sched: Any) -> int:
    cal = getattr(getattr(sched, "rl_state", None), "calibrator", None)
    return cal.version if cal is not None else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlsched.integrations.vllm_omni.harness.loop",
                                description="Pure simulator vs simulator + real vLLM-Omni scheduler.")
    p.add_argument("--scenario", default="default")
    p.add_argument("--policies", default="fifo,edf,sjf", help="comma-separated; fifo runs vLLM-Omni's own")
    p.add_argument("--seed", type=seed_arg, default=0)
    p.add_argument("--duration", type=flag(bounds.DURATION_S), default=3600.0, help="arrival window, seconds")
    p.add_argument("--rate-scale", type=flag(bounds.SCALE), default=1.0)
    p.add_argument("--mode", choices=("request", "step"))
    p.add_argument("--wait-ms", type=flag(bounds.MILLIS), help="override request_batch_max_wait_ms")
    args = p.parse_args(argv)
    logging.disable(logging.INFO)
    for policy in args.policies.split(","):
        print(json.dumps(compare(args.scenario, policy.strip(), args.seed, args.duration, args.rate_scale,
                                 args.mode, args.wait_ms)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
