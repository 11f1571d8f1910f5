"""The rlsched router inside vLLM-Omni 0.30's real ``StagePool`` (fake replica clients, no server):
every request bound once, where the router chose; every failure routed by vLLM-Omni's own rule and
counted; the ledger follows every exit and every replica that leaves; ``install`` is safe."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from prometheus_client import CollectorRegistry  # noqa: E402
from vllm_omni.engine.stage_pool import StagePool  # noqa: E402
from vllm_omni.inputs.data import OmniDiffusionSamplingParams  # noqa: E402

from rlsched.errors import ConfigError  # noqa: E402
from rlsched.integrations.vllm_omni import router as router_mod  # noqa: E402
from rlsched.integrations.vllm_omni import routing  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.cpu_server import STUBS  # noqa: E402
from rlsched.integrations.vllm_omni.router_pool import RouterStagePool  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig, RouterMetrics  # noqa: E402
from rlsched.routing.routers import RlschedRouter  # noqa: E402
from rlsched.sim.cost import load_profile  # noqa: E402
from rlsched.sim.layout import at_layout  # noqa: E402
from tests.vllm.fakes import ReplicaClient as Client  # noqa: E402
from tests.vllm.fakes import Scripted  # noqa: E402

PROFILE = "qwen-image-h200-vllm-omni"  # has sp coefficients: a 2-GPU replica is faster
BASE = load_profile(PROFILE)






def params(size: int = 512, steps: int = 20, priority: str | None = None, slo_ms: float | None = None) -> Any:
    extra: dict[str, Any] = {}
    if priority is not None:
        extra["priority"] = priority
    if slo_ms is not None:
        extra["slo_ms"] = slo_ms
    return OmniDiffusionSamplingParams(height=size, width=size, num_inference_steps=steps, extra_args=extra)


def pool(n: int = 2, router: Any = "rlsched", costs: Any = BASE, budget_ms: float = 60_000, deadline_ms: float = 60_000,
         thread: str = "auto", **kw: Any) -> RouterStagePool:
    """A router pool whose decisions meet their budget and deadline however loaded the machine is (unless asked)."""
    config = RouterConfig(budget_ms=budget_ms, deadline_ms=deadline_ms, decision_thread=thread)
    return RouterStagePool(0, [Client() for _ in range(n)], router=router, costs=costs,
                           config=config, settings=PluginConfig(profile=PROFILE),
                           clock=lambda: 0.0, metrics=RouterMetrics(CollectorRegistry()), **kw)


def submit(p: StagePool, rid: str, sp: Any = None, **kw: Any) -> int:
    state = SimpleNamespace(sampling_params_list=[sp if sp is not None else params()])
    return asyncio.run(p.submit_initial(rid, state, f"prompt {rid}", **kw))


def sent(p: StagePool) -> dict[str, int]:
    """Request id -> the replica whose client received it; asserts each was sent exactly once."""
    out: dict[str, int] = {}
    for i, c in enumerate(p.clients):
        for rid in (c.got if c is not None else []):
            assert rid not in out, f"{rid} sent twice"
            out[rid] = i
    return out


def fallbacks(p: RouterStagePool, reason: str) -> float:
    return p.router_metrics.sample("rlsched_router_fallbacks_total", {"reason": reason}) or 0.0


def round_robin(n: int, k: int) -> list[int]:
    """What vLLM-Omni's own StagePool picks for k new requests over n replicas."""
    plain = StagePool(0, [Client() for _ in range(n)])
    return [plain.select_replica_id(f"q{i}") for i in range(k)]


# ------------------------------------------------------------------ the router's choice
def test_every_request_bound_once_where_the_router_chose() -> None:
    seen = Scripted(then=RlschedRouter())
    p = pool(3, seen, costs=[BASE, at_layout(BASE, 2), BASE])
    sizes = [1024, 512, 1024, 768, 512, 1024, 1024, 512]
    chosen = [submit(p, f"r{i}", params(s, priority="realtime")) for i, s in enumerate(sizes)]
    assert sent(p) == p._request_bindings == {f"r{i}": c for i, c in enumerate(chosen)}
    assert seen.chose == chosen  # positions == slots while every replica lives
    assert p.router_decisions == len(sizes) and not p.router_fallbacks
    assert sorted(r for rs in p.outstanding().values() for r in rs) == sorted(sent(p))


