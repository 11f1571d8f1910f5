"""Telemetry of a real GPU through NVML (``pip install nvidia-ml-py``)."""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

from rlsched.sim.telemetry import UNKNOWN, TelemetrySample

_GB = 1024**3


class NvmlTelemetry:
    """Memory and utilisation of one GPU from NVML; "unknown" samples when NVML is unusable.

    If ``pynvml`` is missing, there is no GPU or any NVML call fails, ``read()``
    returns ``UNKNOWN`` (``known=False``, NaNs) and one ``RuntimeWarning`` says why;
    the scheduler keeps working on queue state alone. Utilisations are NVML's
    ``nvmlDeviceGetUtilizationRates``: ``gpu`` (share of time a kernel ran) and
    ``memory`` (share of time device memory was read or written), as fractions.
    """

    def __init__(self, device_index: int = 0) -> None:
        self.device_index = device_index
        self._nvml: ModuleType | None = None
        self._handle: Any = None
        self._warned = False
        self._open()

    def _open(self) -> None:
        try:
            import pynvml
        except ImportError:
            self._fail("nvidia-ml-py (pynvml) is not installed")
            return
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception as exc:  # NVMLError and its many subclasses; no GPU, no driver
            self._fail(f"NVML unavailable for GPU {self.device_index}: {exc!r}")
            return
        self._nvml = pynvml

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def read(self) -> TelemetrySample:
        if self._nvml is None:
            return UNKNOWN
        try:
            mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
        except Exception as exc:
            self._fail(f"NVML read failed on GPU {self.device_index}: {exc!r}")
            self.close()
            return UNKNOWN
        return TelemetrySample(mem.used / _GB, mem.total / _GB, util.gpu / 100.0, util.memory / 100.0)

    def close(self) -> None:
        """Release NVML; later reads return ``UNKNOWN``."""
        nvml, self._nvml = self._nvml, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception:  # shutting down a broken NVML must not raise
                pass

    def _fail(self, why: str) -> None:
        if not self._warned:
            warnings.warn(f"GPU telemetry unknown: {why}", RuntimeWarning, stacklevel=3)
            self._warned = True
