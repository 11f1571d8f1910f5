"""Plugin settings: ``od_config.extras["rlsched"]``, then ``RLSCHED_*`` env vars, then defaults; and the
router's, ``extras["rlsched_router"]`` (``RouterConfig``), validated the same way.

No vLLM import: the deploy command and the main test tier use this module too.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator, model_validator

from rlsched import bounds
from rlsched.bounds import Bound
from rlsched.errors import CheckpointError, ConfigError, InvalidRequest, RlschedError
from rlsched.routing.views import SILENCE_S
from rlsched.sim.classes import (
    CLASS_NAME_PATTERN,
    CLASS_NAME_RULE,
    DEFAULT_QUOTA_WINDOW_S,
    MAX_CLASSES,
    QUOTA,
    QUOTA_WINDOW_S,
    SHIPPED,
    ClassInfo,
    class_table,
    default_weight,
)
from rlsched.sim.request import PRIORITY_CLASSES, Request
from rlsched.sim.stage import CENTRAL_LEAD_S

EXTRAS_KEY = "rlsched"
ENV_VARS = {"policy": "RLSCHED_POLICY", "profile": "RLSCHED_PROFILE"}
DEFAULT_SLO_SCALES = {"realtime": 2.0, "batch": 3.0, "background": 10.0}
"""Same scales as ``envs/default.yaml``; 3 is vLLM-Omni's diffusion-benchmark default."""
DECISION_THREADS = ("auto", "engine", "worker")
"""``PluginConfig.decision_thread``'s values."""
NUMBERS: dict[str, Bound] = {
    "decision_budget_ms": bounds.DECISION_MS, "decision_deadline_ms": bounds.DECISION_MS,
    "default_height": bounds.SIDE_PX, "default_width": bounds.SIDE_PX, "default_steps": bounds.STEPS,
    "telemetry_device": bounds.DEVICE, "telemetry_interval_s": bounds.TELEMETRY_INTERVAL_S,
    "metrics_port": bounds.PORT, "metrics_ports": bounds.REPLICAS, "time_scale": bounds.PLUGIN_TIME_SCALE,
    "quota_window_s": QUOTA_WINDOW_S,
}
"""Every numeric setting and its range in the table of bounds (``slo_scales`` and ``default_slo_scale``:
``bounds.SLO_SCALE``)."""
BOOLS = ("telemetry", "freeze_gc", "pause_gc_in_decisions", "late_binding", "publish_state")


