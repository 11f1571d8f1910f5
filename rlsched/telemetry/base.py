"""What a GPU reports, and the protocol every telemetry source implements."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


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
