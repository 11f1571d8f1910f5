"""RLDiffusionEngine inside vLLM-Omni's real DiffusionEngine busy loop (fake executor, no model)."""

from __future__ import annotations

import asyncio
import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from vllm_omni.config.stage_config import load_deploy_config  # noqa: E402
from vllm_omni.diffusion.data import OmniDiffusionConfig  # noqa: E402
from vllm_omni.diffusion.diffusion_engine import DiffusionEngine  # noqa: E402

from rlsched.cli import main as rlsched_main  # noqa: E402
from rlsched.integrations.vllm_omni import RLDiffusionEngine, RLRequestScheduler, RLStepScheduler  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.engine import make_scheduler  # noqa: E402
from tests.vllm.fakes import RunNothingExecutor, mk_req  # noqa: E402

BACKEND = "rlsched.integrations.vllm_omni.RLDiffusionEngine"
WAVES: list[list[str]] = []


class FakePipe:
    supports_request_batch = True


class FakeExecutor(RunNothingExecutor):
    """Runs nothing (``RunNothingExecutor``); notes each wave in ``WAVES`` (step mode: sorted)."""

    def _record(self, so, ids, step) -> None:
        WAVES.append(sorted(ids) if step else ids)


def od_config(policy: str | None = "edf", step: bool = False, **kw) -> OmniDiffusionConfig:
    # generous budgets: these tests check what the engine serves, and a loaded 2-core machine
    # must not turn a policy's decision into a timing fallback (test_overhead measures speed)
    extras = {"extras": {"rlsched": {"policy": policy, "telemetry": False, "decision_budget_ms": 60e3,
                                     "decision_deadline_ms": 60e3}}} if policy else {}
    return OmniDiffusionConfig(max_num_seqs=4, request_batch_max_wait_ms=0, step_execution=step,
                               distributed_executor_backend=FakeExecutor,
                               custom_pipeline_args={"pipeline_class": FakePipe}, engine_backend=BACKEND,
                               **extras, **kw)


async def serve(engine, reqs) -> list:
    # add everything before the loop starts, so the first schedule() sees the whole queue
    streams = [engine.async_add_req_and_stream_response(r) for r in reqs]
    await engine._check_and_start_background_loop()

    async def drain(stream):
        last = None
        async for out in stream:
            last = out
        return last

    try:
        return await asyncio.wait_for(asyncio.gather(*(drain(s) for s in streams)), timeout=30)
    finally:
        engine.close()


def test_engine_backend_runs_the_policy_in_the_busy_loop() -> None:
    WAVES.clear()
    od = od_config("edf")
    engine_cls = DiffusionEngine.resolve_engine_class(od)  # the dotted path a deploy config names
    assert engine_cls is RLDiffusionEngine
    engine = engine_cls(od)  # not make_engine(): that also runs a warmup request through a real model
    assert isinstance(engine.scheduler, RLRequestScheduler) and engine.scheduler.policy.name == "edf"
    reqs = [mk_req("A", slo_ms=9000), mk_req("B", slo_ms=3000), mk_req("C", 1024, slo_ms=1000),
            mk_req("D", slo_ms=5000)]
    outs = asyncio.run(serve(engine, reqs))
    assert [o.output for o in outs] == ["A", "B", "C", "D"]
    assert WAVES == [["C"], ["B", "D", "A"]]  # vLLM-Omni's FIFO: [A, B], [C], [D]
    assert engine.scheduler.fallbacks == 0 and not engine.scheduler.rl_state.records


def test_step_execution_gets_the_step_scheduler() -> None:
    WAVES.clear()
    engine = RLDiffusionEngine(od_config("sjf", step=True))
    assert isinstance(engine.scheduler, RLStepScheduler)
    reqs = [mk_req("A", steps=3), mk_req("B", 1024, steps=2), mk_req("C", steps=2)]
    outs = asyncio.run(serve(engine, reqs))
    assert [o.output for o in outs] == ["A", "B", "C"]
    assert WAVES[:3] == [["A", "C"], ["A", "C"], ["A"]]  # C joins A past B (StepScheduler: B blocks C)
    assert engine.scheduler.fallbacks == 0


def test_extras_may_be_a_fieldinfo_then_env_vars_apply(monkeypatch) -> None:
    od = OmniDiffusionConfig(max_num_seqs=2)
    assert not isinstance(od.extras, dict)  # vLLM-Omni 0.30: pydantic FieldInfo default
    monkeypatch.setenv("RLSCHED_POLICY", "sjf")
    monkeypatch.setenv("RLSCHED_PROFILE", "flux1-dev-h100")
    sched = make_scheduler(od)
    assert isinstance(sched, RLRequestScheduler)
    assert (sched.settings.policy, sched.settings.profile) == ("sjf", "flux1-dev-h100")
    monkeypatch.delenv("RLSCHED_POLICY")
    assert PluginConfig.from_od_config(od).policy == "fifo"


def test_deploy_yaml_reaches_the_engine(tmp_path, capsys) -> None:
    path = tmp_path / "deploy.yaml"
    assert rlsched_main(["deploy", "--policy", "sjf", "--max-num-seqs", "3", "--out", str(path)]) == 0
    stage = load_deploy_config(path).stages[0]  # vLLM-Omni's own loader
    assert stage.max_num_seqs == 3 and stage.step_execution is False
    from vllm_omni.config.omni_config import (
        extract_diffusion_stage_config_kwargs,
        normalize_and_validate_diffusion_engine_ingress_kwargs,
    )
    kwargs = extract_diffusion_stage_config_kwargs(
        {**stage.engine_extras, "max_num_seqs": stage.max_num_seqs, "step_execution": stage.step_execution},
        stage_id=0)
    _check_config(OmniDiffusionConfig(**kwargs))
    # the --stage-overrides form printed for generic single-stage models
    overrides = capsys.readouterr().out.split("--stage-overrides '")[1].split("'")[0]
    import json
    stage0 = json.loads(overrides)["0"]
    kwargs = normalize_and_validate_diffusion_engine_ingress_kwargs(stage0, stage_id=0)
    _check_config(OmniDiffusionConfig.from_kwargs(**kwargs))


def _check_config(od: OmniDiffusionConfig) -> None:
    assert DiffusionEngine.resolve_engine_class(od) is RLDiffusionEngine
    assert od.max_num_seqs == 3 and od.request_batch_max_wait_ms == 0
    settings = PluginConfig.from_od_config(od)
    assert (settings.policy, settings.profile) == ("sjf", "qwen-image-h200-vllm-omni")