class PluginConfig(BaseModel):
    """How the plugin schedules; one ``extras: {rlsched: {...}}`` mapping in a deploy config.

    A pydantic model (unknown keys refused, frozen); every refusal is a ``ConfigError`` naming the
    setting (``extras.rlsched.NAME``), whether the constructor or ``from_extras`` builds it. Numbers
    take their range and message from ``rlsched.bounds``, as the CLI flags that set them do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = "fifo"
    """Policy spec for ``rlsched.policies.make_policy`` (``fifo``, ``edf``, ``sjf``, ``rl:PATH`` …)."""
    profile: StrictStr = "qwen-image-h200-vllm-omni"
    """Cost profile (``envs/profiles/NAME.yaml`` or a path): request costs, SLO defaults. ``auto``: derived at
    start-up from the model folder vLLM-Omni serves and the GPU (``gpu``, else NVML's name for it):
    ``rlsched profile derive``, docs/derive.md; a prior that online calibration refines."""
    model: StrictStr = ""
    """Model entry of the profile that this stage serves; empty: the profile's first model."""
    gpu: StrictStr = ""
    """The GPU ``profile: auto`` derives for: a name (``L40S``, ``NVIDIA H100 80GB HBM3``: ``rlsched profile derive
    --list-gpus``) or ``tflops=...,bandwidth_gbs=...,memory_gb=...``; empty: the name NVML reports."""
    default_priority: str = "batch"
    """Class of a request whose ``extra_args`` carry no (or an unknown) ``priority``; with ``classes``, one of them."""
    classes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """The classes a request may name in ``extra_args.priority`` (empty: ``realtime``, ``batch``, ``background``):
    ``NAME: {slo_scale, weight, tier, quota}``, as a scenario's ``classes`` (``slo_scale`` required; ``weight``
    default 1, ``tier`` default by weight rank: ``rlsched.sim.classes``; ``quota``, a fraction in (0, 1], caps the
    class's share of the GPU's time while other classes wait: ``rlsched.sim.quota``). ``rlsched deploy --classes
    SCENARIO`` writes them."""
    quota_window_s: float = DEFAULT_QUOTA_WINDOW_S
    """The sliding window, in seconds, over which each class's share of the GPU's time is measured against its
    ``classes.NAME.quota`` (a scenario's ``serving.quota_window_s``)."""
    slo_scales: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_SLO_SCALES))
    """Per class: SLO = scale × standalone time, for requests without ``extra_args.slo_ms``."""
    default_slo_scale: float | None = None
    """Shorthand: the SLO scale of ``default_priority`` (overrides its ``slo_scales`` entry)."""
    decision_budget_ms: float = 5.0
    """A decision slower than this is discarded and FIFO schedules that call instead. 5 ms:
    in a real ``vllm serve`` process other threads hold the GIL for a millisecond or more,
    and 0.5 ms turned 2 of 16 decisions into FIFO (docs/e2e.md); a denoise step takes
    tens to hundreds of milliseconds, so 5 ms under the engine lock costs little."""
    decision_deadline_ms: float = 100.0
    """How long a decision may run before FIFO serves the call instead, and while the late call still runs
    and for a back-off after it (fallback reasons ``timeout``, ``busy``, ``backoff``); then the policy is
    reset and decides again. What counts depends on ``decision_thread``: on a worker thread,
    ``schedule()`` waits at most this long on the wall clock. On the engine thread the deadline counts
    the thread's runnable time — the wall clock less its waits for a CPU (``deadline.runnable_s``), so a
    thread the host leaves waiting does not time out — and the watchdog interrupts the decision at its
    next poll once that time passes (a quarter of the deadline apart, plus the interpreter's switch
    interval); a call blocked in C holds ``schedule()`` until it returns."""
    default_height: int = 1024
    """Height assumed for cost estimates when a request leaves it to the pipeline (with ``default_width``
    and ``default_steps``, a shape the profile's GPU can hold alone: ``check_defaults``)."""
    default_width: int = 1024
    """Width assumed for cost estimates when a request leaves it to the pipeline."""
    default_steps: int = 50
    """Denoising steps assumed when a request leaves them to the pipeline."""
    telemetry: bool = True
    """Read GPU memory through NVML when ``rlsched.telemetry`` and a GPU are available."""
    telemetry_device: int = -1
    """NVML device index; -1: the first entry of ``CUDA_VISIBLE_DEVICES`` (else 0)."""
    telemetry_interval_s: float = 0.1
    """Read NVML at most this often (a read costs tens of microseconds)."""
    metrics_port: int = 0
    """>0: serve this process's ``rlsched_*`` Prometheus metrics on this port."""
    metrics_ports: int = 1
    """How many consecutive ports from ``metrics_port`` the stage's replicas share: each replica process
    serves the first of them it can bind (``rlsched deploy --replicas R`` writes R; every replica gets the
    same stage config, and a replica process knows only its own devices) and says which replica it is in
    ``rlsched_replica_info{devices}``."""
    freeze_gc: bool = True
    """After the engine's start-up warm-up, collect and freeze the garbage collector's heap
    (``gc.freeze``, as vLLM's own engine core does after init: ``vllm.utils.gc_utils.freeze_gc_heap``).
    Without it a full collection walks every object of the stage process — torch, the model,
    the engine — and lands inside whichever code allocates next, often a decision under the
    engine lock (15-20 ms pauses measured in ``rlsched bench plugin``)."""
    pause_gc_in_decisions: bool = True
    """Pause the garbage collector while the policy decides (``gc.disable`` on the engine thread,
    re-enabled as soon as ``schedule()`` stops waiting, however the decision ended). A collection
    that falls due during a decision then runs just after it, outside ``decision_budget_ms``: a full
    collection walks every request alive since the freeze (~10 ms at 4,096 waiting in ``rlsched
    bench plugin``), and inside a decision it made the policy's decision be thrown away (FIFO
    served that call) while the engine waited for the collection all the same."""
    decision_thread: str = "auto"
    """Where ``decide`` runs. ``"engine"``: on the engine's thread, inside ``schedule()``; a watchdog
    thread interrupts a decision past ``decision_deadline_ms`` at its next Python bytecode (a call
    blocked in C, such as a sleep or I/O, holds the engine until it returns). ``"worker"``: on a worker
    thread that ``schedule()`` waits for at most ``decision_deadline_ms``, whatever the policy does,
    at the price of two thread wake-ups a call (~50-150 µs median and millisecond tails on a shared
    2-vCPU machine: ``rlsched bench plugin``). ``"auto"``: the engine thread for the policies rlsched
    ships (Python and numpy on a decision's few candidates, which the watchdog always reaches), a
    worker for any other policy object."""
    time_scale: float = 1.0
    """Plugin seconds per wall-clock second. 1 when serving; >1 only in time-scaled replays
    (``CostProfileExecutor`` sleeps cost / ``time_scale``), so arrivals, ``slo_ms`` and the
    policy's clock stay in the cost profile's seconds. In [0.001, 1000] (``bounds.PLUGIN_TIME_SCALE``)."""
    late_binding: bool = False
    """This stage sits behind rlsched's central pool (``rlsched deploy --router central``), which parks
    requests in the API process and sends each with ``extra_args.rlsched_parked_ms``: only then is that
    value read (a request is dated back by it). Otherwise a client's own value would move its request
    ahead of the queue: it is ignored and counted in ``invalid``."""
    publish_state: bool = False
    """Publish this replica's scheduler state to the router in the orchestrator (``publish.py``; the wire
    format: ``rlsched.routing.views``): on every output the engine sends, under ``rlsched_state`` in
    its metrics, and on one carrier output whenever the running set changes. Only behind an rlsched router,
    which takes the state off each output (and swallows the carriers) before vLLM-Omni reads them:
    ``rlsched deploy`` sets it whenever it writes a router. Off: the engine's outputs are vLLM-Omni's own."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _config_error(exc, EXTRAS_KEY, type(self)) from None

    @field_validator(*NUMBERS, mode="before")
    @classmethod
    def _in_bounds(cls, value: Any, info: Any) -> Any:
        return _check(NUMBERS[info.field_name], value, info.field_name)  # as the bound's kind (an int 5: 5.0)

    @field_validator("slo_scales", mode="before")
    @classmethod
    def _known_classes(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value  # pydantic says what it must be
        for name in value:
            if not (isinstance(name, str) and re.match(CLASS_NAME_PATTERN, name)):
                raise ConfigError("extras.rlsched.slo_scales", f"unknown class {name!r}")
        return {name: _check(bounds.SLO_SCALE, scale, f"slo_scales.{name}") for name, scale in value.items()}

    @field_validator("classes", mode="before")
    @classmethod
    def _own_classes(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ConfigError("extras.rlsched.classes", f"must be a mapping of class names, not {value!r}")
        if len(value) > MAX_CLASSES:
            raise ConfigError("extras.rlsched.classes", f"{len(value)} classes; at most {MAX_CLASSES}")
        return {name: _class_setting(name, spec) for name, spec in value.items()}

    @field_validator("default_slo_scale", mode="before")
    @classmethod
    def _slo_scale(cls, value: Any) -> Any:
        return None if value is None else _check(bounds.SLO_SCALE, value, "default_slo_scale")

    @field_validator(*BOOLS, mode="before")
    @classmethod
    def _a_bool(cls, value: Any, info: Any) -> bool:
        if not isinstance(value, bool):  # pydantic alone reads "false" and 1 as booleans
            raise ConfigError(f"extras.rlsched.{info.field_name}", f"must be true or false, not {value!r}")
        return value

    @field_validator("policy", mode="before")
    @classmethod
    def _a_spec(cls, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError("extras.rlsched.policy", f"must be a policy spec, not {value!r}")
        return value

    @field_validator("gpu", mode="after")
    @classmethod
    def _a_gpu(cls, value: str) -> str:
        if value:
            from rlsched.profiling.gpus import find_gpu, parse_gpu_spec

            try:
                parse_gpu_spec(value) if "=" in value else find_gpu(value)
            except ConfigError as exc:
                raise ConfigError(f"extras.{EXTRAS_KEY}.gpu", exc.why) from None
        return value

    @model_validator(mode="after")
    def _a_class(self) -> PluginConfig:
        names = tuple(self.class_table)
        if self.default_priority not in names:
            raise ConfigError("extras.rlsched.default_priority", f"must be one of {names}, not "
                                                                 f"{self.default_priority!r}")
        for name in self.slo_scales:
            if name not in names and name not in PRIORITY_CLASSES:
                raise ConfigError("extras.rlsched.slo_scales", f"unknown class {name!r} (classes: {names})")
        return self

    @cached_property
    def class_table(self) -> dict[str, ClassInfo]:
        """The classes requests may name, with weight and tier (``rlsched.sim.classes``): ``classes``, else the
        shipped three."""
        if not self.classes:
            return SHIPPED
        return class_table({c: v.get("weight", default_weight(c)) for c, v in self.classes.items()},
                           {c: v.get("tier") for c, v in self.classes.items()})

    @property
    def quotas(self) -> tuple[tuple[str, float], ...]:
        """``(class, quota)`` of every class with a quota, as ``ServingConfig.quotas`` holds them."""
        return tuple((c, float(v["quota"])) for c, v in self.classes.items() if v.get("quota") is not None)

    def class_of(self, tag: Any) -> str | None:
        """The class an ``extra_args.priority`` tag names (its own spelling, else lower case), else None."""
        if not isinstance(tag, str):
            return None
        table = self.class_table
        for name in (tag.strip(), tag.strip().lower()):
            if name in table:
                return name
        return None

    @field_validator("decision_thread", mode="before")
    @classmethod
    def _a_thread(cls, value: Any) -> str:
        if value not in DECISION_THREADS:
            raise ConfigError("extras.rlsched.decision_thread",
                              f"must be one of {', '.join(DECISION_THREADS)}, not {value!r}")
        return value

    @model_validator(mode="after")
    def _ports_exist(self) -> PluginConfig:
        if self.metrics_port + self.metrics_ports - 1 > 65535:
            raise ConfigError("extras.rlsched.metrics_ports", f"must be an integer >= 1 with metrics_port + "
                                                              f"metrics_ports - 1 <= 65535, not {self.metrics_ports!r}")
        return self

    @model_validator(mode="after")
    def _budget_within_deadline(self) -> PluginConfig:
        check_budget(self.decision_budget_ms, self.decision_deadline_ms, f"extras.{EXTRAS_KEY}.decision_budget_ms",
                     "decision_deadline_ms")
        return self

    def check_defaults(self, cost: Any) -> None:
        """The shape assumed for a request that gives none (``default_height`` x ``default_width``, one
        frame, ``default_steps``) must fit the profile's GPU alone, as every scenario shape must: 1,000,000 px
        modelled every such request as a 10^12-pixel image no GPU holds. ``cost``: the stage's ``CostModel``."""
        model = cost.model(self.model) if self.model else next(iter(cost.models.values()))
        info = self.class_table[self.default_priority]
        req = Request(0, 0.0, model.name, model.modality, self.default_height, self.default_width, 1,
                      self.default_steps, False, info.name, math.inf, -1, info.tier, info.weight)
        try:
            need = cost.record(req).mem_gb
        except (OverflowError, InvalidRequest):
            need = math.inf
        free = cost.gpu_memory_gb - cost.weights_gb
        if not need <= free:
            raise ConfigError("extras.rlsched.default_height", f"the default shape {self.default_height}x"
                                                               f"{self.default_width} needs {need:.4g} GB alone; "
                                                               f"profile {cost.name!r} has {free:.4g} GB left after "
                                                               "the model weights")

    def slo_scale(self, priority: str) -> float:
        if self.default_slo_scale is not None and priority == self.default_priority:
            return float(self.default_slo_scale)
        if priority in self.classes:
            return float(self.classes[priority]["slo_scale"])
        return float(self.slo_scales.get(priority, DEFAULT_SLO_SCALES[priority]))

    def request(self, *fields: Any, priority: str, slo_s: float) -> Request:
        """A ``Request`` of class ``priority`` with its table's tier and weight (``fields``: id to cfg)."""
        info = self.class_table[priority]
        return Request(*fields, info.name, slo_s, -1, info.tier, info.weight)

    def to_extras(self) -> dict[str, Any]:
        """The ``extras`` mapping that reproduces this config (non-default fields only)."""
        base = PluginConfig()
        out = {name: getattr(self, name) for name in type(self).model_fields
               if getattr(self, name) != getattr(base, name)}
        if "slo_scales" in out:
            out["slo_scales"] = dict(out["slo_scales"])
        if "classes" in out:
            out["classes"] = {c: dict(v) for c, v in out["classes"].items()}
        return {EXTRAS_KEY: out}

    @classmethod
    def from_extras(cls, extras: Any, environ: Mapping[str, str] | None = None) -> PluginConfig:
        """Settings from an ``extras`` value (a dict, ``None``, or pydantic's ``FieldInfo`` default)."""
        env = os.environ if environ is None else environ
        # OmniDiffusionConfig.extras defaults to a pydantic FieldInfo on a stdlib dataclass.
        section = extras.get(EXTRAS_KEY) if isinstance(extras, Mapping) else None
        if section is None:
            section = {}
        if not isinstance(section, Mapping):
            raise ConfigError(f"extras.{EXTRAS_KEY}", f"must be a mapping, not {type(section).__name__}")
        values = dict(section)
        for name, var in ENV_VARS.items():
            if name not in values and env.get(var):
                values[name] = env[var]
        if isinstance(values.get("slo_scales"), Mapping):
            values["slo_scales"] = {**DEFAULT_SLO_SCALES, **values["slo_scales"]}
        return _build(cls, values, EXTRAS_KEY)

    @classmethod
    def from_od_config(cls, od_config: Any, environ: Mapping[str, str] | None = None) -> PluginConfig:
        return cls.from_extras(getattr(od_config, "extras", None), environ)

    def nvml_device(self, environ: Mapping[str, str] | None = None) -> int | str:
        """The GPU telemetry reads: ``telemetry_device`` when set, else the stage's first GPU as
        ``CUDA_VISIBLE_DEVICES`` names it (an index, ``GPU-<uuid>`` or ``MIG-<uuid>``: ``NvmlTelemetry``
        resolves it, since NVML numbers GPUs physically), else 0."""
        if self.telemetry_device >= 0:
            return self.telemetry_device
        first = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if first.isdigit():
            return int(first)
        return first if first.startswith(("GPU-", "MIG-")) else 0



