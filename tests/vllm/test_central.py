"""Late binding (``POLICY@central``) inside vLLM-Omni 0.30: ``CentralStagePool`` under the real
``Orchestrator`` and ``StagePool`` (fake replica clients, no server). Every request is sent exactly
once or failed; an abort of a parked request sends nothing; a dead replica's requests are resolved;
a failing central policy falls back to vLLM-Omni's own choice, counted; shutdown fails what is parked."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

import janus  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from vllm.v1.engine.exceptions import EngineDeadError  # noqa: E402
from vllm_omni.engine.messages import AbortRequestMessage, ErrorMessage, StageSubmissionMessage  # noqa: E402
from vllm_omni.engine.orchestrator import Orchestrator  # noqa: E402
from vllm_omni.inputs.data import OmniDiffusionSamplingParams  # noqa: E402

from rlsched.integrations.vllm_omni import router as router_mod  # noqa: E402
from rlsched.integrations.vllm_omni.central_pool import PARKED, CentralStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics  # noqa: E402
from rlsched.sim.cost import load_profile  # noqa: E402
from rlsched.sim.simulator import Decision, ServingConfig  # noqa: E402
from tests.vllm.fakes import Clock  # noqa: E402
from tests.vllm.published import Replica  # noqa: E402

PROFILE = "qwen-image-h200-vllm-omni"
BASE = load_profile(PROFILE)


def bare_state() -> Any:
    """The least request state ``submit_initial`` reads: one sampling-params entry, no streaming."""
    return type("S", (), {"sampling_params_list": [OmniDiffusionSamplingParams()], "streaming": None})()


class Scripted:
    """A central policy: each decide() pops the next of ``script`` (raising an exception), then FIFO."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)

    def reset(self, state: Any) -> None: ...

    def decide(self, state: Any) -> Decision:
        if self.script:
            out = self.script.pop(0)
            if isinstance(out, BaseException):
                raise out
            return out
        return Decision(batch=tuple(list(state.waiting)[:state.config.max_num_seqs]))


class Rig:
    """A real Orchestrator over one CentralStagePool of ``n`` fake replicas."""

    def __init__(self, n: int = 2, policy: Any = "edf", seqs: int = 2, budget_ms: float = 60_000, mode: str = "request",
                 clock: Any = None, **kw: Any) -> None:
        kw.setdefault("deadline_ms", 60_000)  # no decision times out on a loaded machine unless a test asks
        self.queues = [janus.Queue() for _ in range(3)]
        self.replicas = [Replica() for _ in range(n)]
        self.pool = CentralStagePool(
            0, list(self.replicas), policy=policy, costs=BASE,
            config=RouterConfig(router="central", policy=policy if isinstance(policy, str) else "fifo",
                                budget_ms=budget_ms, **kw),
            settings=PluginConfig(profile=PROFILE), serving=ServingConfig(mode, max_num_seqs=seqs),
            metrics=RouterMetrics(CollectorRegistry()), clock=clock)
        self.orch = Orchestrator(*(q.async_q for q in self.queues), [self.pool])
        self.pool.attach_orchestrator(self.orch)  # what router.install's hook does

    async def add(self, rid: str, size: int = 512, priority: str = "batch", slo_ms: float | None = None) -> None:
        extra: dict[str, Any] = {"priority": priority}
        if slo_ms is not None:
            extra["slo_ms"] = slo_ms
        sp = OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=20, extra_args=extra)
        await self.orch._handle_add_request(StageSubmissionMessage(
            type="add_request", request_id=rid, prompt={"prompt": rid}, original_prompt={"prompt": rid},
            output_prompt_text=None, sampling_params_list=[sp], final_stage_id=0, preprocess_ms=0.0,
            request_timestamp=0.0, enqueue_ts=0.0))

    async def settle(self) -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    async def finish(self, rid: str) -> None:
        """What the orchestrator does when a request's final output arrives."""
        await self.orch._cleanup_request_ids([rid])
        await self.settle()

    def sent(self) -> dict[str, int]:
        """Request id -> the replica that received it; asserts each was sent exactly once."""
        out: dict[str, int] = {}
        for i, c in enumerate(self.pool.clients):
            for rid in (c.got if c is not None else []):
                assert rid not in out, f"{rid} sent twice"
                out[rid] = i
        return out

    def errors(self) -> list[Any]:
        out = []
        q = self.queues[1].async_q
        while not q.empty():
            out.append(q.get_nowait())
        return [m for m in out if isinstance(m, ErrorMessage)]

    def metric(self, name: str, **labels: str) -> float:
        return self.pool.router_metrics.sample(name, labels) or 0.0

    async def hear(self, slot: int, remaining_s: float, running: list[str], finished: tuple[str, ...] = (),
                   raw: Any = None) -> None:
        """Replica ``slot`` publishes a state (a carrier), heard through the orchestrator's poll."""
        replica = self.replicas[slot]
        replica.carrier(running[0] if running else "x", raw if raw is not None else
                        replica.state(remaining_s, running, finished))
        assert self.pool.poll_diffusion_output(slot) is None  # swallowed
        await self.settle()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------- exactly once
