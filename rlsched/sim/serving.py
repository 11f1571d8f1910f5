"""How a deployment serves: vLLM-Omni's diffusion-scheduler knobs (``ServingConfig``). Below the simulator and
the queue view, which both read it."""

from __future__ import annotations

from dataclasses import dataclass

from rlsched.errors import ConfigError

MODES = ("request", "step")


@dataclass(frozen=True, slots=True)
class ServingConfig:
    """vLLM-Omni's diffusion-scheduler knobs, as a deployment sets them."""

    mode: str = "request"
    """``request``: waves run to completion; ``step``: one denoise step per round."""
    max_num_seqs: int = 1
    """Most requests in one batch (vLLM-Omni's ``max_num_seqs``)."""
    request_batch_max_wait_ms: float = 0.0
    """Request mode: how long FIFO may hold a short wave to coalesce more requests."""
    engine_overhead_ms: float = 0.0
    """Engine time per wave outside the GPU's work (busy loop, IPC), added to each batch."""
    engine_overhead_ms_per_mpx: float = 0.0
    """Engine time per output megapixel·frame of a finishing request (turning output tensors
    into images on the host). Measured against a real CPU server: ~1-2.5 ms and ~5.7 ms/MP
    (docs/e2e.md) — negligible next to seconds-long waves, so the shipped scenarios keep 0."""
    quotas: tuple[tuple[str, float], ...] = ()
    """``(class, quota)`` of every class with a quota: the most of the GPU's time it may take while
    requests of other classes wait (``rlsched.sim.quota``; a scenario's ``classes.NAME.quota``)."""
    quota_window_s: float = 600.0
    """The sliding window the quotas are measured over, in seconds."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError("serving.mode", f"must be one of {MODES}, not {self.mode!r}")
        if not isinstance(self.max_num_seqs, int) or self.max_num_seqs < 1:
            raise ConfigError("serving.max_num_seqs", f"must be an integer >= 1, not {self.max_num_seqs!r}")
        for name in ("request_batch_max_wait_ms", "engine_overhead_ms", "engine_overhead_ms_per_mpx"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"serving.{name}", "must be >= 0")

    @property
    def step_mode(self) -> bool:
        return self.mode == "step"


__all__ = ["MODES", "ServingConfig"]
