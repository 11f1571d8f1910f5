"""The routing wing's floor: what the router pool and the central pool share and the plugin installer
(``router.py``) reads — the stage's router settings (``RouterConfig``, ``extras.rlsched_router``), the
metrics and the stage-config readers (the request reader, ``make_request``, is the engine plugin's own, in
``state.py``). No vLLM import; nothing here imports the pools or the installer. Every metric below also
carries ``model_name`` (``metrics.MODEL_LABEL``: the model the API server serves).

=========================================  =========  ===============  ============================================
name                                       type       labels           meaning
=========================================  =========  ===============  ============================================
``rlsched_router_decisions_total``         counter    router           requests routed by the router
``rlsched_router_fallbacks_total``         counter    reason           requests routed by vLLM-Omni's own rule instead
``rlsched_router_latency_seconds``         histogram  —                a decision's own time (``guard.py``)
``rlsched_router_outstanding``             gauge      stage, replica   ledger requests bound to a replica, unfinished
``rlsched_router_released_total``          counter    reason           entries resolved: finished, replica_lost;
                                                                       central: parked (left unsent), shutdown
``rlsched_router_central_queue``           gauge      stage            central: requests parked, not yet sent
``rlsched_router_state_total``             counter    reason           published states heard: taken, old (out of
                                                                       order, ignored), invalid (malformed or
                                                                       oversized), unrouted (a replica not routed)
``rlsched_router_view_fallbacks_total``    counter    reason           replicas seen through the ledger alone, one
                                                                       per replica and decision: missing (never
                                                                       published), invalid, stale (silent past
                                                                       ``silence_s``); central: per dispatch round
                                                                       with requests parked
=========================================  =========  ===============  ============================================

Fallback reasons: the guarded decision's (``guard.REASONS``, shared with the engine's scheduler and
the central pool: ``exception``, the router raised; ``slow``, slower than ``budget_ms``;
``timeout``, still deciding at ``deadline_ms``, when the orchestrator stops waiting; ``busy``, a
timed-out decision still runs on the worker thread; ``backoff``, skipped after overruns in a row:
1, 2, 4 ... 64 requests), then ``not_int`` (it returned no ``int``: None, a bool, a float...),
``out_of_range`` (not an index of the live replicas), ``evicted`` (that replica left while the
router decided), ``no_request`` (nothing to route on: the request's parameters were not seen),
``internal_error`` (a bug here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rlsched.integrations.vllm_omni.config import CENTRAL, ROUTER_ENV_VAR, ROUTER_KEY, RouterConfig
from rlsched.integrations.vllm_omni.guard import REASONS as GUARD_REASONS
from rlsched.integrations.vllm_omni.metrics import LATENCY_BUCKETS, UNKNOWN_MODEL, MetricSet

EXTRAS_KEY, ENV_VAR = ROUTER_KEY, ROUTER_ENV_VAR
"""The router's settings (``RouterConfig``, validated in ``config.py`` as ``extras.rlsched`` is): the stage's
``extras`` section, and the API process's environment variable read when a stage names no router."""
SUPPORTED_SERIES = "0.30."
"""The vLLM-Omni release series whose private ``StageRuntime`` / ``StagePool`` this patches."""
REASONS = GUARD_REASONS + ("not_int", "out_of_range", "evicted", "no_request", "internal_error")
STATE_REASONS = ("taken", "old", "invalid", "unrouted")
"""``rlsched_router_state_total``'s reasons: what became of a published state the pool heard."""

