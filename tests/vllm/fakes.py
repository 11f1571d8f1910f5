"""Real vLLM-Omni requests and schedulers with a fake runner (imports vllm_omni: test-vllm tier only)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry
from vllm.v1.engine.exceptions import EngineDeadError
from vllm_omni.diffusion.data import DiffusionOutput
from vllm_omni.diffusion.executor.abstract import DiffusionExecutor
from vllm_omni.diffusion.request import OmniDiffusionRequest
from vllm_omni.diffusion.sched import DiffusionRequestStatus
from vllm_omni.diffusion.worker.utils import BatchRunnerOutput, RunnerOutput
from vllm_omni.inputs.data import OmniDiffusionSamplingParams

from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.metrics import PluginMetrics
from rlsched.integrations.vllm_omni.scheduler import RLRequestScheduler, RLStepScheduler

logging.disable(logging.INFO)


class RunNothingExecutor(DiffusionExecutor):
    """An executor behind vLLM-Omni's real ``DiffusionEngine`` that runs nothing: request mode finishes every
    request of a wave, step mode advances each one step (``progress``, of ``total`` steps). ``_record(so,
    ids, step)`` sees each call before it runs (subclasses note waves, costs, or hold the call)."""

    def _init_executor(self) -> None:
        self._dead = False
        self.progress: dict[str, int] = {}
        self.total: dict[str, int] = {}

    @property
    def is_dead(self) -> bool:
        return self._dead

    def _record(self, so: Any, ids: list[str], step: bool) -> None:
        pass

    def execute_request(self, so: Any) -> Any:
        return self.execute_batch(so)

    def execute_batch(self, so: Any) -> Any:
        ids = list(so.scheduled_request_ids)
        self._record(so, ids, False)
        return BatchRunnerOutput.from_list([RunnerOutput(request_id=r, finished=True, result=DiffusionOutput(output=r))
                                            for r in ids])

    def execute_step(self, so: Any) -> Any:
        self.total.update({n.request_id: n.req.sampling_params.num_inference_steps for n in so.scheduled_new_reqs})
        ids = list(so.scheduled_request_ids)
        self._record(so, ids, True)
        outs = []
        for rid in ids:
            self.progress[rid] = self.progress.get(rid, 0) + 1
            done = self.progress[rid] >= self.total[rid]
            outs.append(RunnerOutput(request_id=rid, step_index=self.progress[rid], finished=done,
                                     result=DiffusionOutput(output=rid) if done else None))
        return BatchRunnerOutput.from_list(outs)

    def collective_rpc(self, method: Any, timeout: Any = None, args: Any = (), kwargs: Any = None,
                       unique_reply_rank: Any = None, exec_all_ranks: bool = False) -> None:
        return None

    def check_health(self) -> None:
        pass

    def shutdown(self) -> None:
        self._dead = True


class ReplicaClient:
    """A diffusion replica's head-side client, as a ``StagePool`` holds it: records what it was sent
    and aborted; ``dead`` makes a send fail as a dead engine does; ``request_address`` names it in
    distributed mode."""

    stage_type = "diffusion"
    final_output = True

    def __init__(self, request_address: str = "", dead: bool = False) -> None:
        self.request_address = request_address
        self.got: list[str] = []
        self.aborted: list[str] = []
        self.dead = dead

    async def add_request_async(self, request_id: str, request: Any, params: Any, **kw: Any) -> None:
        if self.dead:
            raise EngineDeadError("replica died")
        await asyncio.sleep(0)  # a real send yields: an abort may run meanwhile
        self.got.append(request_id)

    async def abort_requests_async(self, ids: list[str]) -> None:
        self.aborted += ids

    def get_diffusion_output_nowait(self) -> None:
        return None

    def shutdown(self) -> None: ...


class Scripted:
    """A router that returns ``script``'s values in turn (raising those that are exceptions),
    then asks ``then`` (or returns 0)."""

    name = "scripted"

    def __init__(self, *script: Any, then: Any = None, during: Any = None) -> None:
        self.script, self.then, self.during = list(script), then, during
        self.chose: list[Any] = []

    def reset(self, stage: Any) -> None:
        if self.then is not None:
            self.then.reset(stage)

    def route(self, request: Any, stage: Any) -> Any:
        if self.during is not None:
            self.during()
        if self.script:
            out = self.script.pop(0)
            if isinstance(out, BaseException):
                raise out
        else:
            out = self.then.route(request, stage) if self.then is not None else 0
        self.chose.append(out)
        return out


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def mk_req(rid: str, size: int = 512, steps: int = 4, priority: str | None = None, slo_ms: Any = None,
           **sp: Any) -> OmniDiffusionRequest:
    """A Qwen-Image-like request; ``size`` sets height = width."""
    extra = dict(sp.pop("extra_args", {}))
    if priority is not None:
        extra["priority"] = priority
    if slo_ms is not None:
        extra["slo_ms"] = slo_ms
    params = OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=steps, seed=0,
                                         extra_args=extra, **sp)
    return OmniDiffusionRequest(prompt=f"prompt {rid}", sampling_params=params, request_id=rid)


def od(max_num_seqs: int = 4, wait_ms: float = 0.0, **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(max_num_seqs=max_num_seqs, request_batch_max_wait_ms=wait_ms, **kw)


def plugin(policy: Any, step: bool = False, max_num_seqs: int = 4, clock: Clock | None = None,
           budget_ms: float | None = None, deadline_ms: float = 60e3, **settings: Any) -> Any:
    """An initialized plugin scheduler with its own metrics registry.

    The deadline defaults to a minute so a loaded test machine never breaks a policy by accident.
    """
    cls = RLStepScheduler if step else RLRequestScheduler
    budget_ms = deadline_ms if budget_ms is None else budget_ms  # a budget is never above its deadline
    cfg = PluginConfig(policy=policy if isinstance(policy, str) else "fifo", decision_budget_ms=budget_ms,
                       decision_deadline_ms=deadline_ms, telemetry=False, **settings)
    sched = cls(policy, cfg, clock=clock or Clock(), metrics=PluginMetrics(CollectorRegistry()))
    sched.initialize(od(max_num_seqs))
    return sched


def new_ids(out: Any) -> list[str]:
    return [r.request_id for r in out.scheduled_new_reqs]


def finish_wave(sched: Any, out: Any) -> set[str]:
    """Request mode: every scheduled request completes; the engine pops what finished."""
    ro = BatchRunnerOutput.from_list([RunnerOutput(request_id=r, finished=True, result=DiffusionOutput())
                                      for r in out.scheduled_request_ids])
    return pop_finished(sched, sched.update_from_output(out, ro))


def pop_finished(sched: Any, finished: set[str]) -> set[str]:
    done = {r for r in finished if sched.get_request_state(r) is not None}
    for rid in sorted(done):
        sched.pop_request_state(rid)
    return done


class StepRunner:
    """Step mode: one denoise step per scheduled request; ``step_index`` = completed steps."""

    def __init__(self) -> None:
        self.progress: dict[str, int] = {}
        self.total: dict[str, int] = {}

    def step(self, sched: Any) -> tuple[Any, set[str]]:
        out = sched.schedule()
        for nr in out.scheduled_new_reqs:
            self.total[nr.request_id] = nr.req.sampling_params.num_inference_steps
            self.progress.setdefault(nr.request_id, nr.req.sampling_params.step_index or 0)
        outs = []
        for rid in out.scheduled_request_ids:
            self.progress[rid] += 1
            done = self.progress[rid] >= self.total[rid]
            outs.append(RunnerOutput(request_id=rid, step_index=self.progress[rid], finished=done,
                                     result=DiffusionOutput() if done else None))
        return out, pop_finished(sched, sched.update_from_output(out, BatchRunnerOutput.from_list(outs)))


def check_invariants(sched: Any) -> None:
    """vLLM-Omni's queue invariants: each live id in exactly one queue, one key, cap respected."""
    waiting, running = list(sched._waiting), list(sched._running)
    assert len(set(waiting)) == len(waiting), waiting
    assert not set(waiting) & set(running)
    live = {rid for rid, st in sched._request_states.items() if not DiffusionRequestStatus.is_finished(st.status)}
    assert live == set(waiting) | set(running)
    assert len(running) <= sched.max_num_running_reqs
    keys = {sched.get_request_state(r).sampling_params_key for r in running}
    assert len(keys) <= 1
    st = getattr(sched, "rl_state", None)
    if st is not None:  # the plugin's view follows vLLM-Omni's queue order (policies read it; FIFO serves vLLM's)
        assert [st.name(i) for i in st.waiting] == waiting
