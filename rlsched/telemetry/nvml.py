"""Telemetry of a real GPU through NVML (``pip install nvidia-ml-py``).

The GPU is named as a ``CUDA_VISIBLE_DEVICES`` entry names it: an index, or a ``GPU-<uuid>`` / ``MIG-<uuid>``
(the Kubernetes device plugin's default). NVML numbers GPUs in PCI bus order; CUDA numbers them fastest
first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: an index is read as NVML's, with one warning when the two
orders can differ (GPUs of more than one kind, ``CUDA_DEVICE_ORDER`` not ``PCI_BUS_ID``). A MIG instance
reports its memory; NVML has no utilisation for one (NaN).
"""

from __future__ import annotations

import math
import os
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

    def __init__(self, device_index: int | str = 0) -> None:
        self.device_index = device_index
        """An NVML index, or a ``CUDA_VISIBLE_DEVICES`` entry (an index, ``GPU-<uuid>``, ``MIG-<uuid>``)."""
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
            self._handle = self._device(pynvml)
        except Exception as exc:  # NVMLError and its many subclasses; no GPU, no driver
            self._fail(f"NVML unavailable for GPU {self.device_index}: {exc!r}")
            return
        self._nvml = pynvml

    def _device(self, pynvml: Any) -> Any:
        spec = str(self.device_index).strip()
        if spec.startswith(("GPU-", "MIG-")):
            return pynvml.nvmlDeviceGetHandleByUUID(spec)
        if not spec.isdigit():
            raise ValueError(f"{spec!r} is not a GPU index, GPU-<uuid> or MIG-<uuid>")
        if os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and _kinds(pynvml) > 1:
            warnings.warn(f"GPU telemetry: GPU {spec} is read as NVML's (PCI bus order), but CUDA_DEVICE_ORDER is "
                          "not PCI_BUS_ID and this machine has GPUs of more than one kind: CUDA's GPU "
                          f"{spec} may be another; set CUDA_DEVICE_ORDER=PCI_BUS_ID or name GPUs by UUID",
                          RuntimeWarning, stacklevel=4)
        return pynvml.nvmlDeviceGetHandleByIndex(int(spec))

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def name(self) -> str | None:
        """The GPU's name as NVML reports it (``NVIDIA H100 80GB HBM3``); None without NVML."""
        if self._nvml is None:
            return None
        try:
            name = self._nvml.nvmlDeviceGetName(self._handle)
        except Exception:
            return None
        return name.decode() if isinstance(name, bytes) else str(name)

    def read(self) -> TelemetrySample:
        if self._nvml is None:
            return UNKNOWN
        try:
            mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        except Exception as exc:
            self._fail(f"NVML read failed on GPU {self.device_index}: {exc!r}")
            self.close()
            return UNKNOWN
        try:
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            compute, membw = util.gpu / 100.0, util.memory / 100.0
        except Exception:  # a MIG instance (NVML_ERROR_NOT_SUPPORTED): its memory only
            compute = membw = math.nan
        return TelemetrySample(mem.used / _GB, mem.total / _GB, compute, membw)

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


def _kinds(pynvml: Any) -> int:
    """How many kinds (names) of GPU NVML sees; 1 when it cannot tell."""
    try:
        n = pynvml.nvmlDeviceGetCount()
        return len({str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))) for i in range(n)})
    except Exception:
        return 1
