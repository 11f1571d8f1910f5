"""A routing or central decision that takes seconds delays no other coroutine of vLLM-Omni's real
``Orchestrator`` by more than its deadline (``deadline_ms``): the pool stops waiting, vLLM-Omni's rule
routes the request (``timeout``), and the server's other adds go on. Measured with a ticker coroutine on
the orchestrator's loop, beside its own ``_orchestration_loop``, for a decision that sleeps (a worker
thread: ``auto`` for a router rlsched does not ship) and one that loops in Python on the orchestrator's
thread (``decision_thread: engine``, the watchdog interrupts it)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

import janus  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from vllm_omni.engine.messages import StageSubmissionMessage  # noqa: E402
from vllm_omni.engine.orchestrator import Orchestrator  # noqa: E402
from vllm_omni.inputs.data import OmniDiffusionSamplingParams  # noqa: E402

from rlsched.integrations.vllm_omni.central_pool import CentralStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.router_pool import RouterStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics  # noqa: E402
from rlsched.sim.cost import load_profile  # noqa: E402
from rlsched.sim.simulator import Decision, ServingConfig  # noqa: E402
from tests.vllm.published import Replica  # noqa: E402

PROFILE = "qwen-image-h200-vllm-omni"
BASE = load_profile(PROFILE)
SLOW_S = 3.0
DEADLINE_MS = 50.0
BOUND_S = 1.0
"""What the test asserts of the longest pause: far above the 50 ms deadline plus a loaded machine's
scheduling noise, far below the 3 s an unbounded decision would hold the loop."""


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


class SlowRouter:
    """A router rlsched does not ship (its decisions run on a worker thread): each decision takes 3 s."""

    name = "slow"

    def __init__(self, how: str) -> None:
        self.how = how

    def reset(self, stage: Any) -> None: ...

    def route(self, req: Any, stage: Any) -> int:
        time.sleep(SLOW_S) if self.how == "sleep" else _spin(SLOW_S)
        return 0


class SlowPolicy:
    """A central policy that takes 3 s, then FIFO."""

    name = "slow"

    def __init__(self, how: str) -> None:
        self.how = how

    def reset(self, state: Any) -> None: ...

    def decide(self, state: Any) -> Decision:
        time.sleep(SLOW_S) if self.how == "sleep" else _spin(SLOW_S)
        return Decision(batch=tuple(list(state.waiting)[:1]))


def rig(kind: str, how: str) -> tuple[Orchestrator, Any]:
    queues = [janus.Queue() for _ in range(3)]
    thread = "worker" if how == "sleep" else "engine"
    common = dict(costs=BASE, settings=PluginConfig(profile=PROFILE), metrics=RouterMetrics(CollectorRegistry()))
    if kind == "router":
        pool: Any = RouterStagePool(0, [Replica(), Replica()], router=SlowRouter(how),
                                    config=RouterConfig(deadline_ms=DEADLINE_MS, decision_thread=thread), **common)
    else:
        pool = CentralStagePool(0, [Replica(), Replica()], policy=SlowPolicy(how),
                                config=RouterConfig(router="central", deadline_ms=DEADLINE_MS,
                                                    decision_thread=thread),
                                serving=ServingConfig("request", max_num_seqs=1), **common)
    orch = Orchestrator(*(q.async_q for q in queues), [pool])
    if kind == "central":
        pool.attach_orchestrator(orch)
    return orch, pool


def message(rid: str) -> StageSubmissionMessage:
    sp = OmniDiffusionSamplingParams(height=512, width=512, num_inference_steps=20, extra_args={"priority": "batch"})
    return StageSubmissionMessage(type="add_request", request_id=rid, prompt={"prompt": rid},
                                  original_prompt={"prompt": rid}, output_prompt_text=None,
                                  sampling_params_list=[sp], final_stage_id=0, preprocess_ms=0.0,
                                  request_timestamp=0.0, enqueue_ts=0.0)


async def longest_pause_while(orch: Orchestrator, pool: Any) -> float:
    """The longest gap between a 5 ms ticker's wake-ups while two requests are added and routed."""
    loop_task = asyncio.create_task(orch._orchestration_loop())
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    for rid in ("a", "b"):
        await orch._handle_add_request(message(rid))
        await asyncio.sleep(0.05)  # the central dispatcher runs its round
    await asyncio.sleep(0.2)
    stop.set()
    await tick
    orch._shutdown_event.set()
    await loop_task
    return max(gaps)


@pytest.mark.parametrize("how", ["sleep", "spin"])
@pytest.mark.parametrize("kind", ["router", "central"])
def test_a_three_second_decision_delays_the_orchestrator_by_at_most_its_deadline(kind: str, how: str) -> None:
    orch, pool = rig(kind, how)
    t0 = time.monotonic()
    pause = asyncio.run(longest_pause_while(orch, pool))
    assert pause < BOUND_S, f"the orchestrator's loop stood still {pause:.2f} s (deadline {DEADLINE_MS} ms)"
    assert time.monotonic() - t0 < SLOW_S + 2.0  # the adds did not wait for the decisions either
    sent = {rid for c in pool.clients for rid in c.got}
    assert sent == {"a", "b"}  # both routed, by vLLM-Omni's rule, exactly once
    assert sum(len(c.got) for c in pool.clients) == 2
    assert pool.router_fallbacks["timeout"] >= 1, pool.router_fallbacks
    assert set(pool.router_fallbacks) <= {"timeout", "busy", "backoff"}