def test_the_learned_router_serves_in_the_real_stage_pool() -> None:
    """``--router router`` (checkpoints/router) routes through the same ledger: every request bound
    once, no fallback, the wider replica for a large shape when both are idle."""
    p = pool(3, "router", costs=[BASE, at_layout(BASE, 2), BASE])
    chosen = [submit(p, f"r{i}", params(s, priority="batch")) for i, s in enumerate([1024, 512, 1024, 768, 512])]
    assert sent(p) == p._request_bindings == {f"r{i}": c for i, c in enumerate(chosen)}
    assert p.router_decisions == 5 and not p.router_fallbacks and chosen[0] == 1


def test_the_video_router_serves_in_the_real_stage_pool() -> None:
    """``--router router:checkpoints/router-video`` (issue 37: the step-mode pools' learned router) is
    served like the other: every request bound once where it chose, no fallback."""
    p = pool(3, "router:checkpoints/router-video", costs=[BASE, at_layout(BASE, 2), BASE])
    chosen = [submit(p, f"r{i}", params(s, priority=c)) for i, (s, c) in
              enumerate([(1024, "batch"), (512, "realtime"), (1024, "batch"), (768, "background"), (512, "batch")])]
    assert sent(p) == p._request_bindings == {f"r{i}": c for i, c in enumerate(chosen)}
    assert p.router_decisions == 5 and not p.router_fallbacks


@pytest.mark.parametrize("thread", ["auto", "engine"])
def test_the_router_decides_with_the_garbage_collector_paused(thread: str) -> None:
    """A full collection of the API server's process landing in a 0.1 ms decision overran a 100 ms budget
    (``make test-e2e``, 2026-12-04): the collector is off while the router decides and on again after."""
    import gc

    class Spy(RlschedRouter):
        def route(self, request: Any, stage: Any) -> int:
            seen.append(gc.isenabled())
            return super().route(request, stage)

    seen: list[bool] = []
    assert gc.isenabled()
    p = pool(2, Spy(), thread=thread)
    for i in range(3):
        submit(p, f"r{i}", params(512))
    assert seen == [False, False, False] and gc.isenabled() and not p.router_fallbacks


def test_a_large_shape_goes_to_the_wider_replica() -> None:
    p = pool(2, costs=[BASE, at_layout(BASE, 2)])
    assert submit(p, "big", params(1024)) == 1  # both idle: the 2-GPU replica finishes it first


def test_deadline_first_not_least_work() -> None:
    """Replica 0 holds more work, but due after the urgent request; replica 1 less, due before it.
    rlsched's router predicts the urgent one's finish from the work due first: replica 0 (least-work: 1).
    Each replica is first sent one small request (the first a replica seen idle is sent may have started
    there: ahead of the urgent one on both, issue 50)."""
    for router, expected in ((RlschedRouter(), 0), (router_mod_router("least-work"), 1)):
        p = pool(2, Scripted(0, 1, 0, 0, 0, 1, then=router))
        for i in range(2):
            submit(p, f"first{i}", params(512, steps=20, priority="batch", slo_ms=3_600_000))
        for i in range(3):
            submit(p, f"bg{i}", params(1024, steps=50, priority="background", slo_ms=3_600_000))
        submit(p, "rt", params(1024, steps=30, priority="realtime", slo_ms=100))
        assert submit(p, "urgent", params(512, steps=20, priority="realtime", slo_ms=60_000)) == expected


def router_mod_router(spec: str) -> Any:
    """The bare router (``make_router`` wraps it in the simulator's ``ViewRouter`` by default)."""
    from rlsched.routing.routers import make_router

    return make_router(f"{spec};view=replica")


def test_the_ledger_empties_on_release() -> None:
    p = pool(2)
    for i in range(6):
        submit(p, f"r{i}", params(512 + 256 * (i % 2)))
    assert sum(map(len, p.outstanding().values())) == 6
    p.release_bindings([f"r{i}" for i in range(6)])
    assert p.outstanding() == {0: [], 1: []} and not p._request_bindings
    reg = p.router_metrics
    assert reg.sample("rlsched_router_released_total", {"reason": "finished"}) == 6
    assert all(reg.sample("rlsched_router_outstanding", {"stage": "0", "replica": str(s)}) == 0
               for s in (0, 1))
    p.release_binding("r0")  # twice: harmless
    assert reg.sample("rlsched_router_released_total", {"reason": "finished"}) == 6


