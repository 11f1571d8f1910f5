"""``CentralStagePool``: late binding (``POLICY@central``) inside vLLM-Omni 0.30's ``StagePool``.

vLLM-Omni picks a replica and sends a new diffusion request in one step (``submit_initial``).
This pool, put in place of stage 0's pool by ``router.install`` when ``extras.rlsched_router.router``
is ``central``, parks the request instead, in a central queue, and returns at once: the
orchestrator's loop is never held. A task on that loop (the dispatcher) hands batches to replicas as
they free. The rule is the one the simulator's late-binding ``Stage`` calls, ``rlsched.sim.central.CentralQueue``
(this pool drives it: ``central_queue``):

* a replica is free when it takes its next batch (``central.takes_next_batch``) on
  what it published (``router_pool``: its state, heard through ``poll_diffusion_output``): nothing
  sent to it waits there, and it is idle or — request mode — its running wave is predicted to end
  within ``lead_ms``, one wave ahead, so the send leaves the critical path. A replica seen through
  the ledger alone (no state, or a stale or unreadable one) is free when the pool's ledger holds no
  request sent to it and not finished (every exit passes ``release_binding``). Free replicas are
  served lowest slot first; the dispatcher wakes on every state heard, every exit, and when a
  replica comes within the lead of its predicted end;
* for each, the central policy (``make_policy(extras.rlsched_router.policy)``, the ``POLICY`` of a
  simulator ``POLICY@central`` run) decides on the central queue as seen in that replica's cost
  model (a ``CentralView`` per replica kind, ``central.kind_key``; every view holds the same requests), and its
  batch (<= the stage's ``max_num_seqs``) is sent to that replica, whose own policy then runs it
  (``fifo`` in the simulator's ``@central`` runs; ``rlsched deploy --router central`` writes that);
* a decision to wait is honoured (``wait_until``, or the next arrival or finish).

Exactly once: a request leaves the central queue (under the pool's lock) before it is sent, is bound
to its replica first, and is sent only while still bound (an abort that came meanwhile released it).
A parked request that is aborted or failed leaves the queue in ``release_binding`` and is never sent.
A send that fails goes through the orchestrator's own ``_dispatch_or_fail_request`` (a dead replica
is evicted and its requests failed, an unserialisable value fails that request), so the pool needs
its orchestrator (``attach_orchestrator``, hooked by ``install``); a replica that left between the
decision and the send puts the request back at the head of the queue. When every replica is gone,
vLLM-Omni's ``_handle_dead_replica`` fails every request of the stage, parked ones included (they
carry ``stage_submit_ts[0]``). At shutdown the requests still parked are failed (an ``ErrorMessage``
each) and logged.

A central decision that is not used — the guarded decision's reasons, shared with the engine's scheduler
and the router (``guard.py``: ``exception``, ``slow``, past ``budget_ms``, ``timeout``, past ``deadline_ms``,
when the orchestrator's loop stops waiting; ``busy`` / ``backoff``, while a timed-out decision still runs or
after an overrun: 1, 2, 4 ... 64 decisions), or the decision check's (``safety.CHECK_REASONS``: a batch a
replica cannot run, e.g. ``unknown_id``, ``too_large``) — gives that replica vLLM-Omni's FIFO with the memory
check instead (``rlsched.sim.admission.fifo_that_fits`` on the replica's calibrated cost: O(batch)), each
request counted in ``rlsched_router_fallbacks_total``; the replica's own scheduler checks its memory again
(``scheduler.py``), so a replica never starts a batch its own belief refuses, whoever sent it.

Sent at once by vLLM-Omni's own rule (round-robin), counted in ``rlsched_router_fallbacks_total``:
``busy`` / ``backoff`` for new requests (not parked while the guard refuses), ``cannot_fit`` (a request
no live replica's GPU can hold: never parked), ``stalled`` (see ``stall_ms``), ``streaming`` (a resumable
request: its updates need its replica), ``no_orchestrator`` (no way to fail a request sent later; or an
orchestrator that reads the replica id ``submit_initial`` returns),
``distributed`` (a hub attached: ``pick`` and vLLM-Omni's load balancer route, not followed here).
A CFG companion follows its parent: sent at once to the parent's replica, or parked with a parked
parent and sent right after it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

from vllm_omni.engine.stage_pool import StagePool, StageUnavailableError
from vllm_omni.inputs.data import OmniDiffusionSamplingParams

from rlsched.integrations.vllm_omni.guard import GuardedDecision, runner_for
from rlsched.integrations.vllm_omni.ledger_pool import LedgerStagePool
from rlsched.integrations.vllm_omni.safety import check_decision
from rlsched.integrations.vllm_omni.state import PARKED_KEY, PluginState, drop_client_parking, make_request
from rlsched.policies import make_policy
from rlsched.sim.admission import fifo_that_fits
from rlsched.sim.central import CentralQueue, next_batch, next_batch_s
from rlsched.sim.request import COMPLETED, Request, RequestRecord

PARKED = -1
"""What ``submit_initial`` returns for a parked request: no replica yet. Only stage 0 parks, where the
orchestrator discards the value (``_handle_add_request``); an orchestrator that reads it
(``_on_stage_submitted`` overridden) gets every request sent at once instead."""
IDLE_POLL_S = 1.0
"""The dispatcher's longest sleep: it re-checks ``stall_ms`` and the orchestrator's shutdown this often."""

_log = logging.getLogger(__name__)


@dataclass
class Parked:
    """A request in the central queue: what ``StagePool.submit_initial`` would have sent."""

    request: Any
    params: Any
    submit_kwargs: dict[str, Any]
    entry: Request
    """The request as the ledger follows it once sent."""
    since: float
    """``time.monotonic()`` when parked (``stall_ms``)."""
    companions: list[tuple[str, Parked]] = field(default_factory=list)
    """CFG companions that arrived while this parent was parked: sent right after it, to its replica."""


class CentralView(PluginState):
    """One replica kind's view of the central queue (``rlsched.sim.central.Hub``): a ``PluginState`` of the parked
    requests, which the kind's central policy decides on; it never runs a batch."""

    needs_decision = True
    """A free replica's kind decides at every round (the engine's pool has no event that would pause it)."""

    def receive(self, item: tuple[str, Parked], now: float) -> None:
        rid, parked = item
        self.add(rid, parked.params, None)

    def receive_dated(self, rid: str, item: Parked) -> None:
        """``item`` joins, dated back to when it was parked (a view opened or a request put back)."""
        rec, _ = self.add(rid, item.params, None)
        rec.request = replace(rec.request, arrival_s=item.entry.arrival_s)  # parked then, due then
        rec.deadline_s = item.entry.arrival_s + rec.request.slo_s

    def release(self, ids: Sequence[str]) -> list[RequestRecord]:
        return [rec for rec in map(self.remove, ids) if rec is not None]

    def wake(self) -> None:
        self.sync(self._ids.keys(), ())  # the clock; every request it holds waits (no resync)


