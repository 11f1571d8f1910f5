"""``rlsched bench router``: the engine's router pool (``RouterStagePool``) at fleet scale, on fake replicas.

The real pool, the default ``RouterConfig`` (the ``rlsched`` router, 2 ms budget, the decision on the
orchestrator's thread) over ``--replicas`` fake replicas (default 8, 64 and 1,024), each of which publishes
its state as rlsched's engine does (a carrier output polled through ``poll_diffusion_output``) when it
starts a batch: of up to 4 requests (``max_num_seqs``; each 1024², 20 steps), running for the profile's
duration of that batch. Arrivals are Poisson at ``--fleet-load`` (default ``LOAD``) of the fleet's
capacity (in full batches) on the pool's clock (a simulated one: no sleeping), every request through
``submit_initial`` as vLLM-Omni's orchestrator submits it; a finished request's binding is released as
the orchestrator's cleanup does. The states reach the pool at once (no publication delay) and every
replica publishes an idle state first (none is seen through the ledger alone). What is measured is the
decision and the state handling, not a GPU.

Per replica count: ``--calls`` requests (default the larger of 4,000 and ten per replica: the fleet reaches
its steady queues; the first ``replicas`` of them, which fill an empty fleet, untimed); per request the CPU
time (this thread's) and the wall time of the whole ``submit_initial`` (``submit``: the decision, the
ledger, the send to the fake client) and the guarded router's own time (``decision``: what the budget is
checked against), p50/p99 in µs; the states handled per second of CPU time in ``poll_diffusion_output``;
the fallbacks per 1,000 decisions (every reason) and the replica views seen through the ledger alone. With
``count=K`` (the tests), over the last K requests (timed ones): ``calls_per_decision``, Python and C
function calls per ``submit_initial`` (``sys.setprofile``), and ``membership_reads``,
``is_replica_available`` calls per decision.

This module imports no vLLM (``rlsched bench`` imports every bench module); the pool is built when the
bench runs and needs the plugin tier.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import os
import sys
import time
from collections import deque
from types import SimpleNamespace
from typing import Any

import numpy as np

from rlsched import bounds
from rlsched.argtypes import int_list
from rlsched.bench import bench, percentiles_us

PROFILE = "qwen-image-h200-vllm-omni"
REPLICAS = (8, 64, 1024)
CALLS = 4000
PER_REPLICA = 10
BATCH = 4
"""The replicas' ``max_num_seqs`` (``rlsched deploy --max-num-seqs 4``, as the e2e tier serves)."""
LOAD = 0.8
"""Arrivals as a share of the fleet's capacity (``replicas × BATCH`` requests per batch duration)."""
SIZE, STEPS = 1024, 20


@bench("router")
def router_speed(args: argparse.Namespace) -> dict[str, Any]:
    """Per replica count: submit / decision CPU and wall µs, states per second, fallbacks per 1,000 decisions."""
    _needs_vllm()
    replicas = int_list(args.replicas, "--replicas", bounds.REPLICAS) if args.replicas else list(REPLICAS)
    load = getattr(args, "fleet_load", None) or LOAD
    out: dict[str, Any] = {"loadavg_1m": round(os.getloadavg()[0], 2), "load": load}
    for n in replicas:
        out[str(n)] = asyncio.run(Fleet(n, load=load).run(args.calls or max(CALLS, PER_REPLICA * n)))
    return out


NEEDS_VLLM = ("rlsched bench router needs the vLLM tier (vllm 0.30.0 + vllm-omni 0.30.0), which this Python "
              "lacks ({missing}). Build it with `make .venv-vllm/.installed`, then run "
              "`.venv-vllm/bin/rlsched bench router` (or `make bench-router`).")


