"""``LedgerStagePool``: vLLM-Omni 0.30's ``StagePool`` that follows every request it binds — the floor
both rlsched pools stand on (``router_pool.RouterStagePool`` asks a router, ``central_pool.CentralStagePool``
a central policy; neither inherits the other).

What changes against the plain pool:

* ``submit_initial`` remembers the request's sampling params for the ``select_replica_id`` it calls
  (vLLM-Omni passes that only the request id);
* ``select_replica_id`` keeps vLLM-Omni's rules for a request already bound to a live replica and
  for a CFG companion (its parent's replica), and otherwise asks its decider (``Decider.ask``); without
  an answer ``super().select_replica_id`` (vLLM-Omni's round-robin) routes that request, counted by the
  reason the decider gives. Either way the binding is recorded in ``_request_bindings`` and the request
  joins the ledger at the replica it went to;
* ``release_binding`` (every exit of a request) resolves its ledger entry;
* ``poll_diffusion_output`` takes each output's published state (``STATE_KEY`` in its metrics dict,
  from a replica running rlsched's engine with ``extras.rlsched.publish_state``) out of it before the
  orchestrator sees it and feeds it to the ledger (``Ledger.publish``): the decider then sees which
  requests run there and until when. A carrier (a request-started output sent only for its state,
  ``"carrier": true``) is swallowed and the next output polled. A state out of order is ignored, one
  that cannot be read leaves that replica seen through the ledger alone until its next good one; each
  counted (``rlsched_router_state_total``), an unreadable one logged once. Whatever goes wrong here,
  the output itself goes through (logged once);
* each decision reads the views at the pool's clock (``LedgerStage.at``): a replica seen through the
  ledger alone (it never published: ``missing``; ``invalid``; silent past ``silence_s``: ``stale``) is
  counted per decision (``rlsched_router_view_fallbacks_total``) and logged once per reason;
* a replica that leaves (``evict_replica``, ``mark_replica_unavailable``, ``remove_client``, or
  found gone at the next routing) is dropped and its ledger entries are resolved; a replica that
  joins (``add_client``) is routed from the next request on. ``clients`` and ``_unavailable_replicas``
  are versioned containers (``members.py``): a decision re-reads the live replicas (O(replicas)) only
  after one of them changed, so following them costs O(1) a decision.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from vllm_omni.diffusion.data import is_diffusion_request_started_output
from vllm_omni.engine.stage_pool import StagePool

from rlsched.atomic import stream_open
from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.members import MemberList, MemberSet, Version
from rlsched.integrations.vllm_omni.metrics import model_name_of
from rlsched.integrations.vllm_omni.profiles import stage_profile
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics
from rlsched.integrations.vllm_omni.state import make_request
from rlsched.routing.views import CARRIER_KEY, STATE_KEY, Ledger, LedgerStage
from rlsched.sim.cost import CostModel
from rlsched.sim.layout import at_layout
from rlsched.sim.request import Request
from rlsched.sim.simulator import ServingConfig

LOG_ENV = "RLSCHED_ROUTER_LOG"
"""A file the pool appends one JSON line to per routed request (request id, replica slot, how chosen, the views)."""
MAX_CARRIERS = 256
"""Most carrier outputs one ``poll_diffusion_output`` swallows in a row before it returns None (the
orchestrator polls the other replicas meanwhile and this one again next)."""
_WHY = {"missing": "it has published no state (not rlsched's engine with extras.rlsched.publish_state, or no "
                   "batch started yet)",
        "invalid": "its last state could not be read",
        "stale": "it has been silent for more than silence_s past its predicted end"}
_log = logging.getLogger(__name__)


class Decider(Protocol):
    """What a ``LedgerStagePool`` asks and tells (``router_pool.RouterDecider``: a router; ``central_pool``'s
    central policies). The pool makes it (its ``decider`` factory, given the pool) once its ledger exists, before
    it first follows the live replicas."""

    def ask(self, req: Request) -> tuple[int | None, str | None]:
        """In ``select_replica_id``, for a request neither bound to a live replica nor a CFG companion: its
        replica slot, or (None, the fallback reason; None: vLLM-Omni's rule, uncounted)."""
        ...

    def replicas_changed(self) -> None:
        """The live replicas changed (the ledger follows them already)."""
        ...

    def state_heard(self, slot: int) -> None:
        """Replica ``slot``'s published state was taken into the ledger."""
        ...

    def replica_left(self) -> None:
        """A replica left (evicted, unavailable or removed), its ledger entries resolved."""
        ...


class LedgerStagePool(StagePool):
    """See the module docstring. ``costs``: one cost model for every replica, or one per slot (default:
    ``settings.profile`` at ``degree``); ``decider``: makes the pool's ``Decider``, given the pool; ``clock``:
    seconds on the profile's clock (default: monotonic × ``time_scale``)."""

    def __init__(self, stage_id: int, clients: Any, *, decider: Callable[[LedgerStagePool], Decider],
                 output_processor: Any = None, stage_vllm_config: Any = None,
                 config: RouterConfig | None = None, settings: PluginConfig | None = None,
                 costs: CostModel | Sequence[CostModel] | None = None,
                 degree: int | str = 1, serving: ServingConfig | None = None, clock: Callable[[], float] | None = None,
                 metrics: RouterMetrics | None = None, model_name: str | None = None) -> None:
        super().__init__(stage_id, clients, output_processor=output_processor, stage_vllm_config=stage_vllm_config)
        self.router_config = config = config or RouterConfig()
        self.router_settings = settings = settings or PluginConfig()
        base = stage_profile(settings, model_name) if costs is None else costs if isinstance(costs, CostModel) \
            else costs[0]
        self._base_cost = base
        """The profile as each replica's engine plugin holds it: the requests' default SLOs."""
        per_slot = [_at_layout(base, degree)] if costs is None or isinstance(costs, CostModel) else list(costs)
        self._costs = per_slot
        scale = settings.time_scale
        self._clock = clock or (lambda: time.monotonic() * scale)
        self._t0 = self._clock()
        # the stage's served name, else the model the API server was started with (a diffusion stage's
        # pool has no vllm config)
        self.router_metrics = (metrics or RouterMetrics.on()).for_model(model_name_of(stage_vllm_config, model_name))
        self.router_fallbacks: Counter[str] = Counter()
        """Requests routed by vLLM-Omni's rule instead, by reason (``router.REASONS``)."""
        self.router_decisions = 0
        """Requests routed by this pool's own decider (the router, or the central policy)."""
        self.router_states: Counter[str] = Counter()
        """Published states heard, by what became of them (``router.STATE_REASONS``)."""
        self.view_fallbacks: Counter[str] = Counter()
        """Replicas seen through the ledger alone, one per replica and decision, by reason (``FALLBACK_REASONS``)."""
        self._ledger = Ledger(self._cost_of, serving or ServingConfig(), config.seed, silence_s=config.silence_s)
        self._params: dict[str, Any] = {}
        """Request id -> its sampling params, from ``submit_initial`` until its ``select_replica_id``."""
        self._lock = threading.RLock()
        self._warned: set[str] = set()
        self._followed_at: int | None = None
        """The membership version the ledger last followed (None: read the replicas at the next decision)."""
        self.decider = decider(self)
        with self._lock:
            self._follow_live()

    # vLLM-Omni's two membership containers, versioned (``members.py``); StagePool's __init__ assigns both
    @property
    def clients(self) -> MemberList:
        return self._member_clients

    @clients.setter
    def clients(self, value: Any) -> None:
        self._member_clients = MemberList(value, self._members())
        self._members().n += 1

    @property
    def _unavailable_replicas(self) -> MemberSet:
        return self._member_unavailable

    @_unavailable_replicas.setter
    def _unavailable_replicas(self, value: Any) -> None:
        self._member_unavailable = MemberSet(value, self._members())
        self._members().n += 1

    def _members(self) -> Version:
        """The version of the replica membership (created at StagePool's first assignment)."""
        version: Version = self.__dict__.setdefault("_member_version", Version())
        return version

    @classmethod
    def replacing(cls, pool: StagePool, config: RouterConfig, settings: PluginConfig, **kw: Any) -> LedgerStagePool:
        """A pool of this class over ``pool``'s stage and replica clients (``pool`` was just assembled: it
        holds no state)."""
        clients = [c for c in pool.clients if c is not None]
        return cls(pool.stage_id, clients, output_processor=pool.output_processor,
                   stage_vllm_config=pool.stage_vllm_config, config=config, settings=settings, **kw)

    # -------------------------------------------------------------- admission
    async def submit_initial(self, request_id: str, req_state: Any, request: Any, **kwargs: Any) -> int:
        params = kwargs.get("params_override")
        if params is None:
            try:
                params = req_state.sampling_params_list[self.stage_id]
            except Exception:  # routed on defaults (reason no_request) rather than failed here
                params = None
        self._params[request_id] = params
        try:
            return await super().submit_initial(request_id, req_state, request, **kwargs)
        finally:
            self._params.pop(request_id, None)

    def select_replica_id(self, request_id: str, *, affinity_request_id: str | None = None) -> int:
        with self._lock:
            cached = self.get_bound_replica_id(request_id)
            if cached is not None and self.clients[cached] is not None and self.is_replica_available(cached):
                return cached
            if cached is not None:  # bound to a replica that left: route it again (as vLLM-Omni does)
                self.release_binding(request_id)
            req, reason = None, None
            try:
                self._follow_live()
                req = self._request(request_id)
            except Exception:
                self._log_once("internal_error", "reading the request")
                reason = "internal_error"
            chosen = self._parent(affinity_request_id)
            how = "parent"
            if chosen is None and self._ledger.slots:
                chosen, reason = self.decider.ask(req) if req is not None else (None, reason or "no_request")
                how = "router"
            if chosen is None:
                if reason is not None:
                    self._fallback(reason)
                chosen = super().select_replica_id(request_id, affinity_request_id=affinity_request_id)
                if affinity_request_id is None:
                    chosen = self._one_that_holds(chosen, req)
                how = reason or "vllm-omni"
            self._request_bindings[request_id] = chosen
            if req is not None:
                self._follow(request_id, chosen, req)
            self._log_choice(request_id, chosen, how, req)
            return chosen

    def _one_that_holds(self, slot: int, req: Request | None) -> int:
        """vLLM-Omni's choice ``slot``, unless its GPU cannot hold ``req`` alone (by the replica's calibrated
        cost, as published) while another live replica's can: then the first such. A fallback may be simpler
        than the router, never memory-blind; O(replicas), and only when ``slot`` cannot hold it."""
        if req is None or self._holds(slot, req):
            return slot
        live = (s for s in self._ledger.slots if s != slot and self.clients[s] is not None
                and self.is_replica_available(s))
        return next((s for s in live if self._holds(s, req)), slot)

    def _holds(self, slot: int, req: Request) -> bool:
        view = self._ledger.views.get(slot)
        cost = view.cost if view is not None else self._cost_of(slot)
        return cost.fits([cost.record(req)])

    def _parent(self, affinity_request_id: str | None) -> int | None:
        """vLLM-Omni's rule for a CFG companion: its parent's replica, while that is live."""
        if affinity_request_id is None:
            return None
        parent = self.get_bound_replica_id(affinity_request_id)
        if parent is not None and self.clients[parent] is not None and self.is_replica_available(parent):
            return parent
        return None

    def _request(self, request_id: str) -> Request | None:
        if request_id not in self._params:
            return None
        now = max(self._clock() - self._t0, 0.0)
        self._ledger.stage.now = now
        return make_request(self._ledger.new_id(), now, self._params[request_id], self.router_settings,
                            self._base_cost)

    def _fallback(self, reason: str) -> None:
        self.router_fallbacks[reason] += 1
        self.router_metrics.fallbacks.labels(reason=reason).inc()

    def _follow(self, request_id: str, slot: int, req: Request) -> None:
        try:
            self._ledger.add(request_id, slot, req)
            self._gauge(slot)
        except Exception:  # the request is bound and sent all the same; only the ledger misses it
            self._log_once("internal_error", "following the request")

    def _views_at(self, now: float) -> LedgerStage:
        """The stage with every view at ``now``; the replicas seen through the ledger alone counted (and
        logged once per reason)."""
        stage = self._ledger.stage
        before = dict(stage.fallbacks)
        stage.at(now)
        for reason, n in stage.fallbacks.items():
            seen = n - before.get(reason, 0)
            if seen <= 0:
                continue
            self.view_fallbacks[reason] += seen
            self.router_metrics.view_fallbacks.labels(reason=reason).inc(seen)
            if f"view:{reason}" not in self._warned:
                self._warned.add(f"view:{reason}")
                slots = [v.slot for v in stage.replicas if v.fallback == reason]
                why = _WHY.get(reason, reason) + (f": {self._ledger.last_error}" if reason == "invalid" else "")
                _log.log(logging.INFO if reason == "missing" else logging.WARNING,
                         "rlsched router (stage %s): replica %s seen through the ledger alone (%s): %s; logged "
                         "once, counted in rlsched_router_view_fallbacks_total", self.stage_id,
                         ", ".join(map(str, slots)), reason, why)
        return stage

    # -------------------------------------------------------- published states
    def poll_diffusion_output(self, replica_id: int) -> Any | None:
        """vLLM-Omni's, with the replica's published state taken out of each output (module docstring);
        a carrier is swallowed and the next output polled."""
        for _ in range(MAX_CARRIERS):
            output = super().poll_diffusion_output(replica_id)  # a dead replica's error goes to the orchestrator
            if output is None or not self._take_state(replica_id, output):
                return output
        return None

    def _take_state(self, slot: int, output: Any) -> bool:
        """Take ``output``'s published state out of it into the ledger; True when the output is a carrier
        (sent for its state alone: swallowed). Never raises."""
        try:
            metrics = getattr(output, "metrics", None)
            if not isinstance(metrics, dict) or STATE_KEY not in metrics:
                return False
            raw = metrics.pop(STATE_KEY)  # the orchestrator's stats read numbers only
        except Exception:
            self._note_once("state:error", "reading an output's metrics failed; the output goes through", exc=True)
            return False
        carrier = False
        try:
            carrier = isinstance(raw, Mapping) and raw.get(CARRIER_KEY) is True
            if carrier and not is_diffusion_request_started_output(output):
                carrier = False  # a replica's bug: a result is never swallowed
                self._note_once("state:carrier", "replica %s marked an output that is not a request-started "
                                "one as a carrier; it goes through", slot)
            with self._lock:
                verdict = self._ledger.publish(slot, raw, max(self._clock() - self._t0, 0.0)) or "taken"
                error = self._ledger.last_error
            self.router_states[verdict] += 1
            self.router_metrics.states.labels(reason=verdict).inc()
            self._log_state(slot, raw, verdict)
            if verdict == "invalid":
                self._note_once("state:invalid", "replica %s published a state that cannot be read (%s); it is "
                                "seen through the ledger alone until its next good one (logged once, counted in "
                                "rlsched_router_state_total)", slot, error)
            elif verdict == "taken":
                self.decider.state_heard(slot)
        except Exception:
            self._note_once("state:error", "taking replica %s's state failed; the output goes through", slot,
                            exc=True)
        return carrier

    def _log_state(self, slot: int, raw: Any, verdict: str) -> None:
        """One JSON line per state heard to ``$RLSCHED_ROUTER_LOG.states`` when the router log is set (the e2e
        tier checks that every wave a replica ran reaches the router, in order)."""
        path = os.environ.get(LOG_ENV)
        if not path:
            return
        line = {"replica": slot, "mono": time.monotonic(), "verdict": verdict, "state": raw}
        if not _append(f"{path}.states", json.dumps(line, default=str)):
            self._log_once("internal_error", f"writing {LOG_ENV}.states")

    def _note_once(self, key: str, msg: str, *args: Any, exc: bool = False) -> None:
        level = logging.DEBUG if key in self._warned else logging.WARNING
        self._warned.add(key)
        _log.log(level, "rlsched router (stage %s): " + msg, self.stage_id, *args, exc_info=exc)

    # ------------------------------------------------------------------ exits
    def release_binding(self, request_id: str) -> None:
        super().release_binding(request_id)
        with self._lock:
            try:
                slot = self._ledger.remove(request_id)
            except Exception:
                self._log_once("internal_error", "releasing the request")
                return
            if slot is not None:
                self.router_metrics.released.labels(reason="finished").inc()
                self._gauge(slot)

    def release_bindings(self, request_ids: list[str]) -> None:
        for request_id in request_ids:  # as vLLM-Omni's; spelled out so every id passes release_binding
            self.release_binding(request_id)

    def evict_replica(self, replica_id: int) -> None:
        super().evict_replica(replica_id)
        self._replica_left()

    def mark_replica_unavailable(self, replica_id: int) -> list[str]:
        with self._lock:  # its ledger entries first: super releases the bindings (as finished otherwise)
            self._replica_left(gone=replica_id)
        return super().mark_replica_unavailable(replica_id)

    def remove_client(self, input_addr: str) -> Any | None:
        client = super().remove_client(input_addr)
        self._replica_left()
        return client

    def _replica_left(self, gone: int | None = None) -> None:
        with self._lock:
            try:
                self._follow_live(gone)
            except Exception:
                self._log_once("internal_error", "dropping a replica")
        self.decider.replica_left()

    def _follow_live(self, gone: int | None = None) -> None:
        """Route over the live, available replicas; a replica that left has its ledger entries resolved. Reads
        them only when the membership changed since the last call (``members.py``), or ``gone`` is named (it
        is read again at the next call: ``gone`` leaves vLLM-Omni's containers after this)."""
        version = self._members().n
        if gone is None and version == self._followed_at:
            return
        live = [r for r in self.live_replica_ids() if self.is_replica_available(r) and r != gone]
        self._followed_at = None if gone is not None else version
        if live == self._ledger.slots:
            return
        before = set(self._ledger.slots)
        lost = self._ledger.follow(live)
        if lost:
            self.router_metrics.released.labels(reason="replica_lost").inc(len(lost))
        for slot in before - set(live):
            self._gauge(slot)
        self.decider.replicas_changed()

    # ------------------------------------------------------------------ views
    def _cost_of(self, slot: int) -> CostModel:
        return self._costs[slot] if slot < len(self._costs) else self._costs[0]

    def _gauge(self, slot: int) -> None:
        self.router_metrics.outstanding.labels(stage=str(self.stage_id), replica=str(slot)).set(
            self._ledger.outstanding(slot))

    def outstanding(self) -> dict[int, list[str]]:
        """The ledger: request ids per replica slot (tests, diagnostics)."""
        out: dict[int, list[str]] = {s: [] for s in self._ledger.slots}
        for rid, (slot, _) in self._ledger.bound.items():
            out.setdefault(slot, []).append(rid)
        return out

    def _log_choice(self, request_id: str, slot: int, how: str, req: Request | None) -> None:
        """One JSON line per routed request to ``$RLSCHED_ROUTER_LOG`` when set (replays and the e2e tier:
        which replica each request was sent to, and by whom: ``router``, ``parent``, or the fallback reason;
        ``views``: per slot, what the router decided on — the vLLM ids it saw waiting and running there,
        the request itself left out, and ``from``: ``state`` (a published state) or why the ledger alone)."""
        path = os.environ.get(LOG_ENV)
        if not path:
            return
        line = {"request_id": request_id, "replica": slot, "how": how, "t": self._ledger.stage.now,
                "mono": time.monotonic(),  # the host's clock, as the replicas' own logs stamp their waves
                "priority": None if req is None else req.priority,
                "outstanding": {str(s): self._ledger.outstanding(s) for s in self._ledger.slots},
                "views": self._views_line(request_id)}
        if not _append(path, json.dumps(line)):
            self._log_once("internal_error", f"writing {LOG_ENV}")

    def _views_line(self, leave_out: str) -> dict[str, Any]:
        ledger = self._ledger
        name = {iid: rid for rid, (_, iid) in ledger.bound.items() if rid != leave_out}
        return {str(v.slot): {"from": v.fallback or "state",
                              "waiting": [name[i] for i in v.waiting if i in name],
                              "running": [name[r.request.id] for r in v.running if r.request.id in name]}
                for v in ledger.stage.replicas}

    def _log_once(self, reason: str, doing: str) -> None:
        self._note_once(reason, "%s failed; vLLM-Omni's own rule routes instead", doing, exc=True)


def _append(path: str, text: str) -> bool:
    """``text`` appended to ``path`` as one line; False when it cannot be (ConfigError: not a regular file,
    ``rlsched.atomic``)."""
    try:
        with stream_open(path, "a", LOG_ENV) as f:
            f.write(text + "\n")
    except (OSError, ConfigError):
        return False
    return True


def _at_layout(cost: CostModel, degree: int | str) -> CostModel:
    """``cost`` at the stage's SP degree; the profile itself (logged) when it has no coefficients for it:
    every replica of a stage shares one layout, so the router's choices keep their order, only its
    predicted finishes are off by the speed-up."""
    try:
        return at_layout(cost, degree)
    except ConfigError as exc:
        _log.warning("rlsched router: %s; predicting each replica at one GPU", exc)
        return cost


__all__ = ["LOG_ENV", "MAX_CARRIERS", "Decider", "LedgerStagePool"]