ROUTER_KEY = "rlsched_router"
"""The stage's ``extras`` section of the router's settings (beside the engine plugin's ``extras.rlsched``)."""
ROUTER_ENV_VAR = "RLSCHED_ROUTER"
"""A router spec for every diffusion stage whose ``extras`` name none (the API process's environment)."""
CENTRAL = "central"
"""The router spec of late binding (``POLICY@central``): ``central_pool.CentralStagePool``."""
ROUTER_NUMBERS: dict[str, Bound] = {
    "budget_ms": bounds.DECISION_MS, "deadline_ms": bounds.DECISION_MS, "stall_ms": bounds.DECISION_MS,
    "silence_s": bounds.DURATION_S, "lead_ms": bounds.MILLIS, "seed": bounds.SEED,
}
"""``RouterConfig``'s numeric settings and their ranges in the table of bounds (``lead_ms`` 0: a batch only
once idle)."""


class RouterConfig(BaseModel):
    """How a stage routes; ``extras: {rlsched_router: {...}}`` in its deploy config.

    Validated as ``PluginConfig`` is (a pydantic model: unknown keys refused, frozen, each refusal a
    ``ConfigError`` naming ``extras.rlsched_router.NAME``); the router or central policy it names is
    built once here, so a typo or a missing checkpoint fails at start-up, naming its key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    router: str = "rlsched"
    """Router spec of ``rlsched.routing.routers`` (``rlsched``, ``least-work``, ``random:7`` ...)."""
    budget_ms: float = 2.0
    """A routing decision slower than this is discarded and vLLM-Omni's round-robin routes that
    request. It runs on the orchestrator's event loop, which serves every add/abort in turn. On the
    2-core CPU dev machine the shipped routers took ~10 us median, ~50 us p99, over a ledger of up
    to 400 requests on 4 replicas (Ledger + make_router, measured by hand; no bench command yet).
    At most ``deadline_ms``."""
    deadline_ms: float = 50.0
    """The longest the orchestrator's event loop waits for one routing or central decision: past it the
    decision is abandoned (``timeout``; vLLM-Omni's rule routes) and interrupted, so a router that loops
    or sleeps delays the server's other adds and aborts by at most this. At least ``budget_ms``: a
    decision between the two is waited for and discarded (``slow``)."""
    decision_thread: str = "auto"
    """Where a routing or central decision runs (as ``extras.rlsched.decision_thread``): ``engine`` on the
    orchestrator's thread with a watchdog that interrupts Python code at the deadline; ``worker`` on a
    worker thread waited for at most the deadline, whatever the decision does (a call blocked in C
    included); ``auto`` the first for rlsched's own routers and policies, the second for any other."""
    seed: int = 0
    """Seed of the routers that draw (``random`` without its own, ``least-queue``'s ties)."""
    policy: str = ""
    """``router: central`` only: the central policy spec (``edf``, ``static:FILE`` ...; default ``fifo``),
    the ``POLICY`` of a simulator ``POLICY@central`` run. It picks each batch from the central queue for
    a replica that has nothing outstanding (``central_pool.py``)."""
    stall_ms: float = 60_000.0
    """``router: central`` only: a request parked longer than this (wall clock) while a replica is free is
    sent at once by vLLM-Omni's rule with every other parked one (fallback ``stalled``): a central policy
    that waits forever must not hold requests forever."""
    silence_s: float = SILENCE_S
    """A replica that published its state and is then silent this long past the later of its last message
    and its running batch's predicted end is seen through the ledger alone (``stale``) until it publishes
    again. Seconds of the profile, on the router's (time-scaled) clock."""
    lead_ms: float = CENTRAL_LEAD_S * 1e3
    """``router: central`` only, request mode: a replica whose running wave is predicted (from its published
    state) to end within this many wall-clock milliseconds, with nothing queued there, takes its next batch
    now, one wave ahead (``rlsched.sim.stage.takes_next_batch``): the send leaves the critical path. 0: only
    when idle. Without a published state a replica takes a batch once nothing sent to it is unfinished."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _config_error(exc, ROUTER_KEY, type(self)) from None

    @property
    def central(self) -> bool:
        """Late binding: requests wait in a central queue and are sent when a replica frees."""
        return self.router.split(":")[0] == CENTRAL

    @field_validator(*ROUTER_NUMBERS, mode="before")
    @classmethod
    def _in_bounds(cls, value: Any, info: Any) -> Any:
        return ROUTER_NUMBERS[info.field_name].check(value, f"extras.{ROUTER_KEY}.{info.field_name}")

    @field_validator("router", mode="before")
    @classmethod
    def _a_router(cls, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"extras.{ROUTER_KEY}.router", f"must be a router spec, not {value!r}")
        return value

    @field_validator("policy", mode="before")
    @classmethod
    def _a_policy(cls, value: Any) -> str:
        if not isinstance(value, str):
            raise ConfigError(f"extras.{ROUTER_KEY}.policy", f"must be a policy spec, not {value!r}")
        return value

    @field_validator("decision_thread", mode="before")
    @classmethod
    def _a_thread(cls, value: Any) -> str:
        if value not in DECISION_THREADS:
            raise ConfigError(f"extras.{ROUTER_KEY}.decision_thread",
                              f"must be one of {', '.join(DECISION_THREADS)}, not {value!r}")
        return value

    @model_validator(mode="after")
    def _builds(self) -> RouterConfig:
        check_budget(self.budget_ms, self.deadline_ms, f"extras.{ROUTER_KEY}.budget_ms", "deadline_ms")
        if self.central:
            self._central_builds()
        elif self.policy:
            raise ConfigError(f"extras.{ROUTER_KEY}.policy", f"only with router: central (late binding), not "
                                                             f"with {self.router!r}: each replica's policy is "
                                                             "extras.rlsched.policy")
        else:
            self._router_builds()
        return self

    def _central_builds(self) -> None:
        from rlsched.policies import make_policy

        if self.router != CENTRAL:
            raise ConfigError(f"extras.{ROUTER_KEY}.router", f"{self.router!r}: central takes no arguments "
                                                             "(the central policy is extras.rlsched_router.policy)")
        _named(f"extras.{ROUTER_KEY}.policy", make_policy, self.policy or "fifo")

    def _router_builds(self) -> None:
        from rlsched.policies.base import parse_spec
        from rlsched.routing.routers import make_router, split_view

        where = f"extras.{ROUTER_KEY}.router"
        if split_view(_named(where, parse_spec, self.router))[1]:
            raise ConfigError(where, f"{self.router!r}: view= and delay_ms= are simulator "
                              "options; in the engine the router always decides on its ledger and the "
                              "replicas' published states (view=engine)")
        _named(where, make_router, self.router)

    @classmethod
    def from_extras(cls, extras: Any, environ: Mapping[str, str] | None = None) -> RouterConfig | None:
        """The stage's router settings, or None when neither ``extras`` nor ``RLSCHED_ROUTER`` asks for one.
        A section with settings but no ``router`` (``routr: rlsched``, or ``budget_ms`` alone) is refused:
        read as no router it would silently leave the stage unrouted."""
        env = os.environ if environ is None else environ
        section = extras.get(ROUTER_KEY) if isinstance(extras, Mapping) else None
        if section is not None and not isinstance(section, Mapping):
            raise ConfigError(f"extras.{ROUTER_KEY}", f"must be a mapping, not {type(section).__name__}")
        values = dict(section or {})
        if "router" not in values and env.get(ROUTER_ENV_VAR):
            values["router"] = env[ROUTER_ENV_VAR]
        if not values:
            return None
        if "router" not in values:
            _refuse_unknown(values, ROUTER_KEY, cls)
            raise ConfigError(f"extras.{ROUTER_KEY}.router", f"missing: the section sets {sorted(values)} but names "
                                                             f"no router (or set {ROUTER_ENV_VAR}); without one the "
                                                             "stage would not be routed")
        return _build(cls, values, ROUTER_KEY)


def check_budget(budget_ms: float, deadline_ms: float, where: str, deadline_name: str) -> None:
    """A decision budget must not exceed its deadline: a decision is cut off at the deadline, so a
    budget above it would never be what discards a decision."""
    if budget_ms > deadline_ms:
        raise ConfigError(where, f"{budget_ms:g} exceeds {deadline_name} {deadline_ms:g}: a decision is cut off "
                                 "at the deadline, so the budget must be <= it")


def _named(where: str, build: Any, spec: str) -> Any:
    """``build(spec)``, its refusal re-raised naming the setting ``where`` (a checkpoint's too)."""
    try:
        return build(spec)
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    except ConfigError as exc:  # "policy: unknown policy ...": the key's last part says the same
        raise ConfigError(where, str(exc).removeprefix(f"{where.rsplit('.', 1)[-1]}: ")) from None


def _check(bound: Bound, value: Any, name: str) -> Any:
    return bound.check(value, f"extras.rlsched.{name}")


CLASS_KEYS = ("slo_scale", "weight", "tier", "quota")


def _class_setting(name: Any, spec: Any) -> dict[str, Any]:
    """One entry of ``classes``, checked: a name of the scenario's form, ``slo_scale``, ``weight``, ``tier``,
    ``quota``."""
    where = f"classes.{name}"
    if not (isinstance(name, str) and re.match(CLASS_NAME_PATTERN, name)):
        raise ConfigError("extras.rlsched.classes", f"{name!r}: {CLASS_NAME_RULE}")
    if not isinstance(spec, Mapping) or "slo_scale" not in spec:
        raise ConfigError(f"extras.rlsched.{where}",
                          "must be a mapping with slo_scale (and optional weight, tier, quota)")
    unknown = sorted(set(spec) - set(CLASS_KEYS), key=str)
    if unknown:
        raise ConfigError(f"extras.rlsched.{where}", f"unknown keys {unknown} (known: {list(CLASS_KEYS)})")
    out: dict[str, Any] = {"slo_scale": _check(bounds.SLO_SCALE, spec["slo_scale"], f"{where}.slo_scale")}
    if spec.get("weight") is not None:
        out["weight"] = float(_check(bounds.CLASS_WEIGHT, spec["weight"], f"{where}.weight"))
    if spec.get("tier") is not None:
        if spec["tier"] not in PRIORITY_CLASSES:
            raise ConfigError(f"extras.rlsched.{where}.tier",
                              f"must be one of {PRIORITY_CLASSES}, not {spec['tier']!r}")
        out["tier"] = spec["tier"]
    if spec.get("quota") is not None:
        out["quota"] = float(_check(QUOTA, spec["quota"], f"{where}.quota"))
    return out


def _build(cls: type[BaseModel], values: dict[Any, Any], key: str) -> Any:
    _refuse_unknown(values, key, cls)  # a key that is not a string included: Python refuses it as a keyword
    return cls(**values)


def _refuse_unknown(values: Mapping[Any, Any], key: str, cls: type[BaseModel]) -> None:
    unknown = [name for name in values if name not in cls.model_fields]
    if unknown:
        known = sorted(cls.model_fields)
        raise ConfigError(f"extras.{key}", f"unknown keys {sorted(unknown, key=str)} (known: {known})")


def _config_error(exc: ValidationError, key: str, cls: type[BaseModel]) -> RlschedError:
    """The ``ConfigError`` for pydantic's refusal of ``extras.KEY``: unknown keys, else the first setting
    refused, with the error its validator raised (a ``CheckpointError`` too), or pydantic's own message
    (a profile that is not a string)."""
    errors = exc.errors(include_url=False)
    unknown = [e["loc"][0] for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        known = sorted(cls.model_fields)
        return ConfigError(f"extras.{key}", f"unknown keys {sorted(unknown, key=str)} (known: {known})")
    raised = errors[0].get("ctx", {}).get("error")
    if isinstance(raised, RlschedError):
        return raised
    first = errors[0]
    where = ".".join(["extras", key, *map(str, first["loc"])])
    return ConfigError(where, f"{first['msg'].removeprefix('Value error, ')}, not {first['input']!r}")