def test_requests_wait_centrally_and_go_to_free_replicas_exactly_once() -> None:
    async def go() -> None:
        rig = Rig(2, "edf", seqs=2)
        for i in range(6):
            await rig.add(f"r{i}")
        await rig.settle()
        # two replicas free: a batch of <= 2 each; the rest stay parked until a replica frees
        assert sorted(rig.sent()) == ["r0", "r1", "r2", "r3"] and rig.pool.parked() == ["r4", "r5"]
        assert rig.metric("rlsched_router_central_queue", stage="0") == 2
        assert rig.pool.central_log == [(0, ("r0", "r1")), (1, ("r2", "r3"))]
        await rig.finish("r0")
        assert rig.pool.parked() == ["r4", "r5"]  # replica 0 still holds r1: not free
        await rig.finish("r1")
        assert rig.sent()["r4"] == 0 and rig.sent()["r5"] == 0 and not rig.pool.parked()
        for rid in ["r2", "r3", "r4", "r5"]:
            await rig.finish(rid)
        assert set(rig.sent()) == {f"r{i}" for i in range(6)}
        assert not rig.pool._request_bindings and not any(rig.pool.outstanding().values())
        assert not rig.pool.router_fallbacks and not rig.errors()
    run(go())


def test_the_central_policy_orders_the_queue() -> None:
    """EDF from the central queue: the urgent request that arrived last goes first to the freed replica."""
    async def go() -> None:
        rig = Rig(1, "edf", seqs=1)
        await rig.add("a", slo_ms=3_600_000)
        await rig.settle()
        for rid in ("b", "c"):
            await rig.add(rid, slo_ms=3_600_000)
        await rig.add("urgent", priority="realtime", slo_ms=1_000)
        await rig.finish("a")
        assert rig.pool.central_log[1] == (0, ("urgent",))
    run(go())


def test_submit_initial_returns_at_once() -> None:
    async def go() -> None:
        rig = Rig(1, "fifo", seqs=1)
        state = bare_state()
        assert await rig.pool.submit_initial("x", state, {"prompt": "x"}) == PARKED
    run(go())


# ----------------------------------------------------------------- aborts
def test_an_aborted_parked_request_is_never_sent() -> None:
    async def go() -> None:
        rig = Rig(1, "fifo", seqs=1)
        for rid in ("a", "b", "c"):
            await rig.add(rid)
        await rig.settle()
        assert rig.pool.parked() == ["b", "c"]
        await rig.orch._handle_abort(AbortRequestMessage(request_ids=["b"]))
        assert rig.pool.parked() == ["c"] and rig.pool.clients[0].aborted == []  # nothing to abort on a replica
        assert rig.metric("rlsched_router_released_total", reason="parked") == 1
        await rig.finish("a")
        await rig.finish("c")
        assert rig.sent() == {"a": 0, "c": 0} and "b" not in rig.orch.request_states
    run(go())