def test_a_cfg_companion_follows_its_parent() -> None:
    p = pool(2, Scripted(1, then=RlschedRouter()))
    assert submit(p, "parent") == 1
    assert submit(p, "parent__cfg", affinity_request_id="parent") == 1
    assert p.router_decisions == 1 and p.outstanding()[1] == ["parent", "parent__cfg"]


# ----------------------------------------------------------------------------- fallbacks
@pytest.mark.parametrize("bad, reason", [(ValueError("boom"), "exception"), (SystemExit(), "exception"),
                                         (KeyboardInterrupt(), "exception"),
                                         (7, "out_of_range"), (-1, "out_of_range"), (True, "not_int"),
                                         (None, "not_int"), (1.0, "not_int")])
def test_a_bad_choice_is_routed_by_vllm_omnis_rule_and_counted(bad: Any, reason: str) -> None:
    p = pool(2, Scripted(bad, bad, bad))
    got = [submit(p, f"r{i}") for i in range(3)]
    assert got == round_robin(2, 3)
    assert p.router_fallbacks == {reason: 3} and fallbacks(p, reason) == 3
    assert sent(p) == p._request_bindings and sum(map(len, p.outstanding().values())) == 3


def test_a_fallback_never_sends_a_request_to_a_replica_whose_gpu_cannot_hold_it() -> None:
    """Replica 0's GPU holds a 1536² image no more (its memory cut to the weights and 2 GB); vLLM-Omni's
    round-robin would send every other request there. Caught (issue 47): the router's fallback memory-blind."""
    import dataclasses

    small = dataclasses.replace(BASE, gpu_memory_gb=BASE.weights_gb + 2.0)
    p = pool(2, Scripted(*[ValueError("boom")] * 6), costs=[small, BASE])
    got = [submit(p, f"r{i}", params(1536)) for i in range(4)]
    assert got == [1, 1, 1, 1] and p.router_fallbacks == {"exception": 4}
    assert sent(p) == p._request_bindings and sum(map(len, p.outstanding().values())) == 4
    tiny = [submit(p, f"t{i}", params(256)) for i in range(2)]  # fits either: vLLM-Omni's own rule
    assert sorted(tiny) == [0, 1]


def test_slow_then_backoff() -> None:
    p = pool(2, budget_ms=1e-9)  # no routing decision is that fast
    got = [submit(p, f"r{i}") for i in range(4)]
    # a lone overrun is used (the router's choice); the second in a row falls back to round-robin and backs off
    # 2 requests (round-robin too)
    assert got[1:] == round_robin(2, 3)
    assert p.router_fallbacks == {"slow": 1, "backoff": 2}
    assert fallbacks(p, "slow") == 1 and fallbacks(p, "backoff") == 2


def test_a_replica_evicted_while_the_router_decides() -> None:
    p: RouterStagePool

    def evict_one() -> None:
        if p.clients[1] is not None:
            p.evict_replica(1)

    p = pool(2, Scripted(1, during=evict_one), thread="engine")  # the eviction comes on the deciding thread
    assert submit(p, "r0") == 0 and p.router_fallbacks == {"evicted": 1} and fallbacks(p, "evicted") == 1
    assert sent(p) == {"r0": 0}


def test_no_params_is_routed_by_vllm_omni() -> None:
    p = pool(2)
    assert p.select_replica_id("bare") == 0 and p.router_fallbacks == {"no_request": 1}
    assert p._request_bindings == {"bare": 0}


def test_router_failures_never_lose_a_request_in_a_long_mix() -> None:
    script = [ValueError(), 0, 5, True, None, 1, 0, -3, 1] * 4
    p = pool(3, Scripted(*script, then=RlschedRouter()))
    for i in range(len(script) + 5):
        submit(p, f"r{i}", params(512 + 256 * (i % 3)))
    assert set(sent(p)) == {f"r{i}" for i in range(len(script) + 5)} and sent(p) == p._request_bindings
    p.release_bindings(list(p._request_bindings))
    assert not any(p.outstanding().values())


