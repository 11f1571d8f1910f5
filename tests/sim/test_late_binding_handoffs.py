"""Late binding's one invariant, over whole runs: a replica is handed a batch from the central queue only
with nothing queued there and idle — or, in request mode, with its running wave predicted to end within
the stage's lead (``takes_next_batch``). A step-mode replica, or any with no lead, is handed one only idle.

Caught: the simulator's late binding handing batches to busy replicas (57 hand-offs in one run, against 0)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlsched.policies import make_policy
from rlsched.sim import Request, ServingConfig, load_profile
from rlsched.sim.stage import ReplicaSpec, Stage

COST = load_profile("qwen-image-h200")
STATIC = "static:agents/tuned/default.json"


def workload(n: int, rate: float, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    sizes = rng.choice([512, 768, 1024, 1328], n)
    classes = rng.choice(["realtime", "batch", "background"], n)
    return [Request(i, float(t[i]), "qwen-image", "image", int(s), int(s), 1, 20, True, str(c), 60.0)
            for i, (s, c) in enumerate(zip(sizes, classes))]


def handoffs(mode: str, lead_s: float, n: int = 240, rate: float = 2.0) -> tuple[Stage, list[tuple]]:
    """A late-binding run over 3 replicas (overloaded: the central queue is rarely empty); per batch handed
    out, (time, replica, requests queued there, running there, its running wave's end) just before it."""
    stage = Stage(workload(n, rate), [ReplicaSpec(f"r{i}", COST, ServingConfig(mode, 4)) for i in range(3)], seed=1)
    stage.lead_s = lead_s
    seen: dict[tuple[float, int], tuple] = {}
    for r, sim in enumerate(stage.replicas):
        orig = sim.receive

        def receive(req: Request, now: float, r: int = r, sim=sim, orig=orig) -> None:
            # a batch arrives one request at a time: its first request shows the replica as it was handed it
            seen.setdefault((now, r), (now, r, len(sim.waiting), len(sim.running), sim.gpu_end_s))
            orig(req, now)
        sim.receive = receive  # type: ignore[method-assign]
    stage.run([make_policy("fifo") for _ in stage.replicas], central=lambda: make_policy(STATIC))
    assert len(stage.records) == n and all(r.status == "completed" for r in stage.records.values())
    return stage, list(seen.values())


@pytest.mark.parametrize("mode, lead_s", [("request", 0.0), ("step", 0.0), ("step", 1.0)])
def test_a_replica_is_handed_a_batch_only_when_idle_with_nothing_queued(mode: str, lead_s: float) -> None:
    _, handed = handoffs(mode, lead_s)
    assert len(handed) > 50
    busy = [h for h in handed if h[2] or h[3] or h[4] != math.inf]
    assert busy == [], f"{len(busy)} batches handed to busy replicas, e.g. {busy[:3]}"


def test_in_request_mode_a_busy_replica_is_handed_a_batch_only_within_the_lead_with_nothing_queued() -> None:
    lead_s = 1.0
    _, handed = handoffs("request", lead_s)
    queued = [h for h in handed if h[2]]
    assert queued == [], f"{len(queued)} batches handed to replicas with requests queued, e.g. {queued[:3]}"
    ahead = [h for h in handed if h[4] != math.inf]
    assert ahead, "no batch was handed one wave ahead: the lead is not exercised"
    assert all(0.0 <= end - t <= lead_s for t, _, _, _, end in ahead), [h for h in ahead if h[4] - h[0] > lead_s]