def test_an_abort_between_the_decision_and_the_send_sends_nothing() -> None:
    async def go() -> None:
        rig = Rig(1, "fifo", seqs=2)
        for rid in ("a", "b"):
            await rig.add(rid)
        await asyncio.sleep(0)  # the dispatcher took both and is sending "a" (a send yields)
        await rig.orch._handle_abort(AbortRequestMessage(request_ids=["b"]))
        await rig.settle()
        assert rig.sent() == {"a": 0}
    run(go())


# ------------------------------------------------------------ dead replicas
def test_a_dead_replica_fails_its_requests_and_the_parked_ones_go_elsewhere() -> None:
    async def go() -> None:
        rig = Rig(2, "fifo", seqs=1)
        for rid in ("a", "b", "c", "d"):
            await rig.add(rid)
        await rig.settle()
        assert rig.sent() == {"a": 0, "b": 1} and rig.pool.parked() == ["c", "d"]
        dead = rig.pool.clients[0]
        await rig.orch._handle_dead_replica(0, 0, EngineDeadError("gone"))  # what the poll loop does
        await rig.settle()
        assert [m.request_id for m in rig.errors()] == ["a"]  # only the request on the dead replica failed
        assert rig.pool.parked() == ["c", "d"] and 0 not in rig.pool.outstanding()
        await rig.finish("b")
        assert rig.sent()["c"] == 1 and rig.pool.parked() == ["d"]
        await rig.finish("c")
        assert rig.sent() == {"b": 1, "c": 1, "d": 1} and dead.got == ["a"] and not rig.errors()
    run(go())


def test_a_send_to_a_dying_replica_fails_through_the_orchestrator() -> None:
    async def go() -> None:
        rig = Rig(2, "fifo", seqs=1)
        rig.pool.clients[0].dead = True
        await rig.add("a")
        await rig.settle()
        errors = rig.errors()
        assert [m.request_id for m in errors] == ["a"]  # failed once, cleanly; replica 0 evicted
        assert rig.pool.clients[0] is None and "a" not in rig.orch.request_states
        await rig.add("b")
        await rig.settle()
        assert rig.sent() == {"b": 1}
    run(go())


def test_the_last_replica_dying_fails_the_parked_requests() -> None:
    async def go() -> None:
        rig = Rig(1, "fifo", seqs=1)
        for rid in ("a", "b"):
            await rig.add(rid)
        await rig.settle()
        await rig.orch._handle_dead_replica(0, 0, EngineDeadError("gone"))
        await rig.settle()
        assert sorted(m.request_id for m in rig.errors()) == ["a", "b"]
        assert not rig.pool.parked() and not rig.orch.request_states
    run(go())


# --------------------------------------------------------------- fallbacks
@pytest.mark.parametrize("bad, reason", [(ValueError("boom"), "exception"), (KeyboardInterrupt(), "exception"),
                                         (SystemExit(3), "exception"), (Decision(batch=(99,)), "unknown_id"),
                                         (Decision(batch=(0, 1, 2)), "too_large")])
