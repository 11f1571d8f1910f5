"""Where users name the CPU executor: ``distributed_executor_backend:
rlsched.integrations.vllm_omni.cost_executor.CostProfileExecutor`` (a vLLM setting takes a dotted path, so this
path stays). The executor lives with the other measuring tools in ``harness.cost_executor``."""

from rlsched.integrations.vllm_omni.harness.cost_executor import EXECUTED, LOG_ENV, CostProfileExecutor

__all__ = ["EXECUTED", "LOG_ENV", "CostProfileExecutor"]
