"""Sim-in-the-loop: vLLM-Omni's real schedulers (and the plugin) on the simulator's clock and GPU.

1. The simulator's ``fifo`` policy starts exactly the batches vLLM-Omni's own
   ``RequestScheduler`` (with the engine's admission wait) and ``StepScheduler`` start.
2. The plugin running a policy starts exactly the batches the simulator starts under
   that policy, so SLO attainment agrees.
"""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni.harness.loop import (  # noqa: E402
    Recorder,
    SimClock,
    compare,
    make_loop_scheduler,
    run_in_loop,
)
from rlsched.policies import make_policy  # noqa: E402
from rlsched.sim import Simulator, load_scenario  # noqa: E402
from rlsched.sim.metrics import summarize  # noqa: E402
from tests.vllm import fakes  # noqa: E402,F401  (quiets vLLM's INFO logs)

DURATION_S = 3600.0  # ~160 requests of the default scenario, GPU near saturation


def _records(sim: Simulator) -> list[tuple]:
    return [(r.request.id, r.batch_id, r.first_scheduled_s, r.finish_s, r.status)
            for r in sorted(sim.records.values(), key=lambda r: r.request.id)]


def _workload(mode: str, wait_ms: float | None = None, seed: int = 0, rate_scale: float = 1.0):
    sc = load_scenario("default").with_serving(mode=mode)
    if wait_ms is not None:
        sc = sc.with_serving(request_batch_max_wait_ms=wait_ms)
    cost = sc.cost()
    return sc, cost, sc.requests(seed, rate_scale, DURATION_S, cost=cost)


def _both(policy: str, mode: str, plugin: bool, **kw):
    sc, cost, reqs = _workload(mode, **kw)
    recorder = Recorder(make_policy(policy))
    pure = Simulator(reqs, cost, sc.serving).run(recorder)
    clock = SimClock()
    sched = make_loop_scheduler(sc.serving, cost, policy if plugin else None, clock)
    return recorder, pure, run_in_loop(reqs, cost, sc.serving, sched, clock)


@pytest.mark.parametrize("seed", [0, 1])
def test_fifo_is_vllm_omni_request_scheduler(seed: int) -> None:
    sc, cost, reqs = _workload("request", seed=seed)
    assert sc.serving.request_batch_max_wait_ms == 50 and sc.serving.max_num_seqs == 4
    pure = Simulator(reqs, cost, sc.serving).run(make_policy("fifo"))
    clock = SimClock()
    loop = run_in_loop(reqs, cost, sc.serving, make_loop_scheduler(sc.serving, cost, None, clock), clock)
    assert type(loop.scheduler).__name__ == "RequestScheduler"
    assert _records(loop.sim) == _records(pure)  # same batches, same order, same times
    assert max(len(b) for b in loop.batches) > 1 and len(loop.batches) < len(reqs)  # batching happened


def test_fifo_is_vllm_omni_step_scheduler() -> None:
    recorder, pure, loop = _both("fifo", "step", plugin=False)
    assert type(loop.scheduler).__name__ == "StepScheduler"
    assert loop.batches == recorder.batches  # per-step batch membership, step by step
    assert len(loop.batches) > 1000 and max(len(b) for b in loop.batches) > 1
    assert _records(loop.sim) == _records(pure)


@pytest.mark.parametrize("mode", ["request", "step"])
def test_plugin_running_fifo_is_vllm_omni_fifo(mode: str) -> None:
    # Fifo's own wait decisions are overridden while idle (the engine already waited), so the
    # plugin admits exactly what vLLM-Omni would.
    recorder, pure, loop = _both("fifo", mode, plugin=True)
    assert type(loop.scheduler).__name__.startswith("RL") and loop.scheduler.fallbacks == 0
    assert loop.batches == recorder.batches and _records(loop.sim) == _records(pure)