# ------------------------------------------------------------------------------ metrics
class RouterMetrics(MetricSet):
    """The router's metrics on one registry (module docstring); ``RouterMetrics.on(registry)`` shares
    one instance per registry, as ``PluginMetrics`` does."""

    def __init__(self, registry: Any = None, model_name: str = UNKNOWN_MODEL) -> None:
        super().__init__(registry, model_name)
        make = self.make
        self.decisions = make("Counter", "rlsched_router_decisions_total", "Requests routed by the router", ["router"])
        self.fallbacks = make("Counter", "rlsched_router_fallbacks_total",
                              "Requests routed by vLLM-Omni's own rule instead of the router", ["reason"])
        self.latency = make("Histogram", "rlsched_router_latency_seconds", "Time inside router.route",
                            buckets=LATENCY_BUCKETS)
        self.outstanding = make("Gauge", "rlsched_router_outstanding",
                                "Requests bound to a replica and not finished (the router's ledger)",
                                ["stage", "replica"])
        self.released = make("Counter", "rlsched_router_released_total", "Ledger entries resolved", ["reason"])
        self.central_queue = make("Gauge", "rlsched_router_central_queue",
                                  "Requests parked in the central queue (late binding), not yet sent to a replica",
                                  ["stage"])
        self.states = make("Counter", "rlsched_router_state_total",
                           "Replica states heard: taken, old (out of order), invalid, unrouted", ["reason"])
        self.view_fallbacks = make("Counter", "rlsched_router_view_fallbacks_total",
                                   "Replicas seen through the ledger alone at a decision (missing, invalid, stale)",
                                   ["reason"])


def stage_setting(stage_cfg: Any, name: str) -> Any:
    """A diffusion stage setting as vLLM-Omni 0.30 holds it in the API process: on the typed config's
    ``diffusion_config`` (``VllmOmniDiffusionStageConfig``), else in a legacy config's ``engine_args``."""
    projection = getattr(stage_cfg, "diffusion_config", None)
    if projection is not None and hasattr(projection, name):
        return getattr(projection, name)
    engine_args = getattr(stage_cfg, "engine_args", None)
    if isinstance(engine_args, Mapping):
        return engine_args.get(name)
    return getattr(engine_args, name, None)


def max_num_seqs(stage_cfg: Any) -> Any:
    """The stage's ``max_num_seqs``: vLLM-Omni 0.30's typed config moves it to ``scheduler_config``
    (``_DIFFUSION_MOVED_SHARED_FIELDS``); a legacy config keeps it in ``engine_args``."""
    value = getattr(getattr(stage_cfg, "scheduler_config", None), "max_num_seqs", None)
    return value if value is not None else stage_setting(stage_cfg, "max_num_seqs")


def sp_degree(stage_cfg: Any) -> int:
    """The stage's sequence-parallel degree (every replica of a stage shares one ``parallel_config``)."""
    get = _parallel(stage_cfg)
    sp = get("sequence_parallel_size", None)
    if not isinstance(sp, int) or isinstance(sp, bool) or sp < 1:
        sp = int(get("ulysses_degree", 1) or 1) * int(get("ring_degree", 1) or 1)
    return max(int(sp), 1)


def stage_layout(stage_cfg: Any) -> int | str:
    """The replicas' layout as ``at_layout`` takes it: the SP degree, or ``"DcC"`` with CFG
    parallelism (``cfg_parallel_size`` C > 1: each guidance branch on its own GPU group)."""
    cfg = _parallel(stage_cfg)("cfg_parallel_size", 1)
    sp = sp_degree(stage_cfg)
    return f"{sp}c{cfg}" if isinstance(cfg, int) and not isinstance(cfg, bool) and cfg > 1 else sp


def _parallel(stage_cfg: Any) -> Callable[..., Any]:
    parallel = getattr(stage_cfg, "parallel_config", None)
    if parallel is None or isinstance(parallel, Mapping):
        parallel = parallel or stage_setting(stage_cfg, "parallel_config") or {}
    return parallel.get if isinstance(parallel, Mapping) else lambda k, d=None: getattr(parallel, k, d)


__all__ = ["CENTRAL", "ENV_VAR", "EXTRAS_KEY", "REASONS", "STATE_REASONS", "SUPPORTED_SERIES", "RouterConfig",
           "RouterMetrics", "max_num_seqs", "sp_degree", "stage_layout", "stage_setting"]