# ------------------------------------------------------------------------- dead replicas
def test_an_evicted_replica_is_never_chosen_and_its_entries_resolved() -> None:
    p = pool(3, costs=[BASE, at_layout(BASE, 2), BASE])  # replica 1 is the fastest: the router's favourite
    for i in range(6):
        submit(p, f"a{i}", params(1024))
    on_1 = p.outstanding()[1]
    assert on_1
    p.evict_replica(1)
    assert 1 not in p.outstanding() and sorted(sum(p.outstanding().values(), [])) == sorted(
        r for r in sent(p) if r not in on_1)
    reg = p.router_metrics
    assert reg.sample("rlsched_router_released_total", {"reason": "replica_lost"}) == len(on_1)
    assert reg.sample("rlsched_router_outstanding", {"stage": "0", "replica": "1"}) == 0
    p.release_bindings(on_1)  # vLLM-Omni then fails and cleans up each: nothing left to resolve
    assert reg.sample("rlsched_router_released_total", {"reason": "finished"}) is None
    late = [submit(p, f"b{i}", params(1024)) for i in range(8)]
    assert 1 not in late and not p.router_fallbacks


def test_a_replica_marked_unavailable_is_dropped() -> None:
    p = pool(2, Scripted(1, 1, then=RlschedRouter()))
    submit(p, "x"), submit(p, "y")
    assert p.mark_replica_unavailable(1) == ["x", "y"]
    assert p.outstanding() == {0: []} and not p._request_bindings
    assert [submit(p, f"z{i}") for i in range(4)] == [0, 0, 0, 0]


# ------------------------------------------------------------------------------ install
@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    """router_install_probe.py's findings: install() against the real StageRuntime, in its own process."""
    here = Path(__file__).resolve()
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(STUBS), str(here.parents[2]), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, str(here.parent / "router_install_probe.py")], env=env, capture_output=True,
                         text=True, timeout=600)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert res.returncode == 0 and line, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(line[len("PROBE "):])


def test_install_twice_wraps_once_and_routes_only_stages_that_ask(probe) -> None:
    assert probe["version"].startswith("0.30.")
    assert probe["first"] is True and probe["second"] is True and probe["wrapped_once"]
    assert probe["asked"] == "RouterStagePool:least-work"
    assert probe["not_asked"] == probe["no_extras"] == "StagePool"  # vLLM-Omni's own pool
    assert probe["env"] == "RouterStagePool:rlsched"  # RLSCHED_ROUTER, for a stage whose extras name none


def test_install_gives_a_generic_diffusion_stage_the_replicas_its_overrides_ask_for(probe) -> None:
    """vLLM-Omni 0.30's generic builder (Qwen-Image) drops num_replicas; install() carries it for rlsched's stages."""
    found = probe["generic_replicas"]
    assert found["rlsched_2"] == [2, "0,1"] and found["rlsched_1"] == [1, "0"]
    assert found["not_rlsched_2"] == [1, "0,1"]  # another engine backend's stage: exactly as vLLM-Omni built it
    assert found["wrapped_once"] and found["again"] is True


def test_install_gives_a_central_stage_the_central_pool_and_its_orchestrator(probe) -> None:
    """Late binding sends later, from its own task: it needs the orchestrator's failure paths (the hook)."""
    assert probe["central"] == {"pool": "CentralStagePool", "max_num_seqs": 3, "attached": True,
                                "hooked_once": True}


def test_a_wrong_router_setting_keeps_vllm_omnis_pool(probe) -> None:
    assert probe["wrong_setting"] == "StagePool"
    assert any(ln.startswith("ERROR") and "keeps vLLM-Omni's own routing" in ln for ln in probe["log"])


def test_install_on_another_vllm_omni_is_a_logged_no_op(probe) -> None:
    assert probe["wrong_version"] is False and not probe["wrong_version_patched"]
    assert any(ln.startswith("WARNING") and "0.31.0" in ln for ln in probe["log"])


def test_install_never_raises(probe) -> None:
    assert probe["raising_install"] is False
    assert any(ln.startswith("ERROR") and "install failed" in ln for ln in probe["log"])


def test_the_entry_point_is_registered() -> None:
    eps = [ep for ep in metadata.entry_points(group="vllm.general_plugins") if ep.name == "rlsched_router"]
    assert len(eps) == 1 and eps[0].load() is router_mod.install