def test_a_failing_central_policy_gives_the_replica_fifo_with_the_memory_check(bad: Any, reason: str) -> None:
    """The replica whose decision failed gets vLLM-Omni's FIFO batch from the head of the central queue (what
    fits it), each request counted; the next replica's decision is the policy's again. Caught (issue 47):
    every parked request flushed by round-robin to replicas that run memory-blind FIFO."""
    async def go() -> None:
        rig = Rig(2, Scripted(Decision(), Decision(), bad), seqs=2)  # both replicas wait for "a", then bad
        await rig.add("a")
        await rig.settle()  # first decision: wait
        for rid in ("b", "c"):
            await rig.add(rid)
        await rig.settle()
        assert sorted(rig.sent()) == ["a", "b", "c"] and not rig.pool.parked()
        assert rig.pool.router_fallbacks == {reason: 2} and rig.metric("rlsched_router_fallbacks_total",
                                                                         reason=reason) == 2
        assert rig.pool.central_log == [(0, ("a", "b")), (1, ("c",))]  # FIFO with the memory check, then the policy
        for rid in ("a", "b", "c"):
            await rig.finish(rid)
        await rig.add("d")  # the central policy is asked again (FIFO from here)
        await rig.settle()
        assert rig.pool.central_log[-1] == (0, ("d",)) and rig.pool.router_fallbacks == {reason: 2}
    run(go())


def test_the_central_fallback_sends_a_replica_only_what_fits_its_gpu() -> None:
    """Two large images that fit the GPU one at a time: a central policy that fails gives each replica one,
    not both to one replica. Caught: the fallback's batch unchecked against the replica's memory."""
    async def go() -> None:
        big = _largest_that_fits_alone()
        rig = Rig(2, Scripted(Decision(), Decision(), ValueError("boom")), seqs=4)
        await rig.add("a", size=big)
        await rig.settle()
        await rig.add("b", size=big)
        await rig.settle()
        assert rig.pool.central_log == [(0, ("a",)), (1, ("b",))] and rig.sent() == {"a": 0, "b": 1}
    run(go())


def _largest_that_fits_alone() -> int:
    """A square image size (multiple of 64) one of which fits ``BASE``'s GPU and two of which do not, as the
    central views cost ``Rig.add``'s requests."""
    from rlsched.integrations.vllm_omni.state import make_request

    def rec(size: int) -> Any:
        sp = OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=20,
                                         extra_args={"priority": "batch"})
        return BASE.record(make_request(0, 0.0, sp, PluginConfig(profile=PROFILE), BASE))
    sizes = [s for s in range(512, 8192, 64) if BASE.fits([rec(s)]) and not BASE.fits([rec(s), rec(s)])]
    assert sizes, "the profile has no such size"
    return sizes[0]


def test_an_overrunning_central_policy_backs_off() -> None:
    async def go() -> None:
        rig = Rig(3, "fifo", seqs=2, budget_ms=1e-9)  # no decision is that fast
        for rid in ("a", "b", "c"):
            await rig.add(rid)
            await rig.settle()
        # a: asked, too slow but a lone overrun: its answer used; b: asked, the second overrun in a row: FIFO with
        # the memory check (backoff 2); c: not parked (backoff), round-robin
        assert sorted(rig.sent()) == ["a", "b", "c"]
        assert rig.pool.router_fallbacks == {"slow": 1, "backoff": 1}
    run(go())


def test_a_stalled_queue_is_sent() -> None:
    async def go() -> None:
        clock = [0.0]
        rig = Rig(1, Scripted(*[Decision()] * 100), seqs=1, stall_ms=1_000)
        rig.pool._wall = lambda: clock[0]
        await rig.add("a")
        await rig.settle()
        assert rig.pool.parked() == ["a"]
        clock[0] = 2.0
        rig.pool._kick()
        await rig.settle()
        assert rig.sent() == {"a": 0} and rig.pool.router_fallbacks == {"stalled": 1}
    run(go())


def test_streaming_and_no_orchestrator_are_sent_at_once() -> None:
    async def go() -> None:
        rig = Rig(2, "fifo")
        rig.pool._orchestrator = None
        state = bare_state()
        assert await rig.pool.submit_initial("x", state, {"prompt": "x"}) == 0
        assert rig.sent() == {"x": 0} and rig.pool.router_fallbacks == {"no_orchestrator": 1}
    run(go())