def _needs_vllm() -> None:
    """Import vLLM-Omni (its import log to stderr, so that ``--json`` prints one JSON object), or SystemExit with
    how to get the vLLM tier."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    with contextlib.redirect_stdout(sys.stderr):  # vLLM's log handler binds sys.stdout at import
        try:
            import vllm_omni.engine.stage_pool  # noqa: F401
        except ModuleNotFoundError as exc:
            raise SystemExit(NEEDS_VLLM.format(missing=f"no module {exc.name!r}")) from None


class _Replica:
    """A diffusion replica's head-side client: what it is sent waits in ``inbox``; ``outbox`` holds the outputs
    the pool polls (carriers with the replica's state)."""

    stage_type = "diffusion"
    final_output = True

    def __init__(self) -> None:
        self.inbox: deque[str] = deque()
        self.outbox: deque[Any] = deque()
        self.running: list[str] = []
        self.got: list[str] = []
        self.seq = 0

    async def add_request_async(self, request_id: str, request: Any, params: Any, **kw: Any) -> None:
        self.inbox.append(request_id)
        self.got.append(request_id)

    async def abort_requests_async(self, ids: list[str]) -> None: ...

    def get_diffusion_output_nowait(self) -> Any:
        return self.outbox.popleft() if self.outbox else None

    def shutdown(self) -> None: ...


class Fleet:
    """``n`` fake replicas behind one ``RouterStagePool`` on a simulated clock (the module docstring)."""

    def __init__(self, n: int, seed: int = 0, count: int = 0, load: float = LOAD) -> None:
        from prometheus_client import CollectorRegistry
        from vllm_omni.inputs.data import OmniDiffusionSamplingParams

        from rlsched.integrations.vllm_omni.config import PluginConfig
        from rlsched.integrations.vllm_omni.router_pool import RouterStagePool
        from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics
        from rlsched.integrations.vllm_omni.state import make_request
        from rlsched.sim.simulator import ServingConfig

        self.now = 0.0
        self.replicas = [_Replica() for _ in range(n)]
        # counting, the profiler slows a decision past the default budget: a minute's, so none falls back
        config = RouterConfig(budget_ms=60_000, deadline_ms=60_000) if count else RouterConfig()
        self.pool = RouterStagePool(0, list(self.replicas), config=config,
                                    settings=PluginConfig(profile=PROFILE), clock=lambda: self.now,
                                    serving=ServingConfig("request", max_num_seqs=BATCH),
                                    metrics=RouterMetrics(CollectorRegistry()))
        self.params = OmniDiffusionSamplingParams(height=SIZE, width=SIZE, num_inference_steps=STEPS,
                                                  extra_args={"priority": "batch"})
        cost = self.pool._base_cost
        req = make_request(0, 0.0, self.params, self.pool.router_settings, cost)
        self.batch_s = [0.0] + [cost.batch_duration([cost.record(req)] * k) for k in range(1, BATCH + 1)]
        """The profile's duration of a batch of k requests (index k)."""
        self.rate = load * n * BATCH / self.batch_s[BATCH]
        self.rng = np.random.default_rng(seed)
        self.ends: list[tuple[float, int]] = []
        self.count = count
        self.decision_s: list[float] = []
        self.state_cpu_s = 0.0
        self.states = 0
        self.calls = 0
        self.reads = 0
        observe = self.pool._guard._observe

        def observed(seconds: float) -> None:
            self.decision_s.append(seconds)
            if observe is not None:
                observe(seconds)

        self.pool._guard._observe = observed

    async def run(self, requests: int) -> dict[str, Any]:
        for slot in range(len(self.replicas)):
            self._publish(slot, ())
        warm = min(len(self.replicas), requests // 2)
        cpu, wall, timed = [], [], 0
        next_arrival = self.rng.exponential(1 / self.rate)
        for i in range(requests):
            while self.ends and self.ends[0][0] <= next_arrival:
                self.now, slot = heapq.heappop(self.ends)
                self._batch_ends(slot)
            self.now = next_arrival
            t, c = time.perf_counter(), time.thread_time()
            slot = await self._submit(f"r{i}", counted=i >= max(warm, requests - self.count))
            if i >= warm:
                cpu.append(time.thread_time() - c)
                wall.append(time.perf_counter() - t)
                timed += 1
            if not self.replicas[slot].running:
                self._start(slot, ())
            next_arrival += self.rng.exponential(1 / self.rate)
        return self._report(np.asarray(cpu), np.asarray(wall), timed, warm)

    async def _submit(self, rid: str, counted: bool) -> int:
        req_state = SimpleNamespace(sampling_params_list=[self.params])
        if not counted:
            return await self.pool.submit_initial(rid, req_state, {"prompt": rid})
        pool: Any = self.pool
        available = pool.is_replica_available

        def reading(slot: int) -> bool:
            self.reads += 1
            return available(slot)

        pool.is_replica_available = reading
        sys.setprofile(self._profile)
        try:
            return await pool.submit_initial(rid, req_state, {"prompt": rid})
        finally:
            sys.setprofile(None)
            del pool.is_replica_available

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            self.calls += 1

    def _batch_ends(self, slot: int) -> None:
        rep = self.replicas[slot]
        done, rep.running = rep.running, []
        self._start(slot, done)
        for rid in done:  # the orchestrator's cleanup of a finished request
            self.pool.release_binding(rid)

    def _start(self, slot: int, done: Any) -> None:
        rep = self.replicas[slot]
        rep.running = [rep.inbox.popleft() for _ in range(min(BATCH, len(rep.inbox)))]
        if rep.running:
            heapq.heappush(self.ends, (self.now + self.batch_s[len(rep.running)], slot))
        self._publish(slot, done)

    def _publish(self, slot: int, done: Any) -> None:
        """A carrier with the replica's state, polled by the pool (and swallowed)."""
        from vllm_omni.diffusion.data import DIFFUSION_REQUEST_LIFECYCLE_KEY, DIFFUSION_REQUEST_STARTED
        from vllm_omni.outputs import OmniRequestOutput

        from rlsched.routing.views import STATE_KEY, replica_state

        rep = self.replicas[slot]
        rep.seq += 1
        state = replica_state(rep.seq, self.batch_s[len(rep.running)], [(r, 0) for r in rep.running],
                              tuple(done))
        rep.outbox.append(OmniRequestOutput.from_diffusion(
            request_id=(rep.running or list(done) or ["idle"])[0], images=[],
            metrics={STATE_KEY: {**state, "carrier": True}}, finished=False,
            custom_output={DIFFUSION_REQUEST_LIFECYCLE_KEY: DIFFUSION_REQUEST_STARTED}))
        c = time.thread_time()
        if self.pool.poll_diffusion_output(slot) is not None:
            raise RuntimeError("rlsched bench router: a carrier reached the orchestrator")
        self.state_cpu_s += time.thread_time() - c
        self.states += 1

    def _report(self, cpu: Any, wall: Any, timed: int, warm: int) -> dict[str, Any]:
        pool = self.pool
        decisions = pool.router_decisions + sum(pool.router_fallbacks.values())
        out: dict[str, Any] = {
            "submit_cpu": percentiles_us(cpu * 1e6), "submit_wall": percentiles_us(wall * 1e6),
            "decision": percentiles_us(np.asarray(self.decision_s[warm:]) * 1e6),
            "states": self.states, "states_per_s": round(self.states / max(self.state_cpu_s, 1e-9)),
            "fallbacks_per_1000": round(1000 * sum(pool.router_fallbacks.values()) / max(decisions, 1), 1),
            "fallbacks": dict(pool.router_fallbacks), "view_fallbacks": dict(pool.view_fallbacks),
            "routed": decisions, "sent": sum(len(r.got) for r in self.replicas),
            "sent_once": len({rid for r in self.replicas for rid in r.got}), "requests": timed + warm,
            "simulated_s": round(self.now, 1)}
        if self.count:
            counted = min(self.count, timed)
            out["calls_per_decision"] = round(self.calls / max(counted, 1), 1)
            out["membership_reads"] = round(self.reads / max(counted, 1), 2)
        return out


__all__ = ["Fleet", "router_speed"]
