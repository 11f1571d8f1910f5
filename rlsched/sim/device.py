"""The GPU a ``Simulator`` runs its batches on: what a batch really takes, and what the engine learns from it.

A simulator decides on a cost model (``Simulator.cost``); its ``Device`` plays the GPU under it:

* **Admit** — the engine's memory check: how much of a decided batch may start (``admission.admitted``).
* **Start** — a batch's duration and peak memory at the true cost (``truth``; none: the cost is the truth),
  and whether it fits the GPU. One that fits is timed for the calibrator (``CostCalibrator.parts``).
* **End** — the batch's requests a step on (or done), its time observed by the calibrator.
* **Out of memory** — the calibrator's memory scale raised (``CostCalibrator.observe_oom``), and who goes
  back to the queue (``admission.split_oom``, with the ids sent back before: the plugin's rule).

Each answers the simulator, which carries it out on its queue and records: a ``True`` from ``end`` or
``out_of_memory`` means the calibrator may have a new version (``newer``). No engine imports.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlsched.sim.admission import OomSplit, admitted, split_oom
from rlsched.sim.cost import CostModel
from rlsched.sim.online import CostCalibrator
from rlsched.sim.request import RequestRecord
from rlsched.sim.serving import ServingConfig


class Device:
    """One replica's GPU as the simulator plays it (``rlsched.sim.device``)."""

    def __init__(self, cost: CostModel, config: ServingConfig, truth: CostModel | None = None,
                 calibrate: bool = True, retry_oom: bool | None = None, memory_check: bool | None = None) -> None:
        self.config = config
        self.truth = truth
        """What the GPU really runs at (``rlsched.sim.truth``): every batch's duration, memory and OOM
        check. None: the cost decisions read is the truth."""
        self.calibrator: CostCalibrator | None = CostCalibrator(cost) if calibrate and truth is not None else None
        """Online calibration (``rlsched.sim.online``): every batch that runs is timed and every batch that
        fails out of memory raises the memory scale, as each replica's engine plugin calibrates on its own
        batches. None without a ``truth``: every observation would equal its prediction, so a calibrator
        could never move."""
        if self.calibrator is not None and truth is not None:
            self.calibrator.observe_capacity(truth.gpu_memory_gb)  # the plugin reads it before its first decision
        self._version = self.calibrator.version if self.calibrator is not None else 0
        self.retry_oom = self.calibrator is not None if retry_oom is None else retry_oom
        """Request mode: an out-of-memory batch's requests go back to the queue once (``out_of_memory``), as
        the plugin does when it calibrates (None: when this device calibrates; a simulator that plays the
        GPU under a real plugin is told)."""
        self.memory_check = truth is not None if memory_check is None else memory_check
        """Every batch a decision starts is cut to what fits the GPU by the cost decided on (``admitted``), as
        the plugin's engine cuts it (None: when the simulator plays a deployment, a ``truth`` beside the cost
        decisions read; without one it plays the model itself, where ``fifo`` is vLLM-Omni's memory-blind FIFO,
        or the GPU under a real plugin, which checks)."""
        self._true: dict[int, RequestRecord] = {}
        """Records at the true cost, by request id (only with ``truth``)."""
        self._observing: tuple[float, ...] | None = None
        self.mem_gb = 0.0
        """Peak memory of the batch in flight (weights included)."""
        self.start_s = 0.0
        """When the batch in flight started."""
        self._oom_retried: set[int] = set()
        self._alone: set[int] = set()
        """Requests sent back by a second OOM: each starts alone (``admission.split_oom``)."""

    def belief(self, cost: CostModel) -> CostModel:
        """The cost a simulator deciding on ``cost`` starts on: the calibrator's, which has read the GPU's memory."""
        return self.calibrator.cost if self.calibrator is not None else cost

    def weights_gb(self, cost: CostModel) -> float:
        """What the GPU holds between batches: the weights at the true cost (``cost``: the one decided on)."""
        return (self.truth or cost).weights_gb

    def admitted(self, recs: Sequence[RequestRecord], cost: CostModel) -> int:
        """How many leading ``recs`` may start together on this GPU (all of them without ``memory_check``):
        ``admission.admitted`` by ``cost``, a request an OOM sent back twice alone."""
        return admitted(recs, cost, self._alone) if self.memory_check else len(recs)

    def start(self, batch: list[RequestRecord], cost: CostModel, now: float) -> tuple[float, float] | None:
        """Start ``batch`` (decided on ``cost``) at ``now``: its true duration and its duration by ``cost``,
        or None: it does not fit the GPU (``out_of_memory`` says what becomes of it)."""
        cfg, step_mode = self.config, self.config.step_mode
        duration = predicted = cost.batch_duration(batch, step_mode, cfg.engine_overhead_ms,
                                                   cfg.engine_overhead_ms_per_mpx)
        if self.truth is None:
            mem, capacity = cost.batch_memory_gb(batch), cost.gpu_memory_gb
        else:
            true = self._true_records(batch)
            mem, capacity = self.truth.batch_memory_gb(true), self.truth.gpu_memory_gb
            duration = self.truth.batch_duration(true, step_mode, cfg.engine_overhead_ms,
                                                 cfg.engine_overhead_ms_per_mpx, [r.steps_done for r in batch])
        if mem > capacity:
            return None
        if self.calibrator is not None:  # the engine times each batch that runs
            self._observing = self.calibrator.parts(batch, step_mode, cfg.engine_overhead_ms,
                                                    cfg.engine_overhead_ms_per_mpx, [r.steps_done for r in batch])
        self.mem_gb, self.start_s = mem, now
        return duration, predicted

    def end(self, batch: Sequence[RequestRecord], now: float) -> tuple[float, bool]:
        """The batch in flight ended at ``now``: each of its requests one denoise step on (step mode) or done
        (request mode), its time observed. Returns how long it ran, and whether the calibrator moved."""
        elapsed = now - self.start_s
        moved = False
        if self._observing is not None:
            assert self.calibrator is not None
            moved = self.calibrator.observe(batch[0].request.model, self._observing, elapsed)
            self._observing = None
        step_mode = self.config.step_mode
        for rec in batch:
            rec.steps_done = rec.request.num_inference_steps if not step_mode else rec.steps_done + 1
        return elapsed, moved

    def out_of_memory(self, batch: Sequence[RequestRecord]) -> tuple[bool, OomSplit]:
        """``batch`` failed out of memory: vLLM-Omni fails every request in it (its execution-error path).
        With a calibrator (the plugin's) the memory scale rises (``CostCalibrator.observe_oom``); with
        ``retry_oom``, in request mode, its requests go back to the head of the queue unless the batch was one
        request's alone, and one sent back before goes alone next time (``admission.split_oom``: the rule the
        plugin follows; a wave keeps nothing of a request after an error). Step mode fails them: the worker
        keeps a request's denoise state and refuses it as a new request. Returns whether the calibrator
        moved, and the split."""
        moved = self.calibrator is not None and self.calibrator.observe_oom(batch)
        split = split_oom(batch, self._oom_retried, self.config.step_mode or not self.retry_oom, self._alone)
        self._oom_retried.update(r.request.id for r in split.retry)
        self._alone.update(r.request.id for r in split.alone)
        return moved, split

    def newer(self) -> CostModel | None:
        """The calibrator's version if it is newer than the last one asked for (None: no news)."""
        cal = self.calibrator
        if cal is None or cal.version == self._version:
            return None
        self._version = cal.version
        return cal.cost

    def forget(self, rid: int) -> None:
        """Request ``rid`` ended here: its true record goes."""
        self._true.pop(rid, None)

    def _true_records(self, batch: Sequence[RequestRecord]) -> list[RequestRecord]:
        assert self.truth is not None
        out = []
        for rec in batch:
            true = self._true.get(rec.request.id)
            if true is None:
                true = self._true[rec.request.id] = self.truth.record(rec.request)
            out.append(true)
        return out


__all__ = ["Device"]
