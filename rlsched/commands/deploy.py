"""``rlsched deploy``: write the vLLM-Omni deploy config that runs a policy inside the engine."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import yaml

from rlsched import bounds
from rlsched.argtypes import flag
from rlsched.commands.args import add_json, check_out_file, command, report, write_atomic
from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import DECISION_THREADS, EXTRAS_KEY, PluginConfig, check_budget
from rlsched.integrations.vllm_omni.cpu_server import EXECUTOR
from rlsched.integrations.vllm_omni.profiles import nvml_name, stage_profile
from rlsched.integrations.vllm_omni.routing import CENTRAL, RouterConfig
from rlsched.integrations.vllm_omni.routing import EXTRAS_KEY as ROUTER_KEY
from rlsched.policies import make_policy
from rlsched.policies.base import portable_spec
from rlsched.profiling.derive import AUTO
from rlsched.routing.spec import StageSpec
from rlsched.sim.cost import CostModel, portable_profile
from rlsched.sim.request import PRIORITY_CLASSES
from rlsched.sim.scenario import load_scenario

ENGINE_BACKEND = "rlsched.integrations.vllm_omni.RLDiffusionEngine"
CENTRAL_WAIT_MS = 10.0
"""``--router central``'s default admission wait: the central pool sends a batch's requests one after
another, and a replica that started on the first would split the batch. vLLM-Omni ends the wait once
no request came for min(50 ms, wait / 5) = 2 ms, or the batch is full: a few ms per wave."""


@command("deploy", "Write a vLLM-Omni deploy config that runs a policy inside DiffusionEngine.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True,
                   help="policy spec: fifo, edf, sjf, seed-*, static:FILE, rl:PATH, pick:PATH[;static=FILE]")
    p.add_argument("--profile", default="qwen-image-h200-vllm-omni",
                   help="cost profile (envs/profiles/NAME.yaml) or path; auto: derived by the plugin at start-up from "
                        "the served model and the GPU (--gpu, else NVML; docs/derive.md)")
    p.add_argument("--gpu", default="",
                   help="with --profile auto: the GPU to derive for, a name (L40S) or tflops=...,bandwidth_gbs=...,"
                        "memory_gb=... (default: the name NVML reports on the serving machine)")
    p.add_argument("--served-model", default="",
                   help="with --profile auto: the model folder `vllm serve` will serve, to derive and check the "
                        "profile here as the plugin will")
    p.add_argument("--model", default="", help="model entry of the profile (default: its first)")
    p.add_argument("--out", default="deploy.yaml", help="where to write the deploy config")
    p.add_argument("--stage-id", type=flag(bounds.STAGE_ID), default=0,
                   help="the diffusion stage of the pipeline: one of --base-config's stages (without it only 0, "
                        "the one stage of a generic diffusion model, can be checked and is accepted)")
    p.add_argument("--max-num-seqs", type=flag(bounds.NUM_SEQS), default=4,
                   help="largest batch (vLLM-Omni max_num_seqs)")
    p.add_argument("--max-wait-ms", "--request-batch-max-wait-ms", type=flag(bounds.MILLIS), default=None,
                   help=f"request_batch_max_wait_ms: engine admission wait before each wave (default 0; with "
                        f"--router central {CENTRAL_WAIT_MS:g}: a central batch reaches its replica one request "
                        "after another, and the replica starts once none came for a fifth of it; 0: the policy "
                        "alone decides, as in the simulator)")
    p.add_argument("--step-execution", action="store_true", help="step mode (per-step batching, preemption)")
    p.add_argument("--classes", metavar="SCENARIO",
                   help="serve the scenario's own classes: a request names one in extra_params.priority (writes "
                        "extras.rlsched.classes, each class's slo_scale, weight, tier and quota)")
    p.add_argument("--default-priority", metavar="CLASS",
                   help="class of a request that names none (or an unknown one); default: batch, with --classes "
                        "the scenario's most common class")
    p.add_argument("--default-slo-scale", type=flag(bounds.SLO_SCALE), help="SLO scale of the default class")
    p.add_argument("--decision-budget-ms", type=flag(bounds.DECISION_MS), default=5.0,
                   help="a slower decision is discarded and FIFO schedules that call (<= --decision-deadline-ms)")
    p.add_argument("--decision-deadline-ms", type=flag(bounds.DECISION_MS), default=100.0,
                   help="a decision is interrupted past it: FIFO serves, backs off, then the policy decides again")
    p.add_argument("--decision-thread", default="auto", choices=DECISION_THREADS,
                   help="where decide() runs: engine (no thread hand-off; a watchdog interrupts a Python "
                        "decision past the deadline), worker (bounds any decision, sleeps and I/O included, at "
                        "two thread wake-ups a call), auto (default: engine for rlsched's own policies, worker "
                        "for any other)")
    p.add_argument("--metrics-port", type=flag(bounds.PORT), default=0,
                   help="1..65535: serve rlsched_* metrics on this port (with --replicas R: each replica on the "
                        "first free one of this port .. +R-1, labelled rlsched_replica_info{devices})")
    p.add_argument("--time-scale", type=flag(bounds.PLUGIN_TIME_SCALE), default=1.0,
                   help="plugin seconds per wall second (>1 only for time-scaled replays with "
                        "CostProfileExecutor; 1 when serving)")
    p.add_argument("--replicas", type=flag(bounds.REPLICAS), default=1,
                   help="runtime num_replicas: copies of the diffusion stage, each on --sp of --devices")
    p.add_argument("--devices", help="GPUs of the stage, comma-separated (R x D of them; needed with --replicas > 1 "
                                     "or --sp > 1)")
    p.add_argument("--sp", type=flag(bounds.SP_DEGREE), default=1, help="sequence-parallel degree of each replica")
    p.add_argument("--cfg-parallel", type=flag(bounds.CFG_PARALLEL), default=1,
                   help="CFG-parallel degree of each replica (parallel_config.cfg_parallel_size): 2 runs a CFG "
                        "request's two guidance branches on two groups of --sp GPUs (R x SP x 2 --devices)")
    p.add_argument("--router", help="route requests across replicas with this rlsched router (rlsched, least-work, "
                                    "affinity ...; extras.rlsched_router): vLLM-Omni round-robins without it. "
                                    "central: late binding, --policy picks batches from a central queue for "
                                    "free replicas, which run them FIFO. --policy POLICY@ROUTER says the same")
    p.add_argument("--router-budget-ms", type=flag(bounds.DECISION_MS), default=2.0,
                   help="a slower routing (central: batch) decision is discarded and vLLM-Omni's round-robin "
                        "routes that request (central: every parked one)")
    p.add_argument("--router-deadline-ms", type=flag(bounds.DECISION_MS), default=None,
                   help="the orchestrator waits no longer for one routing (central: batch) decision; it is "
                        f"interrupted (default {RouterConfig().deadline_ms:g}, or --router-budget-ms when higher; "
                        ">= --router-budget-ms)")
    p.add_argument("--cpu", action="store_true",
                   help=f"no GPU: the stage runs {EXECUTOR.rsplit('.', 1)[1]} (distributed_executor_backend: "
                        "sleeps the profile's batch time, returns gray images) and `rlsched serve-cpu --config "
                        "OUT` serves it with a tiny model (docs/deploy.md, 'Try it without a GPU')")
    p.add_argument("--base-config",
                   help="inherit a deploy YAML (vLLM-Omni base_config): a path, or the name of one shipped with "
                        "vLLM-Omni when it is installed here; it must exist and parse, and hold --stage-id")
    add_json(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError("--out", f"{out} is a folder; name the file to write")
    if not out.parent.is_dir():  # a typo should not create folders
        raise ConfigError("--out", f"folder {out.parent} does not exist")
    check_out_file(out, "--out")
    policy, router = _split_router(portable_spec(args.policy), args.router)
    if args.profile != AUTO:
        args.profile = portable_profile(args.profile)  # the server may start in another folder
    elif not args.served_model:
        raise ConfigError("--served-model", "--profile auto derives the profile of the served model: name its "
                                            "folder so that deploy can check what the plugin will derive")
    elif args.gpu == "" and nvml_name(PluginConfig()) is None:
        raise ConfigError("--gpu", "--profile auto: NVML reports no GPU here; name the serving GPU (--gpu L40S, "
                                   "or --gpu tflops=...,bandwidth_gbs=...,memory_gb=...)")
    central = policy if router == CENTRAL else ""
    if central:  # late binding: the policy picks batches centrally; each replica runs them FIFO (as POLICY@central)
        make_policy(central)
        policy = "fifo"
    check_budget(args.decision_budget_ms, args.decision_deadline_ms, "--decision-budget-ms", "--decision-deadline-ms")
    router_deadline_ms = _router_deadline(args)
    settings = PluginConfig(
        policy=policy, profile=args.profile, model=args.model, **_classes(args.classes, args.default_priority),
        default_slo_scale=args.default_slo_scale, decision_budget_ms=args.decision_budget_ms,
        decision_deadline_ms=args.decision_deadline_ms, decision_thread=args.decision_thread,
        metrics_port=args.metrics_port,
        metrics_ports=args.replicas if args.metrics_port else 1, time_scale=args.time_scale,
        late_binding=bool(central), gpu=args.gpu)
    cost = _check(settings, args.served_model)
    base = None
    if args.base_config:
        base, stages = resolve_base_config(args.base_config, out)
        if args.stage_id not in stages:
            raise ConfigError("--stage-id", f"{args.stage_id} is not a stage of --base-config {args.base_config} "
                                            f"(its stages: {', '.join(map(str, stages)) or 'none'}); vLLM-Omni would "
                                            "drop this stage and no plugin would run")
    elif args.stage_id != 0:
        raise ConfigError("--stage-id", f"{args.stage_id} without --base-config: a generic diffusion model has "
                                        "the one stage 0, and for a pipeline only its deploy YAML says which stages "
                                        "exist (a stage it lacks is dropped, no plugin runs); give --base-config")
    layout = replica_keys(args.replicas, args.sp, args.devices, cost, args.cfg_parallel)
    routing = RouterConfig(router=router, budget_ms=args.router_budget_ms, deadline_ms=router_deadline_ms,
                           policy=central) if router else None
    wait = args.max_wait_ms if args.max_wait_ms is not None else CENTRAL_WAIT_MS if central else 0.0
    doc = deploy_config(settings, args.stage_id, args.max_num_seqs, wait, args.step_execution, base,
                        layout=layout, router=routing, cpu=args.cpu)
    _write(out, _HEADER + yaml.safe_dump(doc, sort_keys=False))
    stage = {k: v for k, v in doc["stages"][0].items() if k != "stage_id"}
    overrides = json.dumps({str(args.stage_id): stage}, separators=(",", ":"))
    serve_cpu = f"rlsched serve-cpu --config {out.resolve()}"
    report(args, {"deploy_config": str(args.out), "stage_overrides": json.loads(overrides),
                  "executor": EXECUTOR if args.cpu else None, "serve_cpu": serve_cpu if args.cpu else None},
           f"wrote {args.out}\n\n" + (_CPU_LINES.format(executor=EXECUTOR, serve_cpu=serve_cpu) if args.cpu else
                                      f"registered pipelines (a deploy YAML applies):\n"
                                      f"  vllm serve MODEL --omni --deploy-config {args.out}\n")
           + "generic single-stage diffusion models, e.g. Qwen-Image (vLLM-Omni ignores a deploy YAML there):\n"
           f"  vllm serve MODEL --omni --stage-overrides '{overrides}'"
           + ("" if args.cpu else "\nno GPU here? add --cpu, then `rlsched serve-cpu --config OUT` (docs/deploy.md)"))
    return 0


_CPU_LINES = ("no GPU (--cpu): distributed_executor_backend: {executor}\n"
              "  stands in for the GPU worker at the profile's batch times; serve it on this machine with a tiny "
              "model:\n  {serve_cpu}\n")


def deploy_config(settings: PluginConfig, stage_id: int = 0, max_num_seqs: int = 4, max_wait_ms: float = 0.0,
                  step_execution: bool = False, base_config: str | None = None, *,
                  layout: dict[str, Any] | None = None, router: RouterConfig | None = None,
                  cpu: bool = False) -> dict[str, Any]:
    """The deploy YAML as a dict: one stage with ``engine_backend`` and ``extras``; ``layout``'s stage keys
    (``replica_keys``) and the router's ``extras.rlsched_router`` when given, with the replicas publishing
    their scheduler state to it (``extras.rlsched.publish_state``); ``cpu``: the executor that stands in for
    the GPU worker (``distributed_executor_backend``, what ``rlsched serve-cpu`` serves)."""
    if max_num_seqs < 1:
        raise ConfigError("--max-num-seqs", "must be >= 1")
    if stage_id < 0:
        raise ConfigError("--stage-id", f"must be >= 0, not {stage_id}")
    if not max_wait_ms >= 0:
        raise ConfigError("--max-wait-ms", "must be >= 0")
    if router is not None:  # the router reads each replica's published state (router_views)
        settings = settings.model_copy(update={"publish_state": True})
    # policy and profile are always spelled out, even at their defaults, so the file reads on its own
    section = {"policy": settings.policy, "profile": settings.profile, **settings.to_extras()[EXTRAS_KEY]}
    stage = {"stage_id": stage_id, "max_num_seqs": max_num_seqs, "step_execution": step_execution,
             "request_batch_max_wait_ms": max_wait_ms, "engine_backend": ENGINE_BACKEND,
             **(layout or {}), **({"distributed_executor_backend": EXECUTOR} if cpu else {}),
             "extras": {EXTRAS_KEY: section}}
    if router is not None:
        stage["extras"][ROUTER_KEY] = {"router": router.router, "budget_ms": router.budget_ms}
        if router.deadline_ms != RouterConfig().deadline_ms:
            stage["extras"][ROUTER_KEY]["deadline_ms"] = router.deadline_ms
        if router.central:
            stage["extras"][ROUTER_KEY]["policy"] = router.policy or "fifo"
    doc: dict[str, Any] = {"base_config": base_config} if base_config else {}
    doc["stages"] = [stage]
    return doc


def replica_keys(replicas: int, degree: int, devices: str | None, profile: Any, cfg: int = 1) -> dict[str, Any]:
    """The stage keys of ``replicas`` replicas of ``degree`` × ``cfg`` GPUs on ``devices``
    (``planning.stage_yaml``'s spelling); empty for one replica on one GPU without ``devices``
    (vLLM-Omni's defaults)."""
    if replicas == 1 and degree == 1 and cfg == 1 and not devices:
        return {}
    width, by = degree * cfg, f"--sp {degree}" + (f" x --cfg-parallel {cfg}" if cfg > 1 else "")
    if not devices:
        raise ConfigError("--devices", f"name the stage's {replicas * width} GPUs (--replicas {replicas} x {by}), "
                                       f"e.g. {','.join(map(str, range(replicas * width)))}")
    ids = [d.strip() for d in devices.split(",")]
    if not all(d.isdigit() for d in ids) or len(set(ids)) != len(ids):
        raise ConfigError("--devices", f"{devices!r}: expected distinct GPU indices, comma-separated")
    if len(ids) != replicas * width:
        raise ConfigError("--devices", f"{len(ids)} GPUs for --replicas {replicas} x {by} = {replicas * width}")
    from rlsched.planning import Layout, stage_yaml
    from rlsched.sim.layout import at_layout

    for flag_name, n, c in (("--sp", degree, 1), ("--cfg-parallel", cfg, cfg)):
        try:  # the profile must model the layout, as the plugin will (it was written regardless)
            at_layout(profile, degree, c)
        except ConfigError as exc:
            raise ConfigError(flag_name, f"{n} (--replicas {replicas} x {by}): profile {profile.name!r} cannot "
                                         f"model this layout ({exc}); use a profile with an "
                                         f"'{'sp' if c == 1 else 'cfg_parallel'}' block") from None
    try:
        keys = yaml.safe_load(stage_yaml(Layout(replicas, degree, cfg), len(ids), profile))
    except ConfigError as exc:
        raise ConfigError("--sp", f"{degree}: {exc}") from None
    keys["devices"] = ",".join(ids)
    if width == 1:
        del keys["parallel_config"]
    return keys


def _classes(scenario: str | None, default: str | None) -> dict[str, Any]:
    """``PluginConfig``'s ``classes`` and ``default_priority`` for ``--classes`` and ``--default-priority``: a
    scenario's own classes with their resolved weights and tiers, and their quotas with the scenario's quota window
    (the shipped names: none to write)."""
    names = list(load_scenario(scenario).classes) if scenario else list(PRIORITY_CLASSES)
    if default is not None and default not in names:
        raise ConfigError("--default-priority", f"{default!r} is not a class of {scenario or 'the shipped ones'} "
                                                f"({', '.join(names)})")
    if scenario is None:
        return {"default_priority": default or "batch"}
    sc = load_scenario(scenario)
    common = max(sc.classes, key=lambda c: sc.classes[c].share)
    classes = {c: {"slo_scale": sc.classes[c].slo_scale, "weight": info.weight, "tier": info.tier}
               for c, info in sc.class_table.items()}
    for c, quota in sc.serving.quotas:
        classes[c]["quota"] = quota
    window = {"quota_window_s": sc.serving.quota_window_s} if sc.serving.quotas else {}
    return {"classes": classes, "default_priority": default or common, **window}


def _router_deadline(args: argparse.Namespace) -> float:
    """``--router-deadline-ms``, by default the router's own deadline or ``--router-budget-ms`` when that is
    higher (a budget is never above its deadline: ``check_budget``)."""
    if args.router_deadline_ms is None:
        return max(RouterConfig().deadline_ms, args.router_budget_ms)
    check_budget(args.router_budget_ms, args.router_deadline_ms, "--router-budget-ms", "--router-deadline-ms")
    return args.router_deadline_ms


def _split_router(policy: str, router: str | None) -> tuple[str, str | None]:
    """``--policy POLICY@ROUTER`` or ``--policy POLICY --router ROUTER`` -> (policy, router or None)."""
    if "@" not in policy:
        return policy, router
    stage = StageSpec.parse(policy)
    policy, routed = stage.policy, stage.router
    if router and router != routed:
        raise ConfigError("--router", f"{router!r} and --policy's @{routed} disagree")
    return policy, routed


def _check(settings: PluginConfig, served_model: str = "") -> CostModel:
    """Fail here, not at engine start: the policy must build (a checkpoint is fully validated
    when it loads) and the profile must load (``auto``: derive for ``served_model``, as the plugin will)."""
    cost = stage_profile(settings, served_model)
    if settings.model:
        cost.model(settings.model)
    settings.check_defaults(cost)
    make_policy(settings.policy)
    return cost


def _write(out: Path, text: str) -> None:
    """Write the config (checked by ``run`` first) whole or not at all."""
    try:
        write_atomic(out, text, "--out")
    except OSError as exc:
        raise ConfigError("--out", f"cannot write {out}: {exc.strerror}") from None


def vllm_omni_deploy_dir() -> Path | None:
    """vLLM-Omni's shipped deploy YAMLs (``vllm_omni/deploy``) when it is installed here; found
    without importing it (that would import vLLM and torch)."""
    try:
        spec = importlib.util.find_spec("vllm_omni")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / "deploy"
        if folder.is_dir():
            return folder
    return None


def resolve_base_config(name: str, out: Path) -> tuple[str, list[int]]:
    """What to write as ``base_config`` and the stage ids of the inherited config.

    vLLM-Omni reads ``base_config`` relative to the deploy YAML's own folder (and follows the
    base's own ``base_config`` the same way), so ``name`` is looked up there first, as written;
    then as a path from here, and as one of vLLM-Omni's shipped files (both written as absolute
    paths, which vLLM-Omni reads as they are). One that is found nowhere, does not parse, or
    holds no ``stages`` list with integer ``stage_id``s is a ``ConfigError`` naming ``--base-config``."""
    beside, here = out.parent / name, Path(name)
    shipped = vllm_omni_deploy_dir()
    if beside.is_file():
        written, path = name, beside
    elif here.is_file():
        written, path = os.path.abspath(here), here
    elif shipped is not None and (shipped / name).is_file():
        written, path = str(shipped / name), shipped / name
    else:
        looked = [str(beside)] + ([str(here)] if here != beside else []) + (
            [str(shipped / name)] if shipped is not None else ["vLLM-Omni's deploy folder (not installed here)"])
        raise ConfigError("--base-config", f"{name}: no such file (looked in: {', '.join(looked)}); vLLM-Omni "
                                           "reads base_config relative to the deploy YAML's folder")
    return written, _stage_ids(path, set())


def _stage_ids(path: Path, seen: set[Path]) -> list[int]:
    """Stage ids of a deploy YAML and of the ``base_config`` chain under it (as vLLM-Omni merges them)."""
    real = path.resolve()
    if real in seen:
        raise ConfigError("--base-config", f"{path}: base_config loops back to itself")
    seen.add(real)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError("--base-config", f"{path}: cannot read it as YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(doc, dict):
        raise ConfigError("--base-config", f"{path}: expected a mapping with 'stages', got {type(doc).__name__}")
    stages = doc.get("stages", [])
    if not isinstance(stages, list) or not all(isinstance(st, dict) and isinstance(st.get("stage_id"), int)
                                               and not isinstance(st.get("stage_id"), bool) for st in stages):
        raise ConfigError("--base-config", f"{path}: 'stages' must be a list of mappings with an integer stage_id")
    ids = [st["stage_id"] for st in stages]
    parent = doc.get("base_config")
    if parent is not None:
        if not isinstance(parent, str) or not (path.parent / parent).is_file():
            raise ConfigError("--base-config", f"{path}: its base_config {parent!r} is not a file beside it")
        ids += _stage_ids(path.parent / parent, seen)
    return sorted(set(ids))


_HEADER = ("# vLLM-Omni deploy config written by `rlsched deploy`: the diffusion stage runs an\n"
           "# rlsched policy inside DiffusionEngine (engine_backend) with the settings under extras.rlsched.\n")