class CentralStagePool(LedgerStagePool):
    """See the module docstring. ``policy``: the central policy (spec or object; default
    ``config.policy``); ``wall``: the monotonic clock of ``stall_ms`` (tests)."""

    def __init__(self, stage_id: int, clients: Any, *, policy: Any = None,
                 wall: Callable[[], float] = time.monotonic, **kw: Any) -> None:
        self._wall = wall
        self._parked: dict[str, Parked] = {}  # before the base's __init__: the decider's views are opened on it
        """The central queue, oldest first (request id -> what to send)."""
        self._flushed: list[tuple[str, Parked]] = []
        """Requests flushed from the queue (bound by vLLM-Omni's rule), to be sent."""
        self._broken = False
        """The dispatcher itself failed (a bug): nothing is parked any more."""
        super().__init__(stage_id, clients, decider=partial(_CentralPolicies, policy=policy), **kw)
        self._decider = cast(_CentralPolicies, self.decider)
        self.central_queue = self._decider.queue
        """The rule of late binding, the simulator's ``Stage``'s too (``rlsched.sim.central``): one ``CentralView``
        (and central policy) per replica kind, the free replicas' order, adopting their calibrations."""
        self._orchestrator: Any = None
        self._direct: str | None = None
        """The fallback reason of the request ``select_replica_id`` routes now (None: vLLM-Omni's rule, uncounted)."""
        self._dispatcher = _Dispatcher(self)
        self._lead_s = self.router_config.lead_ms / 1e3 * self.router_settings.time_scale
        """``lead_ms`` on the pool's (time-scaled) clock."""
        self.central_log: list[tuple[int, tuple[str, ...]]] = []
        """(replica slot, request ids) of every batch the central policy sent, in order (tests, diagnostics)."""
        self._decided = self.router_metrics.decisions.labels(router="central")
        self._guard = self._decider.guard
        self._queue_gauge = self.router_metrics.central_queue.labels(stage=str(stage_id))
        self._queue_gauge.set(0)

    # ------------------------------------------------------------------ wiring
    def attach_orchestrator(self, orchestrator: Any) -> None:
        """The orchestrator whose loop runs this pool (``router.install`` hooks its ``__init__``)."""
        self._orchestrator = orchestrator

    def _why_not_park(self, req_state: Any) -> str | None:
        if self._broken:
            return "internal_error"
        if self.is_distributed:  # replicas come and go on the hub's word: not followed here, sent at once
            return "distributed"
        orch = self._orchestrator
        if orch is None or not hasattr(orch, "_dispatch_or_fail_request"):
            return "no_orchestrator"
        if _overrides(orch, "_on_stage_submitted"):  # it reads the replica id submit_initial returns
            return "no_orchestrator"
        if getattr(getattr(req_state, "streaming", None), "enabled", False):
            return "streaming"
        return self._guard.refusal()  # busy (a timed-out decision still runs), backoff (after overruns)

    # --------------------------------------------------------------- admission
    async def submit_initial(self, request_id: str, req_state: Any, request: Any, *, prompt_text: Any = None,
                             affinity_request_id: str | None = None, submit_kwargs: dict[str, Any] | None = None,
                             params_override: Any = None) -> int:
        drop_client_parking(req_state, self.stage_id, params_override)  # only this pool may date a request back
        with self._lock:
            parent = self._parked.get(affinity_request_id) if affinity_request_id is not None else None
            reason = None if parent is not None else self._why_not_park(req_state)
            if reason is None and self.stage_type == "diffusion" and not isinstance(request, list):
                if self._park(request_id, req_state, request, submit_kwargs, params_override, parent):
                    return PARKED
                reason = "cannot_fit"
        self._direct = reason if affinity_request_id is None else None  # a companion follows its parent uncounted
        return await super().submit_initial(request_id, req_state, request, prompt_text=prompt_text,
                                            affinity_request_id=affinity_request_id, submit_kwargs=submit_kwargs,
                                            params_override=params_override)

    def _park(self, request_id: str, req_state: Any, request: Any, submit_kwargs: dict[str, Any] | None,
              params_override: Any, parent: Parked | None) -> bool:
        # what StagePool.submit_initial does before it picks a replica, so the later send is the same
        params = params_override if params_override is not None else req_state.sampling_params_list[self.stage_id]
        params = OmniDiffusionSamplingParams.from_params(params)
        kwargs = dict(submit_kwargs or {})
        sender = getattr(request, "payload_sender_info", None)
        if sender is not None:
            kwargs.setdefault("payload_sender_info", sender)
        self._ledger.stage.now = now = max(self._clock() - self._t0, 0.0)
        entry = make_request(self._ledger.new_id(), now, params, self.router_settings, self._base_cost)
        item = Parked(request, params, kwargs, entry, self._wall())
        if parent is not None:
            parent.companions.append((request_id, item))
            return True
        self._follow_live()
        if not self._decider.fits_somewhere(entry):
            return False
        self._parked[request_id] = item
        self.central_queue.park((request_id, item), now)
        self._queue_gauge.set(len(self._parked))
        self._kick()
        return True

    def select_replica_id(self, request_id: str, *, affinity_request_id: str | None = None) -> int:
        try:
            return super().select_replica_id(request_id, affinity_request_id=affinity_request_id)
        finally:
            self._direct = None

    async def submit_update(self, request_id: str, req_state: Any, request: Any, **kw: Any) -> int:
        await self._send_now(request_id)  # an update needs the replica that holds the request
        return await super().submit_update(request_id, req_state, request, **kw)

    async def submit_interaction(self, request_id: str, interaction: Any) -> int:
        await self._send_now(request_id)
        return await super().submit_interaction(request_id, interaction)

    async def _send_now(self, request_id: str) -> None:
        with self._lock:
            item = self._unpark(request_id)
        if item is not None:
            self._fallback("streaming")
            slot = self._vllm_pick(request_id, "streaming", item.entry)
            await self._send_batch(slot, [(request_id, item)])

    # ----------------------------------------------------------------- exits
    def release_binding(self, request_id: str) -> None:
        with self._lock:
            item = self._unpark(request_id)  # an abort or failure of a parked request: it is never sent
            if item is None:
                self._drop_companion(request_id)
            else:
                self.router_metrics.released.labels(reason="parked").inc()
            self._decider.finished(request_id)
        super().release_binding(request_id)
        self._kick()  # a replica may be free now

    def _unpark(self, request_id: str) -> Parked | None:
        item = self._parked.pop(request_id, None)
        if item is not None:
            self.central_queue.drop_elsewhere(None, [request_id])
            self._queue_gauge.set(len(self._parked))
        return item

    def _drop_companion(self, request_id: str) -> None:
        for item in self._parked.values():
            if item.companions:
                item.companions[:] = [(c, p) for c, p in item.companions if c != request_id]

    # ------------------------------------------------------------- dispatcher
    def _kick(self) -> None:
        """Wake the dispatcher (``_Dispatcher``: started on the running loop at the first park)."""
        self._dispatcher.kick()

    def _sleep_s(self) -> float:
        return self._dispatcher.sleep_s()

    async def dispatch(self) -> None:
        """One round: a batch for each free replica, lowest slot first; then the sends."""
        with self._lock:
            plans = self._plan()
        for slot, items in plans:
            await self._send_batch(slot, items)
        await self._send_flushed()

    def _plan(self) -> list[tuple[int, list[tuple[str, Parked]]]]:
        self._follow_live()
        self._dispatcher.round_s = now = max(self._clock() - self._t0, 0.0)  # also the choice log's ``t``: when sent
        if self._parked:  # the replicas as published now (counted when seen through the ledger alone)
            self._views_at(now)
        else:
            self._ledger.stage.now = now
        if self._parked and self._wall() - next(iter(self._parked.values())).since > self.router_config.stall_ms / 1e3 \
                and any(self._free(s) for s in self._ledger.slots):
            self._flush("stalled")
        self._dispatcher.wait_until = math.inf
        plans = []
        for slot in self.central_queue.visit(now, self._takes, among=self._ledger.slots):
            batch = self._decide(slot, now)
            if batch:
                plans.append((slot, batch))
        return plans

    def _free(self, slot: int) -> bool:
        return self._takes(slot)[0]

    def _takes(self, slot: int) -> tuple[bool, float]:
        """Whether ``slot`` takes its next batch now (module docstring; ``central.next_batch``), and if not when;
        the views are at this round's clock."""
        if self.clients[slot] is None or not self.is_replica_available(slot):
            return False, math.inf
        view = self._ledger.views.get(slot)
        if view is None or view.fallback is not None:  # the ledger alone: once nothing sent there is unfinished
            return self._ledger.outstanding(slot) == 0, math.inf
        return next_batch(len(view.waiting), bool(view.running), view.gpu_end_s, view.now, view.step_mode,
                          self._lead_s)

    def _decide(self, slot: int, now: float) -> list[tuple[str, Parked]]:
        """The central policy's batch for ``slot`` (bound, out of the queue), or the fallback's when its decision
        is not used (each request counted); [] to wait."""
        names, reason, wait = self._decider.decide(slot, now)
        self._dispatcher.wait_until = min(self._dispatcher.wait_until, wait)
        if reason is not None:
            for _ in names:
                self._fallback(reason)
        elif not names:
            return []
        return self._take(slot, names)

    def _take(self, slot: int, names: Sequence[str]) -> list[tuple[str, Parked]]:
        """Out of the queue and bound to ``slot`` (before any send: an abort from now on releases the binding)."""
        self._decider.note_sent(names)
        self.central_queue.hand_out(self.central_queue.kind(slot), names)
        out = []
        for name in names:
            item = self._parked.pop(name)
            for rid, it in [(name, item), *item.companions]:
                self._bind(rid, slot, it.entry, "central")
                out.append((rid, it))
        self._queue_gauge.set(len(self._parked))
        self.central_log.append((slot, tuple(names)))
        self.router_decisions += len(out)
        self._decided.inc(len(out))
        return out

    def _bind(self, rid: str, slot: int, entry: Request, how: str) -> None:
        self._request_bindings[rid] = slot
        self._follow(rid, slot, entry)
        self._log_choice(rid, slot, how, entry)

    def _flush(self, reason: str) -> None:
        """Every parked request to be sent at once by vLLM-Omni's rule (``_send_flushed``), counted."""
        for rid in list(self._parked):
            try:
                slot = self._vllm_pick(rid, reason, self._parked[rid].entry)
            except StageUnavailableError:  # no replica left: they stay parked; vLLM-Omni fails the stage's requests
                return
            item = self._unpark(rid)
            assert item is not None
            self._fallback(reason)
            self._flushed.append((rid, item))
            for cid, companion in item.companions:
                self._bind(cid, slot, companion.entry, "parent")
                self._flushed.append((cid, companion))

    async def _send_flushed(self) -> None:
        flushed, self._flushed = self._flushed, []
        for rid, item in flushed:
            slot = self._request_bindings.get(rid)
            if slot is not None:
                await self._send_batch(slot, [(rid, item)])

    async def _send_batch(self, slot: int, items: list[tuple[str, Parked]]) -> None:
        orch = self._orchestrator
        for rid, item in items:
            if self._request_bindings.get(rid) != slot:
                continue  # aborted or failed since it was taken: never sent
            client = self.clients[slot] if 0 <= slot < len(self.clients) else None
            if client is None or not self.is_replica_available(slot):
                self._repark(rid, item)  # the replica left after the decision: back to the head of the queue
                continue

            # the replica dates the request back to when it was parked: its SLO (and its own policy's
            # deadlines) count the central wait, as the simulator's do
            item.params.extra_args = {**(item.params.extra_args or {}),
                                      PARKED_KEY: max(self._wall() - item.since, 0.0) * 1e3}

            async def send(client: Any = client, rid: str = rid, item: Parked = item) -> None:
                await client.add_request_async(rid, item.request, item.params, **item.submit_kwargs)

            try:
                await orch._dispatch_or_fail_request(send, req_id=rid, stage_id=self.stage_id,
                                                     operation="rlsched central dispatch")
            except Exception as exc:  # an error vLLM-Omni's guard lets through: this request fails, the loop lives
                _log.exception("rlsched central (stage %s): sending %s failed", self.stage_id, rid)
                await self._fail(rid, f"rlsched central dispatch of {rid} failed: {exc}")

    def _repark(self, rid: str, item: Parked) -> None:
        with self._lock:
            self.release_binding_only(rid)
            self._parked = {rid: item, **self._parked}
            for view in self.central_queue.views:
                view.receive_dated(rid, item)
            self._queue_gauge.set(len(self._parked))
        self._kick()

    def release_binding_only(self, rid: str) -> None:
        """Unbind ``rid`` without treating it as an exit (it goes back to the queue)."""
        self._decider.sent.pop(rid, None)
        LedgerStagePool.release_binding(self, rid)

    async def _fail(self, rid: str, error: str) -> None:
        fail = getattr(self._orchestrator, "_fail_request_client_error", None)
        try:
            await fail(rid, self.stage_id, error, status_code=500, error_type="InternalServerError",
                       release_owners=True)
        except Exception:
            _log.exception("rlsched central (stage %s): failing %s failed", self.stage_id, rid)
            self.release_binding(rid)

    def fail_parked(self, why: str) -> list[str]:
        """Fail every parked request (shutdown): an ``ErrorMessage`` each to the API process, logged; returns them."""
        with self._lock:
            ids = list(self._parked)
            for rid in ids:
                item = self._unpark(rid)
                ids += [c for c, _ in (item.companions if item else ())]
        if not ids:
            return []
        _log.warning("rlsched central (stage %s): %s with %d requests parked, failing them: %s", self.stage_id, why,
                     len(ids), ids)
        self.router_metrics.released.labels(reason=why).inc(len(ids))
        _report_failed(getattr(self._orchestrator, "output_async_queue", None), self.stage_id, why, ids)
        return ids

    def _vllm_pick(self, rid: str, reason: str, entry: Request | None) -> int:
        """vLLM-Omni's own choice (``StagePool.select_replica_id``, round-robin; it binds ``rid``) for a request
        leaving the queue unasked, followed by the ledger as a request sent at once is."""
        slot = StagePool.select_replica_id(self, rid)
        if entry is not None:
            self._follow(rid, slot, entry)
        self._log_choice(rid, slot, reason, entry)
        return slot

    def parked(self) -> list[str]:
        """The central queue, oldest first (tests, diagnostics)."""
        return list(self._parked)


