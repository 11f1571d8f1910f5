"""The router pool hears the replicas' published states (``router_views``' wire format) through the real
Orchestrator's poll of vLLM-Omni 0.30's ``StagePool`` (fake replica clients, no server): a state changes
the routing; a carrier never reaches the orchestrator, nor does ``STATE_KEY``; every fault (a silent
replica, a malformed, out-of-order or oversized state, a replica without rlsched's engine, a dead one)
falls back to the ledger, is counted with its reason, logged once, and loses no request. Under both of
vLLM-Omni's orchestration loops: the legacy poll and the event-driven one (``VLLM_OMNI_EVENT_DRIVEN_ORCH``: a
diffusion poller task per pool feeding a dispatch queue)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

import janus  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from vllm.v1.engine.exceptions import EngineDeadError  # noqa: E402
from vllm_omni.engine.messages import ErrorMessage, OutputMessage, StageSubmissionMessage  # noqa: E402
from vllm_omni.engine.orchestrator import Orchestrator  # noqa: E402
from vllm_omni.inputs.data import OmniDiffusionSamplingParams  # noqa: E402

from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.ledger_pool import LOG_ENV  # noqa: E402
from rlsched.integrations.vllm_omni.router_pool import RouterStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics  # noqa: E402
from rlsched.routing.views import MAX_LISTED, STATE_KEY  # noqa: E402
from rlsched.sim.cost import load_profile  # noqa: E402
from tests.vllm.fakes import Clock, Scripted  # noqa: E402
from tests.vllm.published import Replica  # noqa: E402

PROFILE = "qwen-image-h200-vllm-omni"
BASE = load_profile(PROFILE)
LOGGER = "rlsched.integrations.vllm_omni.ledger_pool"


LOOPS = {"legacy": "_orchestration_loop", "event-driven": "_orchestration_loop_event_driven"}


@pytest.fixture(autouse=True, params=sorted(LOOPS))
def orchestration_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test under both of the orchestrator's loops (issue 47)."""
    monkeypatch.setattr(Rig, "loop", LOOPS[request.param])
    return str(request.param)


