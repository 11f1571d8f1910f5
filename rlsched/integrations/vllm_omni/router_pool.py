"""``RouterStagePool``: vLLM-Omni 0.30's ``StagePool`` with an rlsched router in ``select_replica_id``.

``router.install`` puts one in place of a diffusion stage's pool (see ``router``'s docstring). It is a
``LedgerStagePool`` (``ledger_pool.py``: the ledger, the replicas' published states, the bindings) whose
decider (``RouterDecider``) asks its router, through the one guarded decision (``guard.py``): a router that raises,
overruns ``budget_ms`` or ``deadline_ms``, returns anything but an ``int`` index of the live replicas,
or picks one that left meanwhile is overruled by vLLM-Omni's round-robin for that request, counted by
reason (``routing.REASONS``); a router that raised or was interrupted is reset before it is asked again,
as it is whenever the live replicas change.

Distributed mode (``--omni-lb-policy``: a hub and a ``LoadBalancer`` attached) routes in ``pick``,
which asks the load balancer and never calls ``select_replica_id``. ``attach_load_balancer`` wraps the
balancer vLLM-Omni attaches (its ``_build_load_balancer_factory`` enum: random, round-robin,
least-queue-length) in a ``RouterLoadBalancer``: the router chooses among the UP replicas ``pick``
offers, with the same ledger, checks and fallbacks (the wrapped balancer's choice, counted), and the
ledger follows the request until ``release_binding``. A fallback never sends a request to a replica whose
GPU cannot hold it alone (by that replica's calibrated cost) while another can (``_one_that_holds``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, cast

from rlsched.integrations.vllm_omni.guard import GuardedDecision, runner_for
from rlsched.integrations.vllm_omni.ledger_pool import LedgerStagePool
from rlsched.integrations.vllm_omni.routing import RouterConfig
from rlsched.routing.routers import make_router
from rlsched.routing.views import LedgerStage, ViewRouter
from rlsched.sim.request import Request
from rlsched.sim.stage import Router


class RouterDecider:
    """The router behind the one guarded decision (``guard.py``; the module docstring), as the pool's ``Decider``:
    reset over the live replicas whenever they change, and after it raised or was interrupted."""

    def __init__(self, pool: LedgerStagePool, router: Router) -> None:
        self.pool, self.router = pool, router
        config, metrics = pool.router_config, pool.router_metrics
        self._decided = metrics.decisions.labels(router=getattr(router, "name", "router"))
        self.guard = GuardedDecision(runner_for(router, config.decision_thread, config.deadline_ms / 1e3),
                                     config.budget_ms / 1e3, reset=self.reset, observe=metrics.latency.observe)
        """The guard of this pool's decisions: ``budget_ms``, ``deadline_ms``, ``decision_thread``; the garbage
        collector paused while the router decides (the guard's default)."""

    def ask(self, req: Request) -> tuple[int | None, str | None]:
        """The router's replica slot for ``req``, or (None, the fallback reason)."""
        pool = self.pool
        slots = pool._ledger.slots
        stage = pool._views_at(pool._ledger.stage.now)
        reason, pos = self.guard.call(self._route, (req, stage))
        if reason is not None:
            if reason == "exception":
                pool._log_once("exception", "routing")
            return None, reason
        if type(pos) is not int:
            return None, "not_int"
        if not 0 <= pos < len(slots):
            return None, "out_of_range"
        slot = slots[pos]
        if pool.clients[slot] is None or not pool.is_replica_available(slot):
            return None, "evicted"
        pool.router_decisions += 1
        self._decided.inc()
        return slot, None

    def _route(self, job: tuple[Request, LedgerStage]) -> Any:
        """On the decision thread: the router's answer (checked by ``ask`` on the orchestrator's)."""
        return self.router.route(*job)

    def replicas_changed(self) -> None:
        self.reset()

    def reset(self) -> None:
        try:
            self.router.reset(self.pool._ledger.stage)
        except Exception:
            self.pool._log_once("exception", "resetting the router")

    def state_heard(self, slot: int) -> None:
        pass

    def replica_left(self) -> None:
        pass


class RouterStagePool(LedgerStagePool):
    """See the module docstring. ``router``: a router spec or object (default ``config.router``); the other
    arguments are ``LedgerStagePool``'s."""

    def __init__(self, stage_id: int, clients: Any, *, router: str | Router | None = None, **kw: Any) -> None:
        config = kw["config"] = kw.get("config") or RouterConfig()
        chosen: Router = _unwrapped(make_router(router or config.router)
                                    if router is None or isinstance(router, str) else router)
        super().__init__(stage_id, clients, decider=partial(RouterDecider, router=chosen), **kw)
        self.router = chosen
        self._guard = cast(RouterDecider, self.decider).guard

    # -------------------------------------------------------- distributed mode
    def attach_load_balancer(self, lb: Any) -> None:
        """vLLM-Omni's distributed-mode balancer, wrapped so the router chooses (``RouterLoadBalancer``)."""
        super().attach_load_balancer(None if lb is None else RouterLoadBalancer(self, lb))

    def balance(self, task: Any, replicas: Sequence[Any], fallback: Any) -> int:
        """``RouterLoadBalancer.select``: the index in ``replicas`` (UP and attached, from ``pick``) of the
        router's choice, else of ``fallback``'s (vLLM-Omni's balancer), counted; the ledger follows it."""
        with self._lock:
            rid = task.get("request_id") if isinstance(task, dict) else None
            offered = [self._addr_to_replica_id.get(getattr(rep, "input_addr", None)) for rep in replicas]
            req, reason = None, None
            try:
                self._follow_live()
                req = self._request(rid) if rid is not None else None
            except Exception:
                self._log_once("internal_error", "reading the request")
                reason = "internal_error"
            slot, how = None, "router"
            if req is not None and self._ledger.slots:
                slot, reason = self.decider.ask(req)
                if slot is not None and slot not in offered:  # a replica pick does not offer: not UP on the hub
                    slot, reason = None, "evicted"
            elif reason is None:
                reason = "no_request"
            if slot is None:
                self._fallback(reason or "no_request")
                index = self._offered_that_holds(fallback.select(task, list(replicas)), offered, req)
                slot, how = offered[index] if 0 <= index < len(offered) else None, reason or "vllm-omni"
            else:
                index = offered.index(slot)
            if req is not None and slot is not None and rid is not None:
                self._follow(rid, slot, req)
            if rid is not None and slot is not None:
                self._log_choice(rid, slot, how, req)
            return index


    def _offered_that_holds(self, index: int, offered: list[int | None], req: Request | None) -> int:
        """The balancer's ``index``, unless that replica's GPU cannot hold ``req`` alone while another one
        offered can (``_one_that_holds``)."""
        slot = offered[index] if 0 <= index < len(offered) else None
        if slot is None or req is None:
            return index
        better = self._one_that_holds(slot, req)
        return offered.index(better) if better in offered else index


class RouterLoadBalancer:
    """A ``LoadBalancer`` (``select(task, replicas) -> index``) that asks the pool's router
    (``RouterStagePool.balance``), with vLLM-Omni's own balancer as the fallback."""

    def __init__(self, pool: RouterStagePool, fallback: Any) -> None:
        self.pool, self.fallback = pool, fallback

    def select(self, task: Any, replicas: list[Any]) -> int:
        if not replicas:
            return self.fallback.select(task, replicas)  # vLLM-Omni's own error for an empty list
        return self.pool.balance(task, replicas, self.fallback)


def _unwrapped(router: Any) -> Any:
    """The router itself: ``make_router`` wraps one that reads the replicas in the simulator's ``ViewRouter``
    (``view=engine``, its default), which builds the deployed router's view from a simulated stage; here
    the pool's ledger and the replicas' published states are that view, and the router decides on it."""
    return router.router if isinstance(router, ViewRouter) else router


__all__ = ["RouterLoadBalancer", "RouterStagePool"]