class _CentralPolicies:
    """The central policies behind the one guard (``guard.py``): one per replica kind, each deciding on its kind's
    ``CentralView`` of the pool's ``CentralQueue``. A decision that is not used (the guard's or the decision
    check's reason; the guard resets the policies before their next call where one raised or overran) gives the
    free replica vLLM-Omni's FIFO with the memory check instead, from the head of the queue as that replica's
    (calibrated) cost sees it (``admission.fifo_that_fits``: O(batch))."""

    def __init__(self, pool: LedgerStagePool, policy: Any) -> None:
        self.pool = cast(CentralStagePool, pool)
        self._arg = policy
        self.queue = CentralQueue()
        self._policies: list[Any] = []
        self.sent: dict[str, list[tuple[PluginState, RequestRecord]]] = {}
        """Sent, unfinished requests' central records: the central policies' history sees each finish."""
        self.guard = self.new_guard()
        self.open()

    # -- the pool's Decider (ledger_pool.Decider)
    def ask(self, req: Request) -> tuple[int | None, str | None]:
        return None, self.pool._direct  # a request sent at once goes by vLLM-Omni's rule

    def replicas_changed(self) -> None:
        self.open()

    def state_heard(self, slot: int) -> None:
        pool = self.pool
        with pool._lock:  # a new calibration published: its kind's central view decides on it (once per version)
            view = pool._ledger.views.get(slot)
            if view is not None:
                self.queue.adopt(slot, view.cost, view.calibration_version)
        if pool._parked:
            pool._kick()  # a replica may take its next batch now

    def replica_left(self) -> None:
        self.pool._kick()

    def new_policy(self) -> Any:
        spec = self._arg if self._arg is not None else (self.pool.router_config.policy or "fifo")
        return make_policy(spec) if isinstance(spec, str) else spec

    def new_guard(self) -> GuardedDecision:
        """The central policy's guard: ``budget_ms``, ``deadline_ms``, ``decision_thread``; the garbage collector
        paused while it decides (the guard's default)."""
        config, metrics = self.pool.router_config, self.pool.router_metrics
        return GuardedDecision(runner_for(self.new_policy(), config.decision_thread, config.deadline_ms / 1e3),
                               config.budget_ms / 1e3, reset=self.reset, observe=metrics.latency.observe)

    def open(self) -> None:
        """The central queue's kinds over the live replicas (``CentralQueue.open``): a ``CentralView`` (and central
        policy) per replica kind, holding the parked requests at their own arrival and deadline."""
        pool = self.pool
        slots = pool._ledger.slots or [0]
        if self.queue.open([(slot, pool._cost_of(slot), pool._ledger.config) for slot in slots], self._new_view):
            self._policies = [None] * len(self.queue.views)
            self.reset()

    def fits_somewhere(self, entry: Request) -> bool:
        """Some live replica's GPU can hold ``entry`` alone (a request none can hold is never parked: it would
        sit in the queue until ``stall_ms``; it is sent at once, ``cannot_fit``, and its engine fails it)."""
        pool = self.pool
        costs = {id(c): c for c in (pool._cost_of(slot) for slot in pool._ledger.slots or [0])}
        return any(cost.fits([cost.record(entry)]) for cost in costs.values())

    def note_sent(self, names: Sequence[str]) -> None:
        """``names`` leave the queue for a replica: their records in every view are kept until they finish."""
        recs = [[(v, v.records[v.int_id(n)]) for n in names] for v in self.queue.views]
        for i, name in enumerate(names):
            self.sent[name] = [pairs[i] for pairs in recs]

    def finished(self, request_id: str) -> None:
        """A sent request left: the central policies' ``on_finish`` hooks see it (``Stage._forward_finish``)."""
        for view, rec in self.sent.pop(request_id, ()):
            rec.finish_s, rec.status = view.time(), COMPLETED
            for hook in view.on_finish:
                try:
                    hook(rec)
                except Exception:  # a policy's bookkeeping must not fail a request
                    pass

    def _new_view(self, slot: int) -> CentralView:
        pool = self.pool
        view = CentralView(pool._cost_of(slot), pool._ledger.config, pool.router_settings, clock=pool._clock)
        view._t0 = pool._t0  # one clock with the ledger
        for rid, item in pool._parked.items():
            view.receive_dated(rid, item)
        return view

    def reset(self) -> None:
        for k, view in enumerate(self.queue.views):
            policy = self.new_policy()
            policy.reset(view)
            self._policies[k] = policy

    def decide(self, slot: int, now: float) -> tuple[list[str], str | None, float]:
        """For free replica ``slot``: the requests to hand it, the reason the central policy's decision was not
        used (None: it was), and the ``wait_until`` it asked for (INF: none)."""
        k, view = self.queue.view_for(slot, now)
        reason, checked = self.guard.call(_checked_decision, (self._policies[k], view))
        if reason is None:
            (reason, ids), decision = checked
        if reason is not None:
            ids = fifo_that_fits(view.waiting.values(), (), view.cost, view.config.max_num_seqs)
            _log.debug("rlsched central (stage %s): the central policy's decision was not used (%s): replica %s "
                       "gets %d requests by FIFO with the memory check", self.pool.stage_id, reason, slot, len(ids))
            return [view.name(i) for i in ids], reason, math.inf
        wait = getattr(decision, "wait_until", None) if not ids else None
        return [view.name(i) for i in ids], None, float(wait) if wait is not None and wait > view.now else math.inf


