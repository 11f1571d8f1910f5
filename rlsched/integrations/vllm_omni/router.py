"""An rlsched router where vLLM-Omni 0.30 routes diffusion requests (issue 21; docs/router_seam.md).
vLLM-Omni deals a stage's new requests out to its replicas in ``StagePool.select_replica_id``
(round-robin), in the API-server process, on the orchestrator's thread. No setting names the
pool's class, so the ``vllm.general_plugins`` entry point ``rlsched_router`` (``install``) wraps
``StageRuntime._assemble_stage_pools``: each diffusion stage whose config asks for a router
(``extras.rlsched_router.router``, else the ``RLSCHED_ROUTER`` environment variable) gets a
``RouterStagePool`` (``router_pool.py``) in place of the plain pool. Nothing else changes: each
replica still runs the rlsched engine backend, and a stage that asks for no router keeps
vLLM-Omni's own pool.

The pool routes with any router of ``rlsched.routing.routers`` (``round-robin``, ``least-work``,
``rlsched``, ...) unchanged: it keeps a ledger of the requests it bound that have not finished and
shows each replica's part to the router as a ``LedgerReplica`` (a ``QueueView``), inside a
``LedgerStage`` (what a router reads of a ``Stage``; ``rlsched.routing.views``). The ledger
sees every exit: vLLM-Omni ends every request (finish, abort, error, dead replica) in
``release_binding``. A replica that runs rlsched's engine with ``extras.rlsched.publish_state``
piggybacks its state (what runs, how far, the running batch's predicted end) on its outputs; the
pool takes it out of each output in ``poll_diffusion_output`` before the orchestrator sees it
(a carrier output, sent only for its state, is swallowed there), and its view shows those requests
running. A replica that publishes nothing, or is silent past ``silence_s``, or whose state cannot be
read, is seen through the ledger alone (every bound request waits, none runs), counted by reason.


This module is the routing wing's roof, the plugin installer: it imports no vLLM at import time, and the
pools (``router_pool``, ``central_pool``) only when a stage asks for one. What they share (settings,
metrics, the request reader, the stage-config readers) is the floor, ``routing.py``.
"""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Any

from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.logs import join_vllm_logging
from rlsched.integrations.vllm_omni.routing import (
    EXTRAS_KEY,
    SUPPORTED_SERIES,
    RouterConfig,
    max_num_seqs,
    stage_layout,
    stage_setting,
)
from rlsched.sim.simulator import ServingConfig

_log = logging.getLogger(__name__)

# ------------------------------------------------------------------------------ install
def install() -> bool:
    """The ``vllm.general_plugins`` entry point: wrap ``StageRuntime._assemble_stage_pools`` so a
    diffusion stage that asks for a router gets a ``RouterStagePool``. Runs in every process that loads
    vLLM plugins; idempotent; refuses (logged, returns False) on a vLLM-Omni outside ``SUPPORTED_SERIES``.
    Never raises: a plugin that raises would abort vLLM's start-up."""
    try:
        return _install()
    except Exception:
        _log.exception("rlsched router: install failed; vLLM-Omni routes as it does without rlsched")
        return False


def _install() -> bool:
    version = _vllm_omni_version()
    if version is None:
        return False  # plain vLLM: nothing to route
    if not version.startswith(SUPPORTED_SERIES):
        _log.warning("rlsched router: vLLM-Omni %s is not %sx, whose private StagePool it patches; not installed "
                     "(vLLM-Omni routes round-robin)", version, SUPPORTED_SERIES)
        return False
    from vllm_omni.engine import stage_runtime

    from rlsched.integrations.vllm_omni import generic_replicas

    try:  # without it a generic model's (Qwen-Image's) num_replicas is dropped: one replica, nothing to route
        generic_replicas.install()
    except Exception:
        _log.exception("rlsched: num_replicas of a generic diffusion stage stays vLLM-Omni's (1)")
    runtime = stage_runtime.StageRuntime
    original = runtime._assemble_stage_pools
    if getattr(original, "_rlsched_router", False):
        return True
    if not callable(original):
        _log.warning("rlsched router: StageRuntime._assemble_stage_pools is missing; not installed")
        return False

    def _assemble_stage_pools(self: Any, stage_plans: Any, initialized_clients_by_stage: Any) -> Any:
        pools = original(self, stage_plans, initialized_clients_by_stage)
        return [_routed(pool, plan, getattr(self, "_model", "")) for pool, plan in zip(pools, stage_plans)]

    vars(_assemble_stage_pools).update(_rlsched_router=True, __wrapped__=original)  # the function's attributes
    runtime._assemble_stage_pools = _assemble_stage_pools
    try:  # late binding fails a request it cannot send through the orchestrator; without it, it parks none
        _hook_orchestrator()
    except Exception:
        _log.exception("rlsched router: central (late binding) sends every request at once (no orchestrator hook)")
    return True


