"""``rlsched deploy``: write the vLLM-Omni deploy config that runs a policy inside the engine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from rlsched.commands.args import command
from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import EXTRAS_KEY, PluginConfig
from rlsched.policies import make_policy
from rlsched.sim.cost import load_profile
from rlsched.sim.request import PRIORITY_CLASSES

ENGINE_BACKEND = "rlsched.integrations.vllm_omni.RLDiffusionEngine"


@command("deploy", "Write a vLLM-Omni deploy config that runs a policy inside DiffusionEngine.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True,
                   help="policy spec: fifo, edf, sjf, seed-*, static:FILE, rl:PATH, pick:PATH[;static=FILE]")
    p.add_argument("--profile", default="qwen-image-h200", help="cost profile (envs/profiles/NAME.yaml) or path")
    p.add_argument("--model", default="", help="model entry of the profile (default: its first)")
    p.add_argument("--out", default="deploy.yaml", help="where to write the deploy config")
    p.add_argument("--stage-id", type=int, default=0, help="the diffusion stage of the pipeline")
    p.add_argument("--max-num-seqs", type=int, default=4, help="largest batch (vLLM-Omni max_num_seqs)")
    p.add_argument("--max-wait-ms", type=float, default=0.0,
                   help="request_batch_max_wait_ms: engine admission wait before each wave (0: the policy "
                        "alone decides, as in the simulator)")
    p.add_argument("--step-execution", action="store_true", help="step mode (per-step batching, preemption)")
    p.add_argument("--default-priority", default="batch", choices=PRIORITY_CLASSES)
    p.add_argument("--default-slo-scale", type=float, help="SLO scale of the default class")
    p.add_argument("--decision-budget-ms", type=float, default=5.0,
                   help="a slower decision is discarded and FIFO schedules that call")
    p.add_argument("--decision-deadline-ms", type=float, default=100.0,
                   help="schedule() never waits longer for a decision; a policy that overran is not called again")
    p.add_argument("--metrics-port", type=int, default=0, help="1..65535: serve rlsched_* metrics on this port")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="plugin seconds per wall second (>1 only for time-scaled replays with "
                        "CostProfileExecutor; 1 when serving)")
    p.add_argument("--base-config", help="inherit a shipped deploy YAML (vLLM-Omni base_config)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.metrics_port <= 65535:
        raise ConfigError("--metrics-port", f"must be a TCP port 1..65535 (0: off), not {args.metrics_port}")
    settings = PluginConfig(
        policy=args.policy, profile=args.profile, model=args.model, default_priority=args.default_priority,
        default_slo_scale=args.default_slo_scale, decision_budget_ms=args.decision_budget_ms,
        decision_deadline_ms=args.decision_deadline_ms, metrics_port=args.metrics_port,
        time_scale=args.time_scale)
    _check(settings)
    doc = deploy_config(settings, args.stage_id, args.max_num_seqs, args.max_wait_ms, args.step_execution,
                        args.base_config)
    _write(Path(args.out), _HEADER + yaml.safe_dump(doc, sort_keys=False))
    stage = {k: v for k, v in doc["stages"][0].items() if k != "stage_id"}
    overrides = json.dumps({str(args.stage_id): stage}, separators=(",", ":"))
    print(f"wrote {args.out}\n\nregistered pipelines (a deploy YAML applies):\n"
          f"  vllm serve MODEL --omni --deploy-config {args.out}\n"
          f"generic single-stage diffusion models, e.g. Qwen-Image (vLLM-Omni ignores a deploy YAML there):\n"
          f"  vllm serve MODEL --omni --stage-overrides '{overrides}'")
    return 0


def deploy_config(settings: PluginConfig, stage_id: int = 0, max_num_seqs: int = 4, max_wait_ms: float = 0.0,
                  step_execution: bool = False, base_config: str | None = None) -> dict[str, Any]:
    """The deploy YAML as a dict: one stage with ``engine_backend`` and ``extras``."""
    if max_num_seqs < 1:
        raise ConfigError("--max-num-seqs", "must be >= 1")
    if stage_id < 0:
        raise ConfigError("--stage-id", f"must be >= 0, not {stage_id}")
    if not max_wait_ms >= 0:
        raise ConfigError("--max-wait-ms", "must be >= 0")
    # policy and profile are always spelled out, even at their defaults, so the file reads on its own
    section = {"policy": settings.policy, "profile": settings.profile, **settings.to_extras()[EXTRAS_KEY]}
    stage = {"stage_id": stage_id, "max_num_seqs": max_num_seqs, "step_execution": step_execution,
             "request_batch_max_wait_ms": max_wait_ms, "engine_backend": ENGINE_BACKEND,
             "extras": {EXTRAS_KEY: section}}
    doc: dict[str, Any] = {"base_config": base_config} if base_config else {}
    doc["stages"] = [stage]
    return doc


def _check(settings: PluginConfig) -> None:
    """Fail here, not at engine start: the policy must build (a checkpoint is fully validated
    when it loads) and the profile must load."""
    cost = load_profile(settings.profile)
    if settings.model:
        cost.model(settings.model)
    make_policy(settings.policy)


def _write(out: Path, text: str) -> None:
    """Write the config; a missing folder is an error naming it (a typo should not create folders)."""
    if not out.parent.is_dir():
        raise ConfigError("--out", f"folder {out.parent} does not exist")
    if out.is_dir():
        raise ConfigError("--out", f"{out} is a folder; name the file to write")
    try:
        out.write_text(text)
    except OSError as exc:
        raise ConfigError("--out", f"cannot write {out}: {exc.strerror}") from None


_HEADER = ("# vLLM-Omni deploy config written by `rlsched deploy`: the diffusion stage runs an\n"
           "# rlsched policy inside DiffusionEngine (engine_backend) with the settings under extras.rlsched.\n")