def test_admission_wait_matters_for_the_comparison() -> None:
    # Without the engine's admission wait, the simulator's FIFO (which models it) starts other
    # batches, so the identity above is not vacuous.
    sc, cost, reqs = _workload("request")
    pure = Simulator(reqs, cost, sc.serving).run(make_policy("fifo"))
    no_wait = sc.with_serving(request_batch_max_wait_ms=0.0).serving
    clock = SimClock()
    loop = run_in_loop(reqs, cost, no_wait, make_loop_scheduler(no_wait, cost, None, clock), clock)
    assert _records(loop.sim) != _records(pure)


@pytest.mark.parametrize("policy", ["edf", "sjf"])
@pytest.mark.parametrize("mode", ["request", "step"])
def test_plugin_matches_the_simulator(policy: str, mode: str) -> None:
    # No admission wait: the simulator's non-FIFO policies do not model the engine's.
    recorder, pure, loop = _both(policy, mode, plugin=True, wait_ms=0.0)
    assert loop.scheduler.fallbacks == 0
    assert loop.batches == recorder.batches
    assert _records(loop.sim) == _records(pure)
    assert summarize(loop.sim)["slo_attainment"] == summarize(pure)["slo_attainment"]


def test_plugin_with_the_engine_admission_wait() -> None:
    # With 50 ms coalescing the engine holds some waves 10 ms longer than the simulator's SJF
    # would (the simulator's non-FIFO policies do not model the engine's wait): the batches stay
    # the same here, every wave starts no earlier and some start later, SLO outcomes may shift
    # slightly. (Until the profiles were re-fitted this also asserted that SLO attainment differs;
    # on the shipped profiles it is identical at seeds 0-2, so that assertion cannot come back.
    # The start times below are what the wait visibly changes.)
    recorder, pure, loop = _both("sjf", "request", plugin=True, rate_scale=2.0)
    assert loop.sim.config.request_batch_max_wait_ms == 50 and loop.scheduler.fallbacks == 0
    assert loop.batches == recorder.batches
    started = [(p.first_scheduled_s, q.first_scheduled_s) for p, q in
               ((pure.records[i], loop.sim.records[i]) for i in sorted(pure.records))]
    assert all(engine >= sim - 1e-9 for sim, engine in started)
    assert any(engine > sim + 1e-6 for sim, engine in started)  # the wait is not a no-op
    sim_att, plugin_att = summarize(pure)["slo_attainment"], summarize(loop.sim)["slo_attainment"]
    assert abs(sim_att - plugin_att) < 0.02


def test_frozen_rl_policy_serves_through_the_plugin() -> None:
    # The shipped numpy-only policy inside the real RequestScheduler, the simulator playing the
    # GPU and NVML: no fallbacks, the same batches and the same SLO attainment as the pure
    # simulator. (The plugin folds telemetry at every schedule() call, the pure simulator only
    # when it asks the network; here that changes no decision.)
    result = compare("default", "rl:checkpoints/default", 0, DURATION_S, 1.0, "request", 0.0)
    assert result["scheduler"] == "RLRequestScheduler" and result["fallbacks"] == {}
    assert result["identical_batches"]
    sim_att, plugin_att = result["weighted_slo_attainment"]
    assert sim_att == plugin_att


def test_frozen_candidate_policy_serves_through_the_plugin() -> None:
    # The shipped candidate-batch policy (numpy scorer over the tuned heuristic's candidates)
    # inside the real RequestScheduler: no fallbacks, the simulator's batches, at overload
    # where it leaves the heuristic's proposal.
    spec = "pick:checkpoints/pick;static=agents/tuned/default.json"
    result = compare("default", spec, 0, DURATION_S, 1.5, "request", 0.0)
    assert result["scheduler"] == "RLRequestScheduler" and result["fallbacks"] == {}
    assert result["identical_batches"]
    sim_att, plugin_att = result["weighted_slo_attainment"]
    assert sim_att == plugin_att