def _hook_orchestrator() -> None:
    """Wrap ``OrchestratorBase.__init__`` once so each pool that has ``attach_orchestrator`` (the central
    pool) learns its orchestrator: a request it sends later, from its own task, fails through the
    orchestrator's own paths (``_dispatch_or_fail_request``), as one sent inside ``submit_initial`` does."""
    from vllm_omni.engine import orchestrator

    base = orchestrator.OrchestratorBase
    init = base.__init__
    if getattr(init, "_rlsched_router", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        for pool in getattr(self, "stage_pools", ()):
            attach = getattr(pool, "attach_orchestrator", None)
            if callable(attach):
                attach(self)

    vars(__init__).update(_rlsched_router=True, __wrapped__=init)
    base.__init__ = __init__


def _vllm_omni_version() -> str | None:
    try:
        return metadata.version("vllm-omni")
    except metadata.PackageNotFoundError:
        return None


def _routed(pool: Any, plan: Any, model: str) -> Any:
    """``pool``, or a ``RouterStagePool`` in its place when its stage asks for a router. A stage whose
    settings are wrong keeps vLLM-Omni's pool (logged): a routing preference must not stop a server."""
    try:
        if pool.stage_type != "diffusion":
            return pool
        stage_cfg = plan.replicas[0].stage_cfg
        extras = stage_setting(stage_cfg, "extras")
        config = RouterConfig.from_extras(extras)
        if config is None:
            return pool
        from rlsched.integrations.vllm_omni.router_pool import RouterStagePool

        cls = RouterStagePool
        if config.central:
            if pool.stage_id != 0:  # only stage 0's submit_initial ignores the replica id it returns
                raise ConfigError(f"extras.{EXTRAS_KEY}.router", f"central on stage {pool.stage_id}: late binding "
                                  "parks requests only at the pipeline's entry stage 0; a forwarded (AR->DiT) "
                                  "request must name its replica at once (docs/deploy.md)")
            from rlsched.integrations.vllm_omni.central_pool import CentralStagePool

            cls = CentralStagePool
        seqs = max_num_seqs(stage_cfg)
        # the central policy's batches are capped by the replicas' max_num_seqs; the routers' ledger
        # predicts standalone work only (unchanged: max_num_seqs 1)
        serving = ServingConfig("step" if stage_setting(stage_cfg, "step_execution") else "request",
                                seqs if config.central and type(seqs) is int and seqs >= 1 else 1)
        settings = PluginConfig.from_extras(extras)
        routed = cls.replacing(pool, config, settings, degree=stage_layout(stage_cfg), serving=serving,
                               model_name=model or None)
        join_vllm_logging()
        _log.info("rlsched router: stage %s routes its %d replicas with %s%s, profile %s, decisions within %g ms "
                  "(budget) / %g ms (deadline)", pool.stage_id, pool.live_num_replicas, config.router,
                  f" (policy {config.policy or 'fifo'}, batches <= {serving.max_num_seqs})" if config.central else "",
                  settings.profile, config.budget_ms, config.deadline_ms)
        return routed
    except Exception:
        _log.exception("rlsched router: stage %s keeps vLLM-Omni's own routing", getattr(pool, "stage_id", "?"))
        return pool


__all__ = ["install"]
