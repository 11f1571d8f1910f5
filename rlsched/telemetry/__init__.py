"""GPU telemetry behind one protocol: simulated (``SimTelemetry``) or real (``NvmlTelemetry``).

Importing this package needs numpy only; ``pynvml`` is imported when an
``NvmlTelemetry`` is created.
"""

from rlsched.sim.telemetry import SimTelemetry
from rlsched.telemetry.base import UNKNOWN, Telemetry, TelemetrySample
from rlsched.telemetry.nvml import NvmlTelemetry

__all__ = ["UNKNOWN", "NvmlTelemetry", "SimTelemetry", "Telemetry", "TelemetrySample"]
