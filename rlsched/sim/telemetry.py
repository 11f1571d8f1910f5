"""GPU telemetry as policies read it: the sample, the source protocol, and the simulator's estimate.

Part of the pure core so that a ``QueueView`` can hand out its own telemetry reader
(``Simulator.open_telemetry``); the NVML source lives in ``rlsched.telemetry``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rlsched.sim.request import RequestRecord

if TYPE_CHECKING:
    from rlsched.sim.cost import CostModel


@dataclass(frozen=True, slots=True)
class TelemetrySample:
    """One reading of the GPU; NaNs and ``known=False`` when it could not be read."""

    memory_used_gb: float
    memory_total_gb: float
    compute_util: float
    """Share of recent time the GPU was computing (SM activity), in [0, 1]."""
    membw_util: float
    """Share of recent time device memory was being read or written, in [0, 1]."""
    known: bool = True

    @property
    def memory_frac(self) -> float:
        """Used / total memory; NaN when unknown."""
        if not self.known or not self.memory_total_gb > 0:
            return math.nan
        return self.memory_used_gb / self.memory_total_gb


UNKNOWN = TelemetrySample(math.nan, math.nan, math.nan, math.nan, known=False)
"""The sample a source returns when it cannot read the GPU."""


@runtime_checkable
class Telemetry(Protocol):
    """A GPU-state source: the simulator's estimate or the real device (NVML)."""

    def read(self) -> TelemetrySample: ...

UTIL_WINDOW_S = 60.0
"""Time constant of the exponentially weighted utilisations (NVML samples over ~1 s;
scheduling decisions care about the last minute)."""


class Simulated(Protocol):
    """What ``SimTelemetry`` reads of a simulator (``Simulator`` is one)."""

    now: float
    busy_s: float
    last_batch: list[RequestRecord]
    cost: CostModel

    @property
    def memory_used_gb(self) -> float: ...


class SimTelemetry:
    """GPU memory and utilisation of a ``Simulator``, as NVML would report them.

    * memory: ``sim.memory_used_gb`` of ``sim.cost.gpu_memory_gb`` (weights + the
      running batch's activations);
    * compute utilisation: exponentially weighted busy fraction (time constant
      ``window_s``) from the simulator's busy-time counter, exact whenever the GPU
      is idle — which it is at every decision point;
    * memory-bandwidth utilisation: busy fraction × the memory-bound share of the
      last batch started. A step costs ``max(floor_s, a + b·ΣT + c·ΣQ)``; the floor is
      the launch/memory-bound regime of small batches, so ``floor_s / step_s`` (1 when
      the floor binds, smaller as compute dominates) is the estimate of the time the
      step spends streaming weights rather than computing. It is an estimate: the
      profiles carry no bandwidth measurements.

    ``read()`` folds in the time since the previous read; the memory-bound share is
    that of ``sim.last_batch`` — so readings depend only on the simulator's state at
    the read times, the same in the environment and in a serving policy.
    """

    def __init__(self, sim: Simulated, window_s: float = UTIL_WINDOW_S) -> None:
        self.sim, self.window_s = sim, window_s
        self._t = sim.now
        self._busy = sim.busy_s
        self._compute = 0.0
        self._membw = 0.0
        self._bound = 1.0
        self._last: list[RequestRecord] = sim.last_batch

    def update(self) -> None:
        """Fold the time since the last update into the averages; note a started batch."""
        sim = self.sim
        if sim.last_batch is not self._last:
            self._last = sim.last_batch
            if self._last:
                self._bound = memory_bound_share(sim, self._last)
        dt = sim.now - self._t
        if dt > 0:
            busy = min(1.0, (sim.busy_s - self._busy) / dt)
            keep = math.exp(-dt / self.window_s)
            self._compute = keep * self._compute + (1 - keep) * busy
            self._membw = keep * self._membw + (1 - keep) * busy * self._bound
            self._t, self._busy = sim.now, sim.busy_s

    def read(self) -> TelemetrySample:
        self.update()
        cost = self.sim.cost
        return TelemetrySample(self.sim.memory_used_gb, cost.gpu_memory_gb, self._compute, self._membw)


def memory_bound_share(sim: Simulated, batch: list[RequestRecord]) -> float:
    """``floor_s / step_s`` of one denoise step of ``batch`` (1: fully memory-bound)."""
    model = sim.cost.model(batch[0].request.model)
    step = sim.cost.batch_step_time(batch)
    return min(1.0, model.floor_s / step) if step > 0 else 1.0