class _Dispatcher:
    """The central pool's task on the orchestrator's loop: a dispatch round (``CentralStagePool.dispatch``) each
    time it is kicked (a park, a state heard, an exit), else when the earliest ``wait_until`` a central policy
    asked for comes or the next replica comes within the lead of its predicted end, at least every
    ``IDLE_POLL_S``. A round that raises (a bug) breaks the pool down: nothing is parked from then on."""

    def __init__(self, pool: CentralStagePool) -> None:
        self.pool = pool
        self.wait_until = math.inf
        """The earliest ``wait_until`` a central policy asked for in the last round (plugin clock)."""
        self.round_s = -math.inf
        """The pool clock of the last round (``sleep_s``: a replica within its lead since then)."""
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def kick(self) -> None:
        """Wake the dispatcher (its task started on the running loop at the first kick)."""
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # not on the orchestrator's loop: nothing parked can be waiting for this
            self._loop, self._wake = loop, asyncio.Event()
            self._task = loop.create_task(self._run(), name=f"rlsched-central-stage-{self.pool.stage_id}")
        assert self._loop is not None and self._wake is not None
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _run(self) -> None:
        wake, pool = self._wake, self.pool
        assert wake is not None
        try:
            while not self._shutting_down():
                wake.clear()  # before the round: a kick during its sends is not lost
                try:
                    await pool.dispatch()
                except Exception:  # a bug here must not leave requests parked with no one to send them
                    await self._break_down()
                if not wake.is_set():
                    try:
                        await asyncio.wait_for(wake.wait(), self.sleep_s())
                    except asyncio.TimeoutError:
                        pass
        except asyncio.CancelledError:
            pool.fail_parked("shutdown")
            raise
        pool.fail_parked("shutdown")

    async def _break_down(self) -> None:
        """The dispatcher raised (a bug): park nothing from now on, send what is parked by vLLM-Omni's rule."""
        pool = self.pool
        _log.exception("rlsched central (stage %s): the dispatcher failed; every request is sent at once by "
                       "vLLM-Omni's rule from now on", pool.stage_id)
        pool._broken = True
        try:
            with pool._lock:
                pool._flush("internal_error")
            await pool._send_flushed()
        except Exception:
            _log.exception("rlsched central (stage %s): flushing the central queue failed", pool.stage_id)
            pool.fail_parked("internal error")

    def sleep_s(self) -> float:
        """Until the earliest ``wait_until`` a policy asked for or the next replica coming within the lead
        of its predicted end, capped by ``IDLE_POLL_S``."""
        pool = self.pool
        now = pool._clock() - pool._t0
        scale = pool.router_settings.time_scale
        wake = min(self.wait_until, self._next_lead())
        ahead = (wake - now) / scale if math.isfinite(wake) else IDLE_POLL_S
        return min(max(ahead, 0.0), IDLE_POLL_S)

    def _next_lead(self) -> float:
        """When (pool clock) the next replica that was not free at the last round comes within the lead of
        its running wave's predicted end, with requests parked (INF: none)."""
        pool = self.pool
        if not pool._parked:
            return math.inf
        with pool._lock:
            wake = math.inf
            for view in pool._ledger.stage.replicas:
                if view.fallback is None:
                    at = next_batch_s(len(view.waiting), bool(view.running), view.gpu_end_s, view.step_mode,
                                      pool._lead_s)
                    if at > self.round_s:
                        wake = min(wake, at)
            return wake

    def _shutting_down(self) -> bool:
        event = getattr(self.pool._orchestrator, "_shutdown_event", None)
        return bool(event is not None and event.is_set())


