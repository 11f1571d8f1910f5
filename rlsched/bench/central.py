"""``rlsched bench central``: the central pool's decisions (late binding, ``POLICY@central``) against their budget
on a loaded host.

A real vLLM-Omni ``Orchestrator`` over a ``CentralStagePool`` of two fake replicas (they publish their state
and finish what they were sent, a batch at a time), the default ``RouterConfig`` (2 ms budget, 50 ms deadline,
the decision on the orchestrator's thread), ``--queues`` requests parked in one burst (default 200, the load
of issue 47), sent until none is left. The API server's other work runs beside it: ``--load-threads``
Python threads that compute (default 1: the HTTP thread encoding images, which takes the GIL from the
orchestrator's thread), on top of whatever else the machine runs. Per policy: the guarded decisions,
those slower than the budget (``slow``), the fallbacks per 1,000 decisions (every reason, per request sent
by a fallback), and per decision the p50/p99 of the time it ran (what the budget is checked against:
``guard.py``) and of the time the orchestrator's thread waited for it (wall clock), with the share of
decisions whose wall clock passed the budget (``wall_over_budget_pct``: what a wall-clock budget discards).

This module imports no vLLM (``rlsched bench`` imports every bench module); the pool is built when the
bench runs and needs the plugin tier.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from rlsched import bounds
from rlsched.argtypes import int_list
from rlsched.bench import bench, percentiles_us

POLICIES = ("edf", "static:agents/tuned/default.json")
PROFILE = "qwen-image-h200-vllm-omni"
SIZES = (512, 768, 1024)
BATCH = 4
"""The replicas' ``max_num_seqs`` (``rlsched deploy --max-num-seqs 4``, as the e2e tier serves)."""


