"""The vLLM-Omni plugin: any ``SchedulingPolicy`` inside ``DiffusionEngine``.

Select it with ``engine_backend: rlsched.integrations.vllm_omni.RLDiffusionEngine``
and configure it under ``extras: {rlsched: {...}}`` (see ``PluginConfig``).

``config``, ``state``, ``safety`` and ``metrics`` import no vLLM; the engine and
scheduler classes are loaded on first attribute access, so ``import
rlsched.integrations.vllm_omni.metrics`` works without vLLM installed.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "RLDiffusionEngine": "rlsched.integrations.vllm_omni.engine",
    "make_scheduler": "rlsched.integrations.vllm_omni.engine",
    "RLRequestScheduler": "rlsched.integrations.vllm_omni.scheduler",
    "RLStepScheduler": "rlsched.integrations.vllm_omni.scheduler",
}


def __getattr__(name: str) -> Any:
    # PEP 562: vLLM's resolve_obj_by_qualname does getattr(module, "RLDiffusionEngine").
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["RLDiffusionEngine", "RLRequestScheduler", "RLStepScheduler", "make_scheduler"]
