"""``rlsched bench decision``: one whole RL decision (encode + forward + projection), one core.

The state: ``n`` requests of the ``default`` mix waiting at once (request mode, GPU
idle). The policy: ``rl:checkpoints/default`` when it exists, else a network of the
same shape with random weights (the forward pass costs the same).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np

from rlsched.bench import bench, percentiles_us
from rlsched.learned.checkpoint import FrozenNetwork
from rlsched.learned.knob import LearnedPolicy, rl_policy
from rlsched.learned.observation import OBS_DIM
from rlsched.policies.projected import ACTION_DIM
from rlsched.resources import data_dir
from rlsched.sim import Simulator, load_scenario

QUEUE_SIZES = (16, 256, 4096)
CALLS = {16: 3000, 256: 2000, 4096: 200}
DEFAULT_CHECKPOINT = data_dir("checkpoints") / "default"


def waiting_state(n: int, seed: int = 0) -> Simulator:
    """A simulator at a decision point with ``n`` requests of ``default`` waiting."""
    sc = load_scenario("default")
    cost = sc.cost()
    reqs = sc.requests(seed, rate_scale=1.0, duration_s=sc.duration_s * 40, cost=cost)[:n]
    reqs = [dataclasses.replace(r, arrival_s=0.0) for r in reqs]
    sim = Simulator(reqs, cost, sc.serving)
    sim.advance_to_next_decision()
    return sim


def random_network(seed: int = 0, hidden: tuple[int, ...] = (64, 64)) -> FrozenNetwork:
    rng = np.random.default_rng(seed)
    sizes = (OBS_DIM, *hidden, ACTION_DIM)
    layers = tuple((rng.normal(0, 0.1, (o, i)).astype(np.float32), np.zeros(o, np.float32))
                   for i, o in zip(sizes[:-1], sizes[1:]))
    return FrozenNetwork(layers, "tanh", np.zeros(OBS_DIM, np.float32), np.ones(OBS_DIM, np.float32), 5.0, 1e-8, {})


def make_policy_for_bench() -> tuple[LearnedPolicy, str]:
    if (DEFAULT_CHECKPOINT / "policy.json").is_file():
        return rl_policy(DEFAULT_CHECKPOINT), "rl:checkpoints/default"
    return LearnedPolicy(random_network()), "random network (no checkpoints/default yet)"


@bench("decision")
def decision_speed(args: argparse.Namespace) -> dict[str, Any]:
    """p50/p99 of a full RL decision at 16, 256 and 4,096 waiting requests (``--policies``:
    another policy spec, e.g. ``pick:checkpoints/pick``, instead of the shipped knob policy)."""
    if args.policies:
        from rlsched.policies import make_policy

        label = args.policies.split(",")[0]
        policy = make_policy(label)
    else:
        policy, label = make_policy_for_bench()
    out: dict[str, Any] = {"policy": label}
    scale = max(1, args.repeats) / 5
    for n in QUEUE_SIZES:
        sim = waiting_state(n)
        policy.reset(sim)
        calls = max(50, int(CALLS[n] * scale))
        for _ in range(min(200, calls)):  # warm-up
            policy.decide(sim)
        us = np.empty(calls)
        for i in range(calls):
            t = time.perf_counter_ns()
            policy.decide(sim)
            us[i] = (time.perf_counter_ns() - t) / 1e3
        out[str(n)] = percentiles_us(us)
    return out


ROUTE_WAITING = 256
ROUTE_CALLS = 2000


@bench("route")
def route_speed(args: argparse.Namespace) -> dict[str, Any]:
    """p50/p99 of one routing decision on the 8-replica scenario (``qwen-image-8gpu``) with 256
    requests waiting across the replicas: the learned router (``router:checkpoints/router``, or
    ``--policies`` router specs) beside rlsched's and vLLM-Omni's round-robin; wall and CPU time
    per call after 200 warm-up calls (the per-shape caches fill once). Target: p99 <= 1 ms."""
    from rlsched.routing.routers import make_router
    from rlsched.sim.stage import Stage

    pool = load_scenario("qwen-image-8gpu")
    cost = pool.cost()
    reqs = pool.requests(0, rate_scale=1.0, duration_s=pool.duration_s, cost=cost)
    waiting, probes = reqs[:ROUTE_WAITING], [dataclasses.replace(r, arrival_s=0.0) for r in reqs[ROUTE_WAITING:]]
    routers = args.policies.split(",") if args.policies else ["router", "rlsched", "round-robin"]
    out: dict[str, Any] = {"scenario": pool.name, "waiting": ROUTE_WAITING}
    calls = max(100, int(ROUTE_CALLS * max(1, args.repeats) / 5))
    for spec in routers:
        stage = Stage([], pool.replica_specs(cost))
        for i, r in enumerate(waiting):  # queued, none started: every replica holds 32
            stage.bind(dataclasses.replace(r, arrival_s=0.0), i % len(stage.replicas))
        router = make_router(spec)
        router.reset(stage)
        for i in range(min(200, calls)):  # warm-up, as the decision bench: per-shape caches fill once
            router.route(probes[i % len(probes)], stage)
        us, cpu = np.empty(calls), np.empty(calls)
        for i in range(calls):
            req = probes[i % len(probes)]
            t, c = time.perf_counter_ns(), time.thread_time_ns()
            router.route(req, stage)
            us[i], cpu[i] = (time.perf_counter_ns() - t) / 1e3, (time.thread_time_ns() - c) / 1e3
        # wall time, and the thread's CPU time: on a shared machine a wall p99 is mostly waits for a core
        out[spec] = {**percentiles_us(us), "cpu": percentiles_us(cpu)}
    return out