@bench("central")
def central_speed(args: argparse.Namespace) -> dict[str, Any]:
    """Per policy: central decisions, slower than budget, fallbacks per 1,000 decisions, own / wall µs."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    policies = [p for p in args.policies.split(",") if p] or list(POLICIES)
    queues = int_list(args.queues, "--queues", bounds.COUNT) if args.queues else [200]
    out: dict[str, Any] = {"load_threads": args.load_threads, "loadavg_1m": round(os.getloadavg()[0], 2)}
    with _Load(args.load_threads):
        for policy in policies:
            for queue in queues:
                out[f"{policy} @ {queue}"] = asyncio.run(_run(policy, queue, args.repeats))
    return out


class _Load:
    """``n`` threads computing in Python (the API server's other work) while the bench runs."""

    def __init__(self, n: int) -> None:
        self.n, self._stop = n, threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> _Load:
        self._threads = [threading.Thread(target=self._spin, daemon=True) for _ in range(self.n)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _spin(self) -> None:
        while not self._stop.is_set():
            sum(i * i for i in range(2000))


async def _run(policy: str, queue: int, repeats: int) -> dict[str, Any]:
    import janus
    from prometheus_client import CollectorRegistry
    from vllm_omni.engine.orchestrator import Orchestrator

    from rlsched.integrations.vllm_omni.central_pool import CentralStagePool
    from rlsched.integrations.vllm_omni.config import PluginConfig
    from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics
    from rlsched.sim.simulator import ServingConfig

    replicas = [_Replica(), _Replica()]
    config = RouterConfig(router="central", policy=policy)  # the default budget and deadline
    pool = CentralStagePool(0, list(replicas), policy=policy, config=config, settings=PluginConfig(profile=PROFILE),
                            serving=ServingConfig("request", max_num_seqs=BATCH),
                            metrics=RouterMetrics(CollectorRegistry()))
    orch = Orchestrator(*(janus.Queue().async_q for _ in range(3)), [pool])
    pool.attach_orchestrator(orch)
    timing = _Timing(pool._guard)
    for rep in range(repeats):
        for i in range(queue):
            await _add(orch, f"r{rep}-{i}", SIZES[i % len(SIZES)])
        await _drain(pool, replicas)
    fallbacks = sum(pool.router_fallbacks.values())
    return {"decisions": len(timing.own), "slow": timing.slow,
            "slow_pct": round(100 * timing.slow / max(len(timing.own), 1), 2),
            "wall_over_budget_pct": round(100 * float(np.mean(np.asarray(timing.wall) > config.budget_ms / 1e3)), 2),
            "fallbacks_per_1000": round(1000 * fallbacks / max(len(timing.own), 1), 1),
            "fallbacks": dict(pool.router_fallbacks),
            "own": percentiles_us(np.asarray(timing.own) * 1e6), "wall": percentiles_us(np.asarray(timing.wall) * 1e6)}


class _Timing:
    """Wraps a guard's ``call``: each completed decision's own time (what the budget is checked against, via
    the guard's ``observe``) and the wall time its caller waited; the ones the guard found slow."""

    def __init__(self, guard: Any) -> None:
        self.own: list[float] = []
        self.wall: list[float] = []
        self.slow = 0
        call, observe = guard.call, guard._observe

        def timed(fn: Any, arg: Any) -> Any:
            t0 = time.perf_counter()
            reason, value = call(fn, arg)
            if reason in (None, "slow"):
                self.wall.append(time.perf_counter() - t0)
                self.slow += reason == "slow"
            return reason, value

        def observed(seconds: float) -> None:
            self.own.append(seconds)
            if observe is not None:
                observe(seconds)

        guard.call, guard._observe = timed, observed


class _Replica:
    """A diffusion replica's head-side client: what it is sent waits in ``inbox``; ``run`` starts its next
    batch (published: a carrier output with its state) and finishes its running one."""

    stage_type = "diffusion"
    final_output = True

    def __init__(self) -> None:
        self.inbox: deque[str] = deque()
        self.outbox: deque[Any] = deque()
        self.seq = 0
        self.running: list[str] = []

    async def add_request_async(self, request_id: str, request: Any, params: Any, **kw: Any) -> None:
        self.inbox.append(request_id)

    async def abort_requests_async(self, ids: list[str]) -> None: ...

    def get_diffusion_output_nowait(self) -> Any:
        return self.outbox.popleft() if self.outbox else None

    def shutdown(self) -> None: ...


async def _add(orch: Any, rid: str, size: int) -> None:
    from vllm_omni.engine.messages import StageSubmissionMessage
    from vllm_omni.inputs.data import OmniDiffusionSamplingParams

    sp = OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=20, extra_args={"priority": "batch"})
    await orch._handle_add_request(StageSubmissionMessage(
        type="add_request", request_id=rid, prompt={"prompt": rid}, original_prompt={"prompt": rid},
        output_prompt_text=None, sampling_params_list=[sp], final_stage_id=0, preprocess_ms=0.0,
        request_timestamp=0.0, enqueue_ts=0.0))


async def _drain(pool: Any, replicas: list[_Replica]) -> None:
    """Each replica, in turn, finishes its running batch and starts the next it was sent (publishing its state
    through the orchestrator's poll), until nothing is parked, sent or running."""
    from vllm_omni.diffusion.data import DIFFUSION_REQUEST_LIFECYCLE_KEY, DIFFUSION_REQUEST_STARTED
    from vllm_omni.outputs import OmniRequestOutput

    from rlsched.routing.views import STATE_KEY, replica_state

    orch = pool._orchestrator
    for _ in range(100_000):
        await asyncio.sleep(0)
        if not (pool.parked() or any(r.inbox or r.running for r in replicas)):
            return
        for slot, rep in enumerate(replicas):
            done, rep.running = rep.running, [rep.inbox.popleft() for _ in range(min(BATCH, len(rep.inbox)))]
            rep.seq += 1
            state = replica_state(rep.seq, 0.5 if rep.running else 0.0, [(r, 0) for r in rep.running], tuple(done))
            rep.outbox.append(OmniRequestOutput.from_diffusion(
                request_id=(rep.running or done or ["x"])[0], images=[],
                metrics={STATE_KEY: {**state, "carrier": True}}, finished=False,
                custom_output={DIFFUSION_REQUEST_LIFECYCLE_KEY: DIFFUSION_REQUEST_STARTED}))
            assert pool.poll_diffusion_output(slot) is None  # the carrier, swallowed: the dispatcher wakes
            if done:
                await orch._cleanup_request_ids(done)
            for _ in range(3):
                await asyncio.sleep(0)
    raise RuntimeError("rlsched bench central: the central queue did not drain")


__all__ = ["central_speed"]
