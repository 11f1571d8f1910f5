"""The cost profile a stage serves with: a named one, or ``profile: auto``, derived at start-up.

``auto`` derives the profile of the model folder vLLM-Omni serves on this GPU (``extras.rlsched.gpu``, else
the name NVML reports; ``rlsched.profiling.derive.auto_profile``) and logs what it derived from what, once
per process and stage; it refuses with a ``ConfigError`` naming ``extras.rlsched.profile`` where it cannot.
"""

from __future__ import annotations

import logging

from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.logs import join_vllm_logging
from rlsched.profiling.derive import AUTO, auto_profile
from rlsched.sim.cost import CostModel, load_profile

_log = logging.getLogger(__name__)


def stage_profile(settings: PluginConfig, model: object = None) -> CostModel:
    """``settings.profile`` loaded, or derived for ``model`` (the served folder) when it is ``auto``."""
    if settings.profile != AUTO:
        return load_profile(settings.profile)
    cost, line = auto_profile(model if isinstance(model, str) else "", settings.gpu,
                              None if settings.gpu else nvml_name(settings))
    join_vllm_logging()
    _log.info("rlsched: profile auto: %s", line)
    return cost


def nvml_name(settings: PluginConfig) -> str | None:
    """The name NVML gives this stage's GPU (``telemetry_device``), or None without NVML."""
    try:
        from rlsched.telemetry import NvmlTelemetry
    except ImportError:
        return None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no GPU: auto says so itself
        nvml = NvmlTelemetry(settings.nvml_device())
        try:
            return nvml.name()
        finally:
            nvml.close()
