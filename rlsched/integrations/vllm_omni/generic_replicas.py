"""``num_replicas`` for a generic diffusion model (Qwen-Image) in vLLM-Omni 0.30 (issue 21).

vLLM-Omni 0.30 builds the one stage of a generic single-stage diffusion model (a model with no
registered pipeline, e.g. Qwen-Image) in ``StageConfigFactory.create_typed_default_diffusion``.
That builder keeps the stage overrides that are ``OmniDiffusionConfig`` fields, plus ``devices``,
and drops ``num_replicas``: ``--stage-overrides '{"0": {"num_replicas": 2, "devices": "0,1", ...}}'``
starts one replica, silently, and a deploy YAML's ``stages`` are ignored for such a model
(``config/resolver.py``). A registered pipeline's stage keeps it (its deploy YAML's
``num_replicas``).

``install`` (called by the router's ``vllm.general_plugins`` entry point, in the API process,
before the config is resolved) wraps that builder: when the stage runs the rlsched engine backend
and its overrides ask for ``num_replicas`` > 1, the built stage's ``runtime_config.num_replicas``
is set to it, as vLLM-Omni's deploy-YAML path sets it for a registered pipeline. Every other
stage is left exactly as vLLM-Omni built it. Imports vLLM-Omni only inside ``install``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

ENGINE_BACKEND = "rlsched.integrations.vllm_omni.RLDiffusionEngine"
"""The stages this applies to: those ``rlsched deploy`` wrote (their ``engine_backend``)."""

_log = logging.getLogger(__name__)


def install() -> bool:
    """Wrap ``StageConfigFactory.create_typed_default_diffusion`` once (see the module docstring);
    False when the builder is missing (another vLLM-Omni layout: nothing patched)."""
    from vllm_omni.config.config_factory import StageConfigFactory

    current = StageConfigFactory.__dict__.get("create_typed_default_diffusion")
    build = getattr(current, "__func__", None)
    if build is None:
        _log.warning("rlsched: StageConfigFactory.create_typed_default_diffusion is missing; num_replicas of a "
                     "generic diffusion stage stays vLLM-Omni's (1)")
        return False
    if getattr(build, "_rlsched_replicas", False):
        return True

    def create_typed_default_diffusion(cls: Any, model: str, kwargs: dict[str, Any]) -> Any:
        config = build(cls, model, kwargs)
        apply(config, kwargs)
        return config

    vars(create_typed_default_diffusion).update(_rlsched_replicas=True, __wrapped__=build)  # its attributes
    StageConfigFactory.create_typed_default_diffusion = classmethod(create_typed_default_diffusion)
    return True


def requested(kwargs: Mapping[str, Any]) -> int | None:
    """The replica count an rlsched stage's overrides ask for (> 1), else None."""
    n = kwargs.get("num_replicas")
    if kwargs.get("engine_backend") != ENGINE_BACKEND or isinstance(n, bool) or not isinstance(n, int) or n <= 1:
        return None
    return n


def apply(config: Any, kwargs: Mapping[str, Any]) -> None:
    """Set the generic stage's ``runtime_config.num_replicas`` from ``kwargs`` (see ``requested``)."""
    n = requested(kwargs)
    if n is None:
        return
    (stage,) = config.stage_configs  # the generic builder makes exactly one stage
    stage.runtime_config.num_replicas = n
    _log.info("rlsched: generic diffusion stage 0 runs %d replicas on devices %s (num_replicas from the stage "
              "overrides; vLLM-Omni 0.30's generic builder drops it)", n, stage.runtime_config.devices)


__all__ = ["ENGINE_BACKEND", "apply", "install", "requested"]