class Rig:
    """A real Orchestrator over one ``RouterStagePool`` of ``n`` fake replicas, run by the orchestrator's ``loop``
    (a method name of ``LOOPS``); the pool's clock is ``clock``."""

    loop = LOOPS["legacy"]

    def __init__(self, n: int = 2, router: Any = "rlsched", silence_s: float = 30.0) -> None:
        self.queues = [janus.Queue() for _ in range(3)]
        self.clock = Clock(0.0)
        self.replicas = [Replica() for _ in range(n)]
        self.pool = RouterStagePool(0, list(self.replicas), router=router, costs=BASE,
                                    config=RouterConfig(budget_ms=60_000, deadline_ms=60_000, silence_s=silence_s),
                                    settings=PluginConfig(profile=PROFILE), clock=self.clock,
                                    metrics=RouterMetrics(CollectorRegistry()))
        self.orch = Orchestrator(*(q.async_q for q in self.queues), [self.pool])
        self.messages: list[Any] = []
        self._loop: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Rig:
        self._loop = asyncio.create_task(getattr(self.orch, self.loop)())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.drain()
        self.orch._shutdown_event.set()
        assert self._loop is not None
        await self._loop

    async def add(self, rid: str, size: int = 1024, steps: int = 20) -> int | None:
        sp = OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=steps,
                                         extra_args={"priority": "batch"})
        await self.orch._handle_add_request(StageSubmissionMessage(
            type="add_request", request_id=rid, prompt={"prompt": rid}, original_prompt={"prompt": rid},
            output_prompt_text=None, sampling_params_list=[sp], final_stage_id=0, preprocess_ms=0.0,
            request_timestamp=0.0, enqueue_ts=0.0))
        return self.pool.get_bound_replica_id(rid)

    async def drain(self) -> None:
        """Until the orchestrator has polled every queued output."""
        for _ in range(500):
            if not any(r.outbox for r in self.replicas if r is not None):
                break
            await asyncio.sleep(0.001)
        for _ in range(5):
            await asyncio.sleep(0.002)
        q = self.queues[1].async_q
        while not q.empty():
            self.messages.append(q.get_nowait())

    def sent(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for i, c in enumerate(self.replicas):
            for rid in c.got:
                assert rid not in out, f"{rid} sent twice"
                out[rid] = i
        return out

    def metric(self, name: str, **labels: str) -> float:
        return self.pool.router_metrics.sample(name, labels) or 0.0

    def outputs(self) -> list[Any]:
        return [m for m in self.messages if isinstance(m, OutputMessage)]

    async def finish_all(self) -> None:
        """Every bound request's final output, from its replica: nothing may be left anywhere."""
        for rid, slot in list(self.pool._request_bindings.items()):
            self.replicas[slot].finish(rid)
        await self.drain()
        assert not self.pool._request_bindings and not any(self.pool.outstanding().values())
        assert not self.orch.request_states


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def logged(caplog: Any, text: str) -> int:
    return sum(1 for r in caplog.records if r.name == LOGGER and text in r.getMessage())


async def _load(rig: Rig) -> None:
    """r0 on replica 0; r1, r2 on replica 1 (the same shape each): the ledger alone sends the next to replica 0."""
    for rid in ("r0", "r1", "r2"):
        await rig.add(rid)


def _scripted() -> Any:
    from rlsched.routing.routers import RlschedRouter

    return Scripted(0, 1, 1, then=RlschedRouter())


# ------------------------------------------------------------------------- states route
def test_a_replica_seen_running_a_long_batch_is_avoided() -> None:
    """Replica 0 holds one request, replica 1 two: the ledger alone picks replica 0. Replica 0's state
    says its running batch ends in 600 s: the router sends the next request to replica 1."""
    async def go(publish: bool) -> tuple[int | None, Rig]:
        async with Rig(2, _scripted()) as rig:
            await _load(rig)
            if publish:
                rig.replicas[0].carrier("r0", rig.replicas[0].state(600.0, ["r0"]))
                await rig.drain()
            chosen = await rig.add("next")
            await rig.finish_all()
        return chosen, rig

    alone, ledger_rig = run(go(False))
    heard, rig = run(go(True))
    assert alone == 0 and heard == 1
    assert rig.pool.router_states == {"taken": 1} and rig.metric("rlsched_router_state_total", reason="taken") == 1
    # the decision saw replica 1 through the ledger alone (it never published), replica 0 through its state
    assert rig.pool.view_fallbacks == {"missing": 2 + 2 + 2 + 1}  # r0, r1, r2: both; next: replica 1 only
    assert ledger_rig.pool.view_fallbacks == {"missing": 8}
    assert set(rig.sent()) == {"r0", "r1", "r2", "next"}


def test_a_finished_wave_seen_in_a_state_frees_the_replica_before_its_finish_arrives() -> None:
    """Replica 0 holds a large request, replica 1 two small ones: least work on the ledger alone picks
    replica 1. A state that lists replica 0's wave as over (nothing running, r0 finished) leaves it empty
    in the router's view while r0's final output is still on its way: the next request goes there."""
    from rlsched.routing.routers import LeastWork

    async def go(publish: bool) -> int | None:
        async with Rig(2, Scripted(0, 1, 1, then=LeastWork())) as rig:
            await rig.add("r0", size=1024, steps=50)
            await rig.add("r1", size=512)
            await rig.add("r2", size=512)
            if publish:
                rig.replicas[1].carrier("r1", rig.replicas[1].state(5.0, ["r1", "r2"]))
                rig.replicas[0].carrier("r0", rig.replicas[0].state(0.0, [], finished=("r0",)))
                await rig.drain()
            assert rig.pool.outstanding()[0] == ["r0"]  # bound until its exit
            chosen = await rig.add("next", size=512)
            await rig.finish_all()
        return chosen

    assert run(go(False)) == 1 and run(go(True)) == 0


def test_carriers_are_swallowed_and_the_state_never_reaches_the_orchestrator() -> None:
    async def go() -> Rig:
        async with Rig(1, "least-work") as rig:
            await rig.add("a")
            replica = rig.replicas[0]
            for _ in range(3):  # carriers in a row: one poll swallows them all
                replica.carrier("a", replica.state(1.0, ["a"]))
            replica.finish("a", replica.state(0.0, [], finished=("a",)))
            await rig.drain()
        return rig

    rig = run(go())
    out = rig.outputs()
    assert [m.request_id for m in out] == ["a"] and out[0].finished  # the carriers never reached it
    assert STATE_KEY not in out[0].engine_outputs.metrics and out[0].engine_outputs.metrics["latency_ms"] == 12.0
    assert rig.pool.router_states == {"taken": 4} and not rig.orch.request_states


def test_a_state_on_a_started_output_that_is_no_carrier_goes_through_without_it() -> None:
    """A request that asked for its lifecycle gets its started output; only the state is taken out."""
    async def go() -> Rig:
        async with Rig(1, "least-work") as rig:
            await rig.add("a")
            replica = rig.replicas[0]
            replica.carrier("a", replica.state(1.0, ["a"]))
            replica.outbox[-1].metrics[STATE_KEY].pop("carrier")
            replica.finish("a")
            await rig.drain()
        return rig

    rig = run(go())
    out = rig.outputs()
    assert [(m.request_id, m.finished) for m in out] == [("a", False), ("a", True)]
    assert all(STATE_KEY not in m.engine_outputs.metrics for m in out) and rig.pool.router_states == {"taken": 1}


# ------------------------------------------------------------------------------ faults
def _fault_stale(rig: Rig) -> None:
    rig.replicas[0].carrier("r0", rig.replicas[0].state(600.0, ["r0"]))


def _fault_invalid(rig: Rig) -> None:
    rig.replicas[0].carrier("r0", rig.replicas[0].state(600.0, ["r0"]))
    rig.replicas[0].carrier("r0", {"v": 1, "seq": 99, "running": [["r0", 0]]})  # no remaining_s


def _fault_oversized(rig: Rig) -> None:
    rig.replicas[0].carrier("r0", rig.replicas[0].state(600.0, ["r0"]))
    big = rig.replicas[0].state(600.0, ["r0"], finished=tuple(f"x{i}" for i in range(MAX_LISTED + 1)))
    rig.replicas[0].carrier("r0", big)


FAULTS = {"stale": (_fault_stale, "stale"), "invalid": (_fault_invalid, "invalid"),
          "oversized": (_fault_oversized, "invalid")}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_faulty_state_falls_back_to_the_ledger_counted_and_logged_once(fault: str, caplog: Any) -> None:
    """Replica 0 said its batch runs 600 s more; then the fault: the router routes as on the ledger alone
    (replica 0 holds least), counts the fallback per decision, logs it once; no request is lost."""
    publish, reason = FAULTS[fault]
    caplog.set_level(logging.INFO, LOGGER)

    async def go() -> tuple[list[int | None], Rig]:
        async with Rig(2, _scripted(), silence_s=30.0) as rig:
            await _load(rig)
            publish(rig)
            await rig.drain()
            if fault == "stale":
                rig.clock.t = 600.0 + 30.0 + 0.1  # silent past its predicted end and the bound
            chosen = [await rig.add("n0", size=512), await rig.add("n1", size=512)]
            await rig.finish_all()
        return chosen, rig

    chosen, rig = run(go())
    assert chosen[0] == 0  # the ledger alone: replica 0 holds one request, replica 1 two
    assert rig.pool.view_fallbacks[reason] == 2 and rig.metric("rlsched_router_view_fallbacks_total",
                                                               reason=reason) == 2
    assert logged(caplog, f"seen through the ledger alone ({reason})") == 1
    if reason == "invalid":
        assert rig.pool.router_states == {"taken": 1, "invalid": 1}
        assert rig.metric("rlsched_router_state_total", reason="invalid") == 1
        assert logged(caplog, "published a state that cannot be read") == 1
        assert logged(caplog, "oversized" if fault == "oversized" else "remaining_s") >= 1
    assert set(rig.sent()) == {"r0", "r1", "r2", "n0", "n1"} and not [m for m in rig.messages
                                                                       if isinstance(m, ErrorMessage)]


def test_an_out_of_order_state_is_ignored_and_counted() -> None:
    async def go() -> tuple[int | None, Rig]:
        async with Rig(2, _scripted()) as rig:
            await _load(rig)
            replica = rig.replicas[0]
            late = replica.state(0.0, [])  # built first (seq 1), heard last: r0 would look done
            replica.carrier("r0", replica.state(600.0, ["r0"]))
            replica.carrier("r0", late)
            await rig.drain()
            chosen = await rig.add("next")
            await rig.finish_all()
        return chosen, rig

    chosen, rig = run(go())
    assert chosen == 1  # the newer state holds: replica 0 runs 600 s more
    assert rig.pool.router_states == {"taken": 1, "old": 1} and rig.metric("rlsched_router_state_total",
                                                                           reason="old") == 1
    assert not rig.pool.view_fallbacks.get("invalid") and set(rig.sent()) == {"r0", "r1", "r2", "next"}


def test_a_replica_without_rlscheds_engine_is_routed_on_the_ledger(caplog: Any) -> None:
    """No state ever: every decision sees it through the ledger alone (``missing``), logged once (INFO);
    the choices are those of the ledger alone."""
    caplog.set_level(logging.INFO, LOGGER)

    async def go(publish_1: bool) -> tuple[list[int | None], Rig]:
        async with Rig(2, "rlsched") as rig:
            chosen = []
            for i in range(6):
                if publish_1:  # replica 1 runs rlsched's engine and says nothing runs: its view is the ledger's
                    rig.replicas[1].carrier("x", rig.replicas[1].state(0.0, []))
                    await rig.drain()
                chosen.append(await rig.add(f"r{i}", size=512 + 256 * (i % 3)))
            await rig.finish_all()
        return chosen, rig

    chosen, rig = run(go(False))
    assert rig.pool.view_fallbacks == {"missing": 12} and not rig.pool.router_states
    assert logged(caplog, "seen through the ledger alone (missing)") == 1
    assert [r.levelno for r in caplog.records if "(missing)" in r.getMessage()] == [logging.INFO]
    same, published = run(go(True))
    assert chosen == same and set(chosen) == {0, 1}
    assert published.pool.view_fallbacks == {"missing": 6} and published.pool.router_states == {"taken": 6}


def test_a_dead_replicas_state_is_never_heard() -> None:
    """A replica that dies is evicted: its view goes, a state it still had queued is never taken, its
    request is failed (once); the other replica routes on."""
    async def go() -> Rig:
        async with Rig(2, _scripted()) as rig:
            await _load(rig)
            rig.replicas[0].carrier("r0", rig.replicas[0].state(600.0, ["r0"]))
            await rig.drain()
            await rig.orch._handle_dead_replica(0, 0, EngineDeadError("gone"))
            assert 0 not in rig.pool._ledger.views and 0 not in rig.pool.outstanding()  # its view is gone
            rig.replicas[0].carrier("r0", rig.replicas[0].state(0.0, [], finished=("r0",)))
            assert rig.pool.poll_diffusion_output(0) is None  # even if asked
            await rig.drain()
            assert rig.replicas[0].outbox  # never polled again
            assert await rig.add("after") == 1
            rig.replicas[0].outbox.clear()
            await rig.finish_all()
        return rig

    rig = run(go())
    assert rig.pool.router_states == {"taken": 1}
    assert [m.request_id for m in rig.messages if isinstance(m, ErrorMessage)] == ["r0"]
    assert rig.sent() == {"r0": 0, "r1": 1, "r2": 1, "after": 1}
    assert [m.request_id for m in rig.outputs() if m.finished] == ["r1", "r2", "after"]


def test_a_state_from_a_replica_not_yet_routed_is_counted_unrouted() -> None:
    """A replica that joined publishes before the router follows it: ``unrouted``, its output goes through
    (without the state); the next decision routes over it."""
    async def go() -> Rig:
        async with Rig(2, "round-robin") as rig:
            await rig.add("a")
            fresh = Replica()
            rig.replicas.append(fresh)
            assert rig.pool.add_client("tcp://fresh", fresh) == 2
            fresh.carrier("stray", fresh.state(1.0, []))
            fresh.finish("stray", fresh.state(0.0, []))  # the orchestrator drops an unknown request's output
            await rig.drain()
            assert rig.pool.router_states == {"unrouted": 2} and not fresh.outbox
            assert sorted([await rig.add(f"b{i}") for i in range(3)]) == [0, 1, 2]
            await rig.finish_all()
        return rig

    rig = run(go())
    assert rig.metric("rlsched_router_state_total", reason="unrouted") == 2


def test_a_bug_taking_a_state_lets_the_output_through(caplog: Any) -> None:
    async def go() -> Rig:
        async with Rig(1, "least-work") as rig:
            def broken(*a: Any, **k: Any) -> Any:
                raise RuntimeError("bug")
            rig.pool._ledger.publish = broken  # type: ignore[method-assign]
            await rig.add("a")
            await rig.add("b")
            rig.replicas[0].carrier("a", rig.replicas[0].state(1.0, ["a"]))  # a carrier still never goes through
            rig.replicas[0].finish("a", rig.replicas[0].state(0.0, []))
            rig.replicas[0].finish("b", rig.replicas[0].state(0.0, []))
            await rig.drain()
        return rig

    rig = run(go())
    out = rig.outputs()
    assert [m.request_id for m in out] == ["a", "b"] and all(STATE_KEY not in m.engine_outputs.metrics for m in out)
    assert logged(caplog, "failed; the output goes through") == 1 and not rig.orch.request_states


# -------------------------------------------------------------------------------- log
def test_the_router_log_records_the_views_decided_on(tmp_path: Any, monkeypatch: Any) -> None:
    path = tmp_path / "router.jsonl"
    monkeypatch.setenv(LOG_ENV, str(path))

    async def go() -> None:
        async with Rig(2, _scripted()) as rig:
            await _load(rig)
            rig.replicas[0].carrier("r0", rig.replicas[0].state(600.0, ["r0"]))
            await rig.drain()
            await rig.add("next")
            await rig.finish_all()

    run(go())
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [ln["request_id"] for ln in lines] == ["r0", "r1", "r2", "next"]
    assert lines[0]["views"] == {"0": {"from": "missing", "waiting": [], "running": []},
                                 "1": {"from": "missing", "waiting": [], "running": []}}
    assert lines[-1]["replica"] == 1 and lines[-1]["views"] == {
        "0": {"from": "state", "waiting": [], "running": ["r0"]},
        "1": {"from": "missing", "waiting": ["r1", "r2"], "running": []}}