# ----------------------------------------------------------------- shutdown
def test_shutdown_fails_the_parked_requests() -> None:
    async def go() -> None:
        rig = Rig(1, "fifo", seqs=1)
        for rid in ("a", "b", "c"):
            await rig.add(rid)
        await rig.settle()
        rig.orch._shutdown_event.set()
        rig.pool._kick()
        await rig.settle()
        assert sorted(m.request_id for m in rig.errors()) == ["b", "c"] and not rig.pool.parked()
        assert rig.metric("rlsched_router_released_total", reason="shutdown") == 2
        assert rig.sent() == {"a": 0}
    run(go())


# ------------------------------------------------------------------ config
def test_central_is_a_router_setting_with_its_policy() -> None:
    cfg = RouterConfig.from_extras({"rlsched_router": {"router": "central", "policy": "edf"}}, environ={})
    assert cfg.central and cfg.policy == "edf"
    for bad, field in (({"router": "central", "policy": "no-such"}, "policy"),
                       ({"router": "rlsched", "policy": "edf"}, "policy"),
                       ({"router": "central:3"}, "router"), ({"router": "central", "stall_ms": 0}, "stall_ms")):
        with pytest.raises(ValueError, match=field):
            RouterConfig.from_extras({"rlsched_router": bad}, environ={})


def test_central_on_a_later_stage_is_refused() -> None:
    class Plan:
        class replicas0:
            stage_cfg = type("C", (), {"engine_args": {"extras": {"rlsched_router": {"router": "central"}}}})()
        replicas = [replicas0]

    class Pool:
        stage_type, stage_id, live_num_replicas = "diffusion", 1, 2
    pool = Pool()
    assert router_mod._routed(pool, Plan(), "m") is pool  # vLLM-Omni's pool kept, the refusal logged


def test_a_sent_request_carries_its_central_wait_and_the_replica_dates_it_back() -> None:
    from rlsched.integrations.vllm_omni.state import PARKED_KEY, PluginState

    async def go() -> list[Any]:
        clock = [0.0]
        rig = Rig(1, "fifo", seqs=1)
        rig.pool._wall = lambda: clock[0]
        got: list[Any] = []
        client = rig.pool.clients[0]
        orig = client.add_request_async

        async def spy(rid: str, request: Any, params: Any, **kw: Any) -> None:
            got.append(params.extra_args)
            await orig(rid, request, params, **kw)
        client.add_request_async = spy
        for rid in ("a", "b"):
            await rig.add(rid)
        await rig.settle()
        clock[0] = 2.5  # b waits 2.5 s in the central queue
        await rig.finish("a")
        return got

    got = run(go())
    assert [g[PARKED_KEY] for g in got] == [0.0, 2500.0] and got[1]["priority"] == "batch"
    now = [0.0]
    state = PluginState(BASE, ServingConfig(), PluginConfig(profile=PROFILE, time_scale=2.0, late_binding=True),
                        clock=lambda: now[0])
    now[0] = 10.0
    sp = OmniDiffusionSamplingParams(height=512, width=512, extra_args={"slo_ms": 4000, PARKED_KEY: 1000})
    rec, bad = state.add("b", sp, None)
    # parked 1 s of wall time = 2 s on the x2 plugin clock: it arrived at 8, due at 8 + its 4 s SLO
    assert bad == [] and rec.request.arrival_s == 8.0 and rec.deadline_s == 12.0


