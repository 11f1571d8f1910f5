"""Plugin settings: ``od_config.extras["rlsched"]``, then ``RLSCHED_*`` env vars, then defaults.

No vLLM import: the deploy command and the main test tier use this module too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator, model_validator

from rlsched import bounds
from rlsched.bounds import Bound
from rlsched.errors import ConfigError, InvalidRequest
from rlsched.sim.request import PRIORITY_CLASSES, Request
from rlsched.sim.schema import raised_config_error

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
    """Cost profile (``envs/profiles/NAME.yaml`` or a path): request costs, SLO defaults."""
    model: StrictStr = ""
    """Model entry of the profile that this stage serves; empty: the profile's first model."""
    default_priority: str = "batch"
    """Class of a request whose ``extra_args`` carry no (or an unknown) ``priority``."""
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
    """``schedule()`` never waits longer than this for a decision: FIFO serves the call, and while
    the late call still runs and for a back-off after it (fallback reasons ``timeout``, ``busy``,
    ``backoff``); then the policy is reset and decides again."""
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
            raise _config_error(exc) from None

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
            if name not in PRIORITY_CLASSES:
                raise ConfigError("extras.rlsched.slo_scales", f"unknown class {name!r}")
        return {name: _check(bounds.SLO_SCALE, scale, f"slo_scales.{name}") for name, scale in value.items()}

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

    @field_validator("default_priority", mode="before")
    @classmethod
    def _a_class(cls, value: Any) -> str:
        if value not in PRIORITY_CLASSES:
            raise ConfigError("extras.rlsched.default_priority", f"must be one of {PRIORITY_CLASSES}")
        return value

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

    def check_defaults(self, cost: Any) -> None:
        """The shape assumed for a request that gives none (``default_height`` x ``default_width``, one
        frame, ``default_steps``) must fit the profile's GPU alone, as every scenario shape must: 1,000,000 px
        modelled every such request as a 10^12-pixel image no GPU holds. ``cost``: the stage's ``CostModel``."""
        model = cost.model(self.model) if self.model else next(iter(cost.models.values()))
        req = Request(0, 0.0, model.name, model.modality, self.default_height, self.default_width, 1,
                      self.default_steps, False, self.default_priority, math.inf)
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
        return float(self.slo_scales.get(priority, DEFAULT_SLO_SCALES[priority]))

    def to_extras(self) -> dict[str, Any]:
        """The ``extras`` mapping that reproduces this config (non-default fields only)."""
        base = PluginConfig()
        out = {name: getattr(self, name) for name in type(self).model_fields
               if getattr(self, name) != getattr(base, name)}
        if "slo_scales" in out:
            out["slo_scales"] = dict(out["slo_scales"])
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
        try:
            return cls(**values)
        except TypeError as exc:  # a key that is not a string: Python refuses it as a keyword
            raise ConfigError(f"extras.{EXTRAS_KEY}", str(exc)) from None

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



def _check(bound: Bound, value: Any, name: str) -> Any:
    return bound.check(value, f"extras.rlsched.{name}")


def _config_error(exc: ValidationError) -> ConfigError:
    """The ``ConfigError`` for pydantic's refusal: unknown keys, else the first setting refused, with
    the message its validator raised, or pydantic's own (a profile that is not a string)."""
    errors = exc.errors(include_url=False)
    unknown = [e["loc"][0] for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        known = sorted(PluginConfig.model_fields)
        return ConfigError(f"extras.{EXTRAS_KEY}", f"unknown keys {sorted(unknown, key=str)} (known: {known})")
    raised = raised_config_error(exc)
    if raised is not None:
        return raised
    first = errors[0]
    where = ".".join(["extras", EXTRAS_KEY, *map(str, first["loc"])])
    return ConfigError(where, f"{first['msg'].removeprefix('Value error, ')}, not {first['input']!r}")
