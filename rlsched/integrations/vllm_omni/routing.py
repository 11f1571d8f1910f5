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
``rlsched_router_latency_seconds``         histogram  —                time inside ``router.route``
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

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlsched import bounds
from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import DECISION_THREADS
from rlsched.integrations.vllm_omni.guard import REASONS as GUARD_REASONS
from rlsched.integrations.vllm_omni.metrics import LATENCY_BUCKETS, UNKNOWN_MODEL, MetricSet
from rlsched.routing.views import SILENCE_S
from rlsched.sim.stage import CENTRAL_LEAD_S

EXTRAS_KEY = "rlsched_router"
"""The stage's ``extras`` section read here (beside the engine plugin's ``extras.rlsched``)."""
ENV_VAR = "RLSCHED_ROUTER"
"""A router spec for every diffusion stage whose ``extras`` name none (the API process's environment)."""
SUPPORTED_SERIES = "0.30."
"""The vLLM-Omni release series whose private ``StageRuntime`` / ``StagePool`` this patches."""
REASONS = GUARD_REASONS + ("not_int", "out_of_range", "evicted", "no_request", "internal_error")
STATE_REASONS = ("taken", "old", "invalid", "unrouted")
"""``rlsched_router_state_total``'s reasons: what became of a published state the pool heard."""
CENTRAL = "central"
"""The router spec of late binding (``POLICY@central``): ``central_pool.CentralStagePool``."""

# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class RouterConfig:
    """How a stage routes; ``extras: {rlsched_router: {...}}`` in its deploy config."""

    router: str = "rlsched"
    """Router spec of ``rlsched.routing.routers`` (``rlsched``, ``least-work``, ``random:7`` ...)."""
    budget_ms: float = 2.0
    """A routing decision slower than this is discarded and vLLM-Omni's round-robin routes that
    request. It runs on the orchestrator's event loop, which serves every add/abort in turn. On the
    2-core CPU dev machine the shipped routers took ~10 us median, ~50 us p99, over a ledger of up
    to 400 requests on 4 replicas (Ledger + make_router, measured by hand; no bench command yet)."""
    deadline_ms: float = 50.0
    """The longest the orchestrator's event loop waits for one routing or central decision: past it the
    decision is abandoned (``timeout``; vLLM-Omni's rule routes) and interrupted, so a router that loops
    or sleeps delays the server's other adds and aborts by at most this. Kept above ``budget_ms``: a
    decision between the two is waited for and discarded (``slow``)."""
    decision_thread: str = "auto"
    """Where a routing or central decision runs (as ``extras.rlsched.decision_thread``): ``engine`` on the
    orchestrator's thread with a watchdog that interrupts Python code at the deadline; ``worker`` on a
    worker thread waited for at most the deadline, whatever the decision does (a call blocked in C
    included); ``auto`` the first for rlsched's own routers and policies, the second for any other."""
    seed: int = 0
    """Seed of the routers that draw (``random`` without its own, ``least-queue``'s ties)."""
    policy: str = ""
    """``router: central`` only: the central policy spec (``edf``, ``static:FILE`` ...; default ``fifo``),
    the ``POLICY`` of a simulator ``POLICY@central`` run. It picks each batch from the central queue for
    a replica that has nothing outstanding (``central_pool.py``)."""
    stall_ms: float = 60_000.0
    """``router: central`` only: a request parked longer than this (wall clock) while a replica is free is
    sent at once by vLLM-Omni's rule with every other parked one (fallback ``stalled``): a central policy
    that waits forever must not hold requests forever."""
    silence_s: float = SILENCE_S
    """A replica that published its state and is then silent this long past the later of its last message
    and its running batch's predicted end is seen through the ledger alone (``stale``) until it publishes
    again. Seconds of the profile, on the router's (time-scaled) clock."""
    lead_ms: float = CENTRAL_LEAD_S * 1e3
    """``router: central`` only, request mode: a replica whose running wave is predicted (from its published
    state) to end within this many wall-clock milliseconds, with nothing queued there, takes its next batch
    now, one wave ahead (``rlsched.sim.stage.takes_next_batch``): the send leaves the critical path. 0: only
    when idle. Without a published state a replica takes a batch once nothing sent to it is unfinished."""

    @property
    def central(self) -> bool:
        """Late binding: requests wait in a central queue and are sent when a replica frees."""
        return self.router.split(":")[0] == CENTRAL

    def __post_init__(self) -> None:
        from rlsched.policies import make_policy
        from rlsched.policies.base import parse_spec
        from rlsched.routing.routers import make_router, split_view

        if not isinstance(self.router, str) or not self.router:
            raise ConfigError(f"extras.{EXTRAS_KEY}.router", f"must be a router spec, not {self.router!r}")
        if not isinstance(self.policy, str):
            raise ConfigError(f"extras.{EXTRAS_KEY}.policy", f"must be a policy spec, not {self.policy!r}")
        if self.central:
            if self.router != CENTRAL:
                raise ConfigError(f"extras.{EXTRAS_KEY}.router", f"{self.router!r}: central takes no arguments "
                                                                 "(the central policy is extras.rlsched_router.policy)")
            make_policy(self.policy or "fifo")  # a typo or a missing checkpoint fails here, at start-up
        elif self.policy:
            raise ConfigError(f"extras.{EXTRAS_KEY}.policy", f"only with router: central (late binding), not "
                                                             f"with {self.router!r}: each replica's policy is "
                                                             "extras.rlsched.policy")
        else:
            if split_view(parse_spec(self.router))[1]:
                raise ConfigError(f"extras.{EXTRAS_KEY}.router", f"{self.router!r}: view= and delay_ms= are simulator "
                                  "options; in the engine the router always decides on its ledger and the "
                                  "replicas' published states (view=engine)")
            make_router(self.router)  # a typo fails here, at start-up, naming the key
        if self.decision_thread not in DECISION_THREADS:
            raise ConfigError(f"extras.{EXTRAS_KEY}.decision_thread",
                              f"must be one of {', '.join(DECISION_THREADS)}, not {self.decision_thread!r}")
        for name, bound in _BOUNDS.items():  # the one table's ranges (rlsched.bounds), as extras.rlsched's
            bound.check(getattr(self, name), f"extras.{EXTRAS_KEY}.{name}")

    @classmethod
    def from_extras(cls, extras: Any, environ: Mapping[str, str] | None = None) -> RouterConfig | None:
        """The stage's router settings, or None when neither ``extras`` nor ``RLSCHED_ROUTER`` asks for one."""
        env = os.environ if environ is None else environ
        section = extras.get(EXTRAS_KEY) if isinstance(extras, Mapping) else None
        if section is not None and not isinstance(section, Mapping):
            raise ConfigError(f"extras.{EXTRAS_KEY}", f"must be a mapping, not {type(section).__name__}")
        values = dict(section or {})
        if "router" not in values and env.get(ENV_VAR):
            values["router"] = env[ENV_VAR]
        if "router" not in values:
            return None
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"extras.{EXTRAS_KEY}", f"unknown keys {unknown} (known: {sorted(known)})")
        return cls(**values)


_BOUNDS = {"budget_ms": bounds.DECISION_MS, "deadline_ms": bounds.DECISION_MS, "stall_ms": bounds.DECISION_MS,
           "silence_s": bounds.DURATION_S, "lead_ms": bounds.MILLIS, "seed": bounds.SEED}
"""``RouterConfig``'s numeric settings and their ranges (``lead_ms`` 0: a batch only once idle)."""


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