# ---------------------------------------------------------------- one wave ahead
def test_the_next_batch_goes_ahead_of_the_predicted_end() -> None:
    """Request mode: a replica whose published wave ends within ``lead_ms``, with nothing queued there,
    gets its next batch before its finish output; a batch sent ahead and still queued holds the next."""
    async def go() -> Rig:
        clock = Clock(0.0)
        rig = Rig(1, "fifo", seqs=1, clock=clock, lead_ms=50)
        for rid in ("a", "b", "c"):
            await rig.add(rid)
        await rig.settle()
        assert rig.sent() == {"a": 0} and rig.pool.parked() == ["b", "c"]  # no state yet: the ledger's rule
        await rig.hear(0, 10.0, ["a"])
        assert rig.pool.parked() == ["b", "c"]  # 10 s to go
        clock.t = 9.5
        assert rig.pool._sleep_s() == pytest.approx(0.45)  # the dispatcher wakes 50 ms before the end
        clock.t = 9.96
        rig.pool._kick()
        await rig.settle()
        assert rig.sent() == {"a": 0, "b": 0} and rig.pool.parked() == ["c"]  # a not finished yet
        clock.t = 9.99
        rig.pool._kick()
        await rig.settle()
        assert rig.pool.parked() == ["c"]  # b is queued there: one wave ahead, not two
        await rig.hear(0, 10.0, ["b"], finished=("a",))
        await rig.finish("a")
        assert rig.pool.parked() == ["c"]
        clock.t = 19.96
        rig.pool._kick()
        await rig.settle()
        assert rig.sent() == {"a": 0, "b": 0, "c": 0} and rig.pool.central_log == [
            (0, ("a",)), (0, ("b",)), (0, ("c",))]
        for rid in ("b", "c"):
            await rig.finish(rid)
        assert not rig.pool._request_bindings and not rig.orch.request_states and not rig.errors()
        assert rig.pool.router_states == {"taken": 2} and not rig.pool.router_fallbacks
        return rig

    run(go())


def test_the_dispatcher_wakes_within_the_lead_of_the_predicted_end() -> None:
    """Real clock: nothing kicks the dispatcher after the state; it sends b ~50 ms before a's predicted
    end (0.15 s after the state), well before its idle poll (1 s)."""
    async def go() -> None:
        rig = Rig(1, "fifo", seqs=1)
        for rid in ("a", "b"):
            await rig.add(rid)
        await rig.settle()
        await rig.hear(0, 0.15, ["a"])
        assert rig.sent() == {"a": 0}
        await asyncio.sleep(0.5)
        assert rig.sent() == {"a": 0, "b": 0} and "a" in rig.orch.request_states
        for rid in ("a", "b"):
            await rig.finish(rid)
        assert not rig.errors()

    run(go())


@pytest.mark.parametrize("case", ["no state", "step mode", "invalid", "stale"])
def test_without_a_trusted_state_or_in_step_mode_a_replica_takes_a_batch_only_once_idle(case: str) -> None:
    """The ledger's rule (nothing sent there unfinished) when the replica is seen through the ledger alone;
    step mode never sends ahead (its requests join at step boundaries)."""
    async def go() -> Rig:
        clock = Clock(0.0)
        rig = Rig(1, "fifo", seqs=1, clock=clock, mode="step" if case == "step mode" else "request", silence_s=1.0)
        for rid in ("a", "b"):
            await rig.add(rid)
        await rig.settle()
        if case == "invalid":
            await rig.hear(0, 0.0, ["a"], raw={"v": 1, "seq": 5, "running": [["a", 0]], "carrier": True})
        elif case == "step mode":
            await rig.hear(0, 0.01, ["a"])  # within the lead
        elif case == "stale":
            await rig.hear(0, 0.5, ["a"])
            assert rig.pool.parked() == ["b"]
            clock.t = 1.6  # silent 1 s past its predicted end: as if nothing had been heard
        rig.pool._kick()
        await rig.settle()
        assert rig.pool.parked() == ["b"]
        await rig.finish("a")
        assert rig.sent() == {"a": 0, "b": 0}
        await rig.finish("b")
        return rig

    rig = run(go())
    reason = {"no state": "missing", "invalid": "invalid", "stale": "stale"}.get(case)
    if reason is not None:
        assert rig.pool.view_fallbacks[reason] >= 1
        assert rig.metric("rlsched_router_view_fallbacks_total", reason=reason) >= 1
    assert not rig.pool._request_bindings and not rig.errors()


