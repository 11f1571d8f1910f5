"""What a GPU reports and the protocol every telemetry source implements (defined in the core,
``rlsched.sim.telemetry``, so that a simulator can read its own)."""

from rlsched.sim.telemetry import UNKNOWN, Telemetry, TelemetrySample

__all__ = ["UNKNOWN", "Telemetry", "TelemetrySample"]