def test_router_config_checks_its_fields() -> None:
    assert RouterConfig.from_extras({}, environ={}) is None
    assert RouterConfig.from_extras({}, environ={"RLSCHED_ROUTER": "affinity"}).router == "affinity"
    assert RouterConfig.from_extras({"rlsched_router": {"router": "random:3"}}, environ={"RLSCHED_ROUTER": "x"}) \
        .router == "random:3"
    for bad in ({"router": "central:1"}, {"router": "rlsched", "budget_ms": 0}, {"router": "rlsched", "oops": 1},
                {"router": "rlsched", "seed": True}):
        with pytest.raises(ValueError):
            RouterConfig.from_extras({"rlsched_router": bad}, environ={})
    # every numeric setting from the one table of bounds, named; the decision thread one of three
    for key, value in (("deadline_ms", 0), ("deadline_ms", 1e300), ("stall_ms", math.nan), ("silence_s", -1),
                       ("lead_ms", math.inf), ("seed", 2**70), ("budget_ms", True), ("decision_thread", "gpu")):
        with pytest.raises(ConfigError, match=f"extras.rlsched_router.{key}: must be"):
            RouterConfig.from_extras({"rlsched_router": {"router": "rlsched", key: value}}, environ={})
    cfg = RouterConfig.from_extras({"rlsched_router": {"router": "central", "silence_s": 5, "lead_ms": 0}},
                                   environ={})
    assert (cfg.silence_s, cfg.lead_ms) == (5, 0) and RouterConfig().lead_ms == 50.0
    for spec in ("rlsched;view=ledger", "least-work;delay_ms=5"):  # simulator options: refused, named
        with pytest.raises(ValueError, match="simulator options"):
            RouterConfig.from_extras({"rlsched_router": {"router": spec}}, environ={})
    for name, bad in (("silence_s", 0), ("silence_s", float("inf")), ("silence_s", True), ("lead_ms", -1),
                      ("lead_ms", float("nan")), ("lead_ms", "50")):
        with pytest.raises(ValueError, match=name):
            RouterConfig.from_extras({"rlsched_router": {"router": "rlsched", name: bad}}, environ={})


def test_the_pool_times_the_lead_and_the_silence_on_its_clock() -> None:
    from rlsched.integrations.vllm_omni.central_pool import CentralStagePool

    cfg = RouterConfig(router="central", silence_s=7.0, lead_ms=40.0)
    p = CentralStagePool(0, [Client()], costs=BASE, config=cfg, settings=PluginConfig(profile=PROFILE, time_scale=3.0),
                         metrics=RouterMetrics(CollectorRegistry()))
    assert p._lead_s == pytest.approx(0.12) and p._ledger.views[0].silence_s == 7.0


def test_every_router_sample_names_the_served_model() -> None:
    """The router's samples carry ``model_name``: the stage's vLLM config's served name, else the
    orchestrator's model (``router._routed`` passes it), a folder by its basename, else "unknown"."""
    p = pool(2, model_name="/models/qwen")
    for i in range(3):
        submit(p, f"r{i}", params(1024))
    samples = [s for m in p.router_metrics.registry.collect() for s in m.samples]
    assert {s.name for s in samples} >= {"rlsched_router_decisions_total", "rlsched_router_outstanding",
                                         "rlsched_router_latency_seconds_count"}
    assert {s.labels.get("model_name") for s in samples} == {"qwen"}  # the served name, not the folder's path
    served = SimpleNamespace(model_config=SimpleNamespace(served_model_name="qwen-image", model="/models/qwen"))
    assert pool(1, model_name="/models/qwen", stage_vllm_config=served).router_metrics.model_name == "qwen-image"
    assert pool(1).router_metrics.model_name == "unknown"


def test_every_router_metric_is_in_the_table() -> None:
    """router.py's metric table names every metric ``RouterMetrics`` registers."""
    import re

    reg = RouterMetrics(CollectorRegistry()).registry
    registered = {m.name for m in reg.collect()}
    documented = set(re.findall(r"``(rlsched_router_[a-z_]+)``", routing.__doc__ or ""))
    assert registered and {n.removesuffix("_total") for n in documented} == registered