def test_an_abort_of_a_request_sent_ahead_releases_it_once() -> None:
    """b is sent ahead (queued at the replica, not started) and aborted: the replica is told, its binding
    released once; c goes ahead in its place; a late state naming b is ignored; nothing lost or finished twice."""
    async def go() -> Rig:
        clock = Clock(0.0)
        rig = Rig(1, "fifo", seqs=1, clock=clock)
        for rid in ("a", "b", "c"):
            await rig.add(rid)
        await rig.settle()
        await rig.hear(0, 10.0, ["a"])
        clock.t = 9.96
        rig.pool._kick()
        await rig.settle()
        assert rig.sent() == {"a": 0, "b": 0} and rig.pool.parked() == ["c"]
        await rig.orch._handle_abort(AbortRequestMessage(request_ids=["b"]))
        await rig.settle()
        assert rig.replicas[0].aborted == ["b"] and rig.pool.get_bound_replica_id("b") is None
        assert rig.metric("rlsched_router_released_total", reason="finished") == 1
        assert rig.sent() == {"a": 0, "b": 0, "c": 0} and not rig.pool.parked()  # c ahead in b's place
        await rig.hear(0, 10.0, ["b", "c"], finished=("a",))  # raced the abort: b is not followed any more
        assert rig.pool.outstanding() == {0: ["a", "c"]}
        await rig.orch._handle_abort(AbortRequestMessage(request_ids=["b"]))  # twice: nothing to release
        for rid in ("a", "c"):
            await rig.finish(rid)
        assert rig.metric("rlsched_router_released_total", reason="finished") == 3
        assert not rig.pool._request_bindings and not rig.pool._decider.sent and not rig.orch.request_states
        assert not rig.errors() and rig.pool.central_log == [(0, ("a",)), (0, ("b",)), (0, ("c",))]
        return rig

    run(go())


def test_a_request_no_replica_can_hold_is_sent_at_once_and_the_rest_stay_central() -> None:
    """Caught: a request no GPU can hold sat in the central queue until ``stall_ms``, then flushed the whole
    queue to round-robin."""
    async def go() -> None:
        rig = Rig(1, Scripted(*[Decision()] * 100), seqs=1, stall_ms=1_000)  # the policy waits: "a" stays parked
        await rig.add("a")
        await rig.add("huge", size=8192)  # 290 GB on a 141 GB GPU
        await rig.settle()
        assert rig.pool.parked() == ["a"] and rig.sent() == {"huge": 0}
        assert rig.pool.router_fallbacks == {"cannot_fit": 1}
    run(go())


# ------------------------------------------------------------- invariants (issue 34: bugs seeded one at a time)
def test_the_queue_is_flushed_only_once_stall_ms_has_passed() -> None:
    """``stall_ms`` is milliseconds of the pool's wall clock: nothing is flushed at 1 ms, 0.5 s or 0.999 s
    of a 1,000 ms stall; the queue is flushed past 1 s. Caught: the flush after ``stall_ms / 1000`` ms."""
    async def go() -> None:
        clock = [0.0]
        rig = Rig(1, Scripted(*[Decision()] * 100), seqs=1, stall_ms=1_000)  # the policy waits: "a" stays
        rig.pool._wall = lambda: clock[0]
        await rig.add("a")
        await rig.settle()
        for t in (0.001, 0.002, 0.5, 0.999):
            clock[0] = t
            rig.pool._kick()
            await rig.settle()
            assert rig.pool.parked() == ["a"] and not rig.sent() and not rig.pool.router_fallbacks, t
        clock[0] = 1.001
        rig.pool._kick()
        await rig.settle()
        assert rig.sent() == {"a": 0} and rig.pool.router_fallbacks == {"stalled": 1}
    run(go())


