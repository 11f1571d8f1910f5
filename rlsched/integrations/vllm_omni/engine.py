"""``RLDiffusionEngine``: vLLM-Omni's ``DiffusionEngine`` with a policy-driven scheduler.

vLLM-Omni has no scheduler-class setting for diffusion; its supported seam is
``engine_backend: "<dotted path to a DiffusionEngine subclass>"``, and
``DiffusionEngine.__init__`` accepts ``scheduler=``. This subclass builds the
scheduler that matches the execution mode (the engine picks its executor path by
mode, so the scheduler must be a ``StepScheduler`` in step mode and a
``RequestScheduler`` otherwise) and hands it to the base class, which initializes it.
"""

from __future__ import annotations

from typing import Any

from vllm_omni.diffusion.diffusion_engine import DiffusionEngine

from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.scheduler import RLRequestScheduler, RLStepScheduler


def is_step_mode(od_config: Any) -> bool:
    """The engine's own rule: ``streaming_output`` forces ``step_execution`` on."""
    return bool(getattr(od_config, "step_execution", False) or getattr(od_config, "streaming_output", False))


def make_scheduler(od_config: Any) -> RLRequestScheduler | RLStepScheduler:
    """The plugin scheduler for ``od_config`` (settings from ``extras``/env; not yet initialized)."""
    settings = PluginConfig.from_od_config(od_config)
    cls = RLStepScheduler if is_step_mode(od_config) else RLRequestScheduler
    return cls(settings=settings)


class RLDiffusionEngine(DiffusionEngine):
    """Select with ``engine_backend: rlsched.integrations.vllm_omni.RLDiffusionEngine``."""

    def __init__(self, od_config: Any, scheduler: Any = None) -> None:
        super().__init__(od_config, scheduler=scheduler if scheduler is not None else make_scheduler(od_config))

    def run_startup_warmup(self) -> None:
        """vLLM-Omni's start-up dummy request goes through the scheduler; keep it out of the
        SLO and batch metrics, and start the policy's clock and history after it."""
        sched = self.scheduler
        if hasattr(sched, "begin_warmup"):
            sched.begin_warmup()
        try:
            super().run_startup_warmup()
        finally:
            if hasattr(sched, "end_warmup"):
                sched.end_warmup()


__all__ = ["RLDiffusionEngine", "is_step_mode", "make_scheduler"]
