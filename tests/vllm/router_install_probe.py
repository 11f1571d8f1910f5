"""``router.install`` against vLLM-Omni 0.30's real ``StageRuntime`` (run by test_router.py in its own process).

``vllm_omni.engine.stage_runtime`` imports the model registry, which imports torchvision; this CPU tier
has none, so the test runs this script with ``cpu_server.STUBS`` on ``PYTHONPATH`` (import-only
stand-ins, as ``rlsched serve-cpu``'s server does) in a process of its own, keeping them out of the other
tests. Prints one JSON object of findings; the test asserts on them.
"""

from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace
from typing import Any

from vllm_omni.engine.stage_runtime import StageRuntime

from rlsched.integrations.vllm_omni import router, routing

PROFILE = "qwen-image-h200-vllm-omni"


class Client:
    stage_type = "diffusion"
    final_output = True

    def shutdown(self) -> None: ...


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def plan(extras: Any, stage_type: str = "diffusion") -> Any:
    cfg = SimpleNamespace(diffusion_config=SimpleNamespace(extras=extras, step_execution=False),
                          scheduler_config=SimpleNamespace(max_num_seqs=3),  # where vLLM-Omni 0.30 moves it
                          parallel_config=SimpleNamespace(sequence_parallel_size=1))
    return SimpleNamespace(stage_idx=0, stage_id=0,
                           replicas=[SimpleNamespace(stage_cfg=cfg, metadata=SimpleNamespace(stage_type=stage_type))])


def assemble(extras: Any) -> str:
    pool = build(extras)
    name = type(pool).__name__
    return f"{name}:{pool.router.name}" if name == "RouterStagePool" else name


def build(extras: Any) -> Any:
    runtime = SimpleNamespace(_model="m", _log_stats=False)
    return StageRuntime._assemble_stage_pools(runtime, [plan(extras)], {0: [Client(), Client()]})[0]


def central() -> dict[str, Any]:
    """A central stage's pool, and the orchestrator hook: a real Orchestrator built over it attaches itself."""
    import asyncio

    import janus
    from vllm_omni.engine.orchestrator import Orchestrator, OrchestratorBase

    pool = build({"rlsched": {"profile": PROFILE}, "rlsched_router": {"router": "central", "policy": "edf"}})

    async def attach() -> bool:
        orch = Orchestrator(*(janus.Queue().async_q for _ in range(3)), [pool])
        return pool._orchestrator is orch

    init = OrchestratorBase.__init__
    return {"pool": type(pool).__name__, "max_num_seqs": pool._ledger.config.max_num_seqs,
            "attached": asyncio.run(attach()),
            "hooked_once": getattr(init, "__wrapped__", None) is not None and not hasattr(init.__wrapped__,
                                                                                          "__wrapped__")}


def generic_replicas() -> dict[str, Any]:
    """A generic diffusion model's stage through vLLM-Omni's own resolver, with install() in place: its
    ``runtime_config`` (num_replicas, devices) for each set of ``--stage-overrides``."""
    import tempfile
    from pathlib import Path

    from vllm_omni.config.resolver import resolve_omni_config

    from rlsched.integrations.vllm_omni import generic_replicas as gr
    from rlsched.integrations.vllm_omni.cpu_server import build_tiny_model

    model = str(build_tiny_model(Path(tempfile.mkdtemp()) / "model"))
    ours = {"engine_backend": gr.ENGINE_BACKEND, "extras": {"rlsched": {"profile": PROFILE}}}

    def runtime(stage: dict[str, Any]) -> list[Any]:
        res = resolve_omni_config(model, trust_remote_code=False, deploy_config_path=None, cli_overrides={},
                                  stage_overrides={"0": stage}, strategy_config_path=None)
        (cfg,) = res.stage_configs
        return [cfg.runtime_config.num_replicas, cfg.runtime_config.devices]

    return {"rlsched_2": runtime({**ours, "num_replicas": 2, "devices": "0,1"}),
            "rlsched_1": runtime({**ours, "devices": "0"}),
            "not_rlsched_2": runtime({"num_replicas": 2, "devices": "0,1"}),  # vLLM-Omni's own: dropped
            "wrapped_once": getattr(_typed_builder(), "__wrapped__", None) is not None
            and not hasattr(_typed_builder().__wrapped__, "__wrapped__"), "again": gr.install()}


def _typed_builder() -> Any:
    from vllm_omni.config.config_factory import StageConfigFactory

    return StageConfigFactory.__dict__["create_typed_default_diffusion"].__func__


def main() -> None:
    log = Records()
    logging.getLogger(router.__name__).addHandler(log)
    os.environ.pop(routing.ENV_VAR, None)
    original = StageRuntime._assemble_stage_pools
    out: dict[str, Any] = {}
    # a wrong version first: nothing is patched
    real_version = router._vllm_omni_version
    router._vllm_omni_version = lambda: "0.31.0"  # type: ignore[assignment]
    out["wrong_version"] = router.install()
    out["wrong_version_patched"] = StageRuntime._assemble_stage_pools is not original
    router._vllm_omni_version = real_version  # type: ignore[assignment]
    out["version"] = real_version()
    out["first"], out["second"] = router.install(), router.install()
    wrapped = StageRuntime._assemble_stage_pools
    out["wrapped_once"] = getattr(wrapped, "__wrapped__", None) is original
    asked = {"rlsched": {"profile": PROFILE}, "rlsched_router": {"router": "least-work"}}
    out["asked"] = assemble(asked)
    out["not_asked"] = assemble({"rlsched": {"profile": PROFILE}})
    out["no_extras"] = assemble(None)
    out["wrong_setting"] = assemble({"rlsched_router": {"router": "no-such-router"}})
    os.environ[routing.ENV_VAR] = "rlsched"
    out["env"] = assemble({"rlsched": {"profile": PROFILE}})
    out["generic_replicas"] = generic_replicas()
    os.environ.pop(routing.ENV_VAR, None)
    out["central"] = central()
    router._install = lambda: (_ for _ in ()).throw(RuntimeError("broken"))  # type: ignore[assignment]
    out["raising_install"] = router.install()
    out["log"] = log.lines
    print("PROBE " + json.dumps(out))


if __name__ == "__main__":
    main()