def test_a_request_whose_replica_left_between_decision_and_send_goes_to_a_live_one_at_the_next_decision() -> None:
    """Replica 1 is evicted while the round's send to replica 0 runs: b, decided for replica 1, goes back to
    the head of the queue and the next decision sends it to replica 2 (free), at once — the wall clock never
    moves, so no stall flush can have sent it. Caught: a re-parked request never sent until the stall flush."""
    async def go() -> None:
        rig = Rig(3, "fifo", seqs=1, stall_ms=60_000)
        rig.pool._wall = lambda: 0.0
        first = rig.replicas[0]
        send = first.add_request_async

        async def send_and_lose_replica_1(*args: Any, **kw: Any) -> None:
            if rig.pool.clients[1] is not None:
                rig.pool.evict_replica(1)  # replica 1 leaves after the round decided b for it
            await send(*args, **kw)
        first.add_request_async = send_and_lose_replica_1
        await rig.add("a")
        await rig.add("b")
        await rig.settle()
        assert rig.pool.central_log == [(0, ("a",)), (1, ("b",)), (2, ("b",))]
        assert rig.sent() == {"a": 0, "b": 2} and not rig.pool.parked()
        assert not rig.pool.router_fallbacks and not rig.errors()
        for rid in ("a", "b"):
            await rig.finish(rid)
        assert not rig.pool._request_bindings and not rig.orch.request_states
    run(go())


def test_a_replica_seen_through_the_ledger_is_handed_a_batch_only_when_nothing_sent_there_is_unfinished() -> None:
    """Over a run of 24 requests on 3 replicas (batches of up to 2, finishes in a scrambled order): every
    batch the central policy hands out goes to a replica holding no unfinished request. Caught (in the
    simulator): late binding handing batches to busy replicas."""
    async def go() -> None:
        rig = Rig(3, "edf", seqs=2)
        handed: list[tuple[int, list[str]]] = []
        take = rig.pool._take

        def watched(slot: int, names: Any) -> Any:
            handed.append((slot, list(rig.pool.outstanding().get(slot, []))))
            return take(slot, names)
        rig.pool._take = watched  # type: ignore[method-assign]
        for i in range(24):
            await rig.add(f"r{i}")
        await rig.settle()
        k = 0
        while rig.pool.parked() or rig.pool._request_bindings:
            sent = sorted(set(rig.sent()) & set(rig.pool._request_bindings))
            await rig.finish(sent[(7 * k) % len(sent)])
            k += 1
        assert sorted(rig.sent()) == sorted(f"r{i}" for i in range(24))
        assert len(handed) >= 12 and [h for h in handed if h[1]] == []
        assert not rig.pool.router_fallbacks and not rig.errors()
    run(go())


def test_a_replicas_published_calibration_reaches_the_central_view_once_per_version() -> None:
    """A replica's state carries its calibration (``state.cal``): the router's ledger view of it and the
    central view of its kind decide on it, the parked requests re-costed; the same version again changes
    nothing (the central view's queue index is not rebuilt for it)."""
    async def go() -> None:
        rig = Rig(2, "edf", seqs=1)
        for rid in ("a", "b", "c", "d"):
            await rig.add(rid)
        await rig.settle()
        view = rig.pool.central_queue.views[0]
        before = {iid: r.work_s for iid, r in view.records.items()}
        assert before and view.cost is BASE
        cal = {"version": 2, "scales": {"qwen-image": [1.3, 1.0, 1.0]}}
        running = [rid for rid, slot in rig.sent().items() if slot == 0]
        await rig.hear(0, 10.0, running, raw=rig.replicas[0].state(10.0, running, cal=cal))
        assert view.cost is rig.pool._ledger.views[0].cost is not BASE and view.shipped is BASE
        assert view.cost.model("qwen-image").a_s == pytest.approx(1.3 * BASE.model("qwen-image").a_s)
        assert all(r.work_s == pytest.approx(1.3 * before[iid]) for iid, r in view.records.items())
        end = view.journal.end
        await rig.hear(0, 9.0, running, raw=rig.replicas[0].state(9.0, running, cal=cal))
        assert view.journal.end == end  # the same version: nothing re-costed
        assert rig.pool.router_states == {"taken": 2}

    run(go())
