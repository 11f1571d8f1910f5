"""``CostProfileExecutor``: a vLLM-Omni diffusion executor that runs no model.

It stands in for the GPU worker behind ``distributed_executor_backend``; everything
above that seam stays real: the HTTP server, the orchestrator, the stage process,
``DiffusionEngine``'s busy loop (with its start-up warm-up), the scheduler (the plugin
via ``engine_backend``) and the pipeline's post-processing, which turns the returned
tensors into PNGs. Each call sleeps the time the stage's cost profile gives the batch
(the simulator's ``Device.start``: request mode ``steps × step + encode + decode``, step mode
one step plus encode on a request's first step and decode on its last), divided by the
plugin's ``time_scale``, and returns mid-gray images of the requested size.

Select it with ``distributed_executor_backend:
rlsched.integrations.vllm_omni.cost_executor.CostProfileExecutor`` next to the plugin's
``engine_backend``. For end-to-end tests and sim-vs-engine replays on machines without a
GPU; it never serves real images.

``EXECUTED`` keeps, per process, the request ids of every call in order; the stage process
also appends one JSON line per call to ``$RLSCHED_EXECUTOR_LOG`` when that is set, so a
test can compare the batches the engine ran with the batches the policy chose.
``$RLSCHED_EXECUTOR_TRUTH`` makes it execute at another cost than the plugin believes (``TRUTH_ENV``).
A batch larger than the GPU's memory at that cost raises "CUDA out of memory", as PyTorch would.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import torch
from vllm_omni.diffusion.data import DiffusionOutput
from vllm_omni.diffusion.executor.abstract import DiffusionExecutor
from vllm_omni.diffusion.worker.utils import BatchRunnerOutput, RunnerOutput

from rlsched.atomic import stream_open
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.profiles import stage_profile
from rlsched.integrations.vllm_omni.scheduler import replica_devices
from rlsched.integrations.vllm_omni.state import read_request
from rlsched.sim.cost import CostModel
from rlsched.sim.request import RequestRecord
from rlsched.sim.truth import Truth

LOG_ENV = "RLSCHED_EXECUTOR_LOG"
TRUTH_ENV = "RLSCHED_EXECUTOR_TRUTH"
"""``time_scale=1.3`` or ``profile=NAME`` (``rlsched.sim.truth.Truth.parse``): execute at that cost instead of
the plugin's profile (a GPU the profile does not describe: the online calibration's end-to-end test)."""
EXECUTED: list[list[str]] = []


class CostProfileExecutor(DiffusionExecutor):
    """Sleeps the cost profile's batch time (÷ ``time_scale``) and returns gray images."""

    def _init_executor(self) -> None:
        self.settings = PluginConfig.from_od_config(self.od_config)
        self.cost: CostModel = stage_profile(self.settings, getattr(self.od_config, "model", None))
        truth = os.environ.get(TRUTH_ENV)
        if truth:  # the GPU this executor plays differs from the profile the plugin believes
            self.cost = Truth.parse(truth, TRUTH_ENV).apply(self.cost) or self.cost
        model = self.settings.model or next(iter(self.cost.models))
        self._model = self.cost.model(model)
        self._records: dict[str, RequestRecord] = {}
        self._steps_done: dict[str, int] = {}
        self._dead = False
        self._log_lock = threading.Lock()

    @property
    def is_dead(self) -> bool:
        return self._dead

    # ------------------------------------------------------------- execution
    def execute_request(self, so: Any) -> Any:
        return self.execute_batch(so)

    def execute_batch(self, so: Any) -> Any:
        """Request mode: the whole wave runs to completion (or raises out of memory, as a GPU would)."""
        ids = list(so.scheduled_request_ids)
        recs = [self._record(nr) for nr in so.scheduled_new_reqs]
        self._check_memory(recs, [nr.request_id for nr in so.scheduled_new_reqs])
        duration = self.cost.batch_duration(recs) if recs else 0.0
        self._run(ids, duration, "request", so)
        outs = [RunnerOutput(request_id=nr.request_id, finished=True, result=self._image(nr.req))
                for nr in so.scheduled_new_reqs]
        for nr in so.scheduled_new_reqs:
            self._records.pop(nr.request_id, None)
        return BatchRunnerOutput.from_list(outs)

    def execute_step(self, so: Any) -> Any:
        """Step mode: one denoise step for every scheduled request."""
        for nr in so.scheduled_new_reqs:
            rec = self._record(nr)
            self._steps_done.setdefault(nr.request_id, int(nr.req.sampling_params.step_index or 0))
            self._records[nr.request_id] = rec
        ids = list(so.scheduled_request_ids)
        known = [r for r in ids if r in self._records]
        recs = [self._records[r] for r in known]
        self._check_memory(recs, known)
        done = [self._steps_done.get(r, 0) for r in known]
        duration = self.cost.batch_duration(recs, step_mode=True, steps_done=done) if recs else 0.0
        self._run(sorted(ids), duration, "step", so)
        outs = []
        for rid in ids:
            self._steps_done[rid] = self._steps_done.get(rid, 0) + 1
            rec = self._records.get(rid)
            total = rec.request.num_inference_steps if rec is not None else self._steps_done[rid]
            finished = self._steps_done[rid] >= total
            result = None
            if finished:
                result = self._gray(rec.request.height if rec else 64, rec.request.width if rec else 64)
                self._records.pop(rid, None)
                self._steps_done.pop(rid, None)
            outs.append(RunnerOutput(request_id=rid, step_index=self._steps_done.get(rid, total),
                                     finished=finished, result=result))
        return BatchRunnerOutput.from_list(outs)

    def _record(self, new_req: Any) -> RequestRecord:
        fields, _ = read_request(new_req.req.sampling_params, self.settings)
        m = self._model
        req = self.settings.request(0, 0.0, m.name, m.modality, fields["height"], fields["width"],
                                    fields["num_frames"], fields["steps"], fields["cfg"], priority=fields["priority"],
                                    slo_s=1.0)
        rec = self.cost.record(req)
        self._records[new_req.request_id] = rec
        return rec

    def _check_memory(self, recs: list[RequestRecord], ids: list[str]) -> None:
        """A batch larger than the GPU's memory (at this executor's cost: ``$RLSCHED_EXECUTOR_TRUTH``'s)
        raises what PyTorch raises, before any time passes; the batch's requests are forgotten (the engine
        fails them, or the plugin sends them again as new requests)."""
        if not recs or self.cost.fits(recs):
            return
        for rid in ids:
            self._records.pop(rid, None)
            self._steps_done.pop(rid, None)
        need, have = self.cost.batch_memory_gb(recs), self.cost.gpu_memory_gb
        raise RuntimeError(f"CUDA out of memory. The batch needs {need:.1f} GiB of the GPU's {have:.1f} GiB "
                           f"(rlsched's cost-profile executor, profile {self.cost.name})")

    def _run(self, ids: list[str], duration: float, mode: str, so: Any) -> None:
        start = time.monotonic()
        time.sleep(max(duration, 0.0) / self.settings.time_scale)
        EXECUTED.append(ids)
        path = os.environ.get(LOG_ENV)
        if path:
            prompts = {nr.request_id: _prompt(nr.req) for nr in so.scheduled_new_reqs}
            line = json.dumps({"ids": ids, "mode": mode, "start": start, "end": time.monotonic(),
                               "cost_s": duration, "new": prompts, "pid": os.getpid(), "devices": replica_devices()})
            with self._log_lock, stream_open(path, "a", LOG_ENV) as f:
                f.write(line + "\n")

    def _image(self, req: Any) -> DiffusionOutput:
        fields, _ = read_request(req.sampling_params, self.settings)
        return self._gray(fields["height"], fields["width"])

    @staticmethod
    def _gray(height: int, width: int) -> DiffusionOutput:
        # the VAE's output range is [-1, 1]; 0 post-processes to mid-gray (128)
        return DiffusionOutput(output=torch.zeros(1, 3, height, width))

    # ------------------------------------------------------------- control
    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple = (),
                       kwargs: dict | None = None, unique_reply_rank: int | None = None,
                       exec_all_ranks: bool = False) -> Any:
        return None

    def check_health(self) -> None:
        if self._dead:
            raise RuntimeError("CostProfileExecutor is shut down")

    def shutdown(self) -> None:
        self._dead = True


def _prompt(req: Any) -> str:
    """The request's text prompt (vLLM-Omni keeps a list of str or ``{"prompt": ...}`` dicts)."""
    prompts = getattr(req, "prompts", None) or [getattr(req, "prompt", "")]
    first = prompts[0] if isinstance(prompts, (list, tuple)) else prompts
    return str(first.get("prompt", "") if isinstance(first, dict) else first)


__all__ = ["EXECUTED", "LOG_ENV", "CostProfileExecutor"]