def _checked_decision(job: tuple[Any, PluginState]) -> tuple[tuple[str | None, tuple[int, ...]], Any]:
    """On the decision thread: the central policy's decision and its check (a slow or endless ``batch`` is read
    there too, within the deadline)."""
    policy, view = job
    decision = policy.decide(view)
    return check_decision(decision, view), decision


def _report_failed(queue: Any, stage_id: int, why: str, ids: list[str]) -> None:
    """An ``ErrorMessage`` to the API process (the orchestrator's output queue) for each request failed parked."""
    if queue is None:
        return
    from vllm_omni.engine.messages import ErrorMessage

    for rid in ids:
        try:
            queue.put_nowait(ErrorMessage(error=f"server {why}: request was waiting in rlsched's central queue",
                                          fatal=True, request_id=rid, stage_id=stage_id))
        except Exception:
            _log.debug("rlsched central: could not report %s", rid, exc_info=True)


def _overrides(obj: Any, name: str) -> bool:
    """Whether ``obj``'s class overrides ``OrchestratorBase.name`` (its subclasses' seams)."""
    from vllm_omni.engine.orchestrator import OrchestratorBase

    return getattr(type(obj), name, None) is not getattr(OrchestratorBase, name, None)


__all__ = ["PARKED", "CentralStagePool"]
