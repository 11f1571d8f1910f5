"""``router.install`` against vLLM-Omni 0.30's real ``StageRuntime`` (run by test_router.py in its own process).

``vllm_omni.engine.stage_runtime`` imports the model registry, which imports torchvision; this CPU tier
has none, so the test runs this script with ``tests/e2e/stubs`` on ``PYTHONPATH`` (import-only
stand-ins, as the e2e tier's server does) in a process of its own, keeping them out of the other
tests. Prints one JSON object of findings; the test asserts on them.
"""

from __future__ import annotations

import json
import logging
import os
from types import SimpleNamespace
from typing import Any

from vllm_omni.engine.stage_runtime import StageRuntime

from rlsched.integrations.vllm_omni import router

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
                          parallel_config=SimpleNamespace(sequence_parallel_size=1))
    return SimpleNamespace(stage_idx=0, stage_id=0,
                           replicas=[SimpleNamespace(stage_cfg=cfg, metadata=SimpleNamespace(stage_type=stage_type))])


def assemble(extras: Any) -> str:
    runtime = SimpleNamespace(_model="m", _log_stats=False)
    pool = StageRuntime._assemble_stage_pools(runtime, [plan(extras)], {0: [Client(), Client()]})[0]
    name = type(pool).__name__
    return f"{name}:{pool.router.name}" if name == "RouterStagePool" else name


def main() -> None:
    log = Records()
    logging.getLogger(router.__name__).addHandler(log)
    os.environ.pop(router.ENV_VAR, None)
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
    os.environ[router.ENV_VAR] = "rlsched"
    out["env"] = assemble({"rlsched": {"profile": PROFILE}})
    router._install = lambda: (_ for _ in ()).throw(RuntimeError("broken"))  # type: ignore[assignment]
    out["raising_install"] = router.install()
    out["log"] = log.lines
    print("PROBE " + json.dumps(out))


if __name__ == "__main__":
    main()
