"""The declared schemas of scenario files (``envs/*.yaml``) and cost profiles (``envs/profiles/*.yaml``).

Pydantic models rather than hand-written checks, so every error names the file,
the line, the key (``arrival.rate_rps``, ``mix[2].height``, ``models.qwen-image.step.a_s``)
and the reason, and unknown keys are refused instead of ignored (a typo such as
``rate_rsp`` would otherwise run the default workload silently).

Every number has a range: non-finite values are refused, and so are values past
the bounds below, which lie far beyond any real deployment and keep every derived
time, count and memory figure finite (issue 18: range-checked at 0, tiny, huge and
non-finite).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlsched.errors import ConfigError
from rlsched.sim.request import MODALITIES, PRIORITY_CLASSES

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1)]
Priority = Literal["realtime", "batch", "background"]
Modality = Literal["image", "video", "audio", "text"]
assert set(Priority.__args__) == set(PRIORITY_CLASSES) and set(Modality.__args__) == set(MODALITIES)  # type: ignore[attr-defined]


MAX_DURATION_S = 1e9
"""Longest arrival window (about 32 years)."""
MAX_SIDE_PX, MAX_FRAMES, MAX_STEPS = 1_000_000, 1_000_000, 100_000
"""Largest height or width, frame count and denoise-step count of a mix entry."""
MAX_NUM_SEQS = 65_536
MAX_MS = 3_600_000.0
"""An hour in milliseconds: the longest engine overhead or batching wait."""
MIN_PERIOD_S = 1e-3
"""Shortest on/off sojourn or diurnal period (a millisecond)."""
MIN_CV, MAX_CV = 1e-3, 100.0
"""Range of a renewal process's coefficient of variation (ServeGen windows are clamped at 1e-3 too)."""
MAX_SLO_SCALE = 1e6
MAX_PREFIX_GROUPS = 1 << 30
"""Prompt-prefix ids are drawn from [0, 2^30)."""
SCALE_RANGE = (1e-9, 1e9)
"""Range of a rate or time multiplier (``rate_scale``, ``time_scale``)."""

Period = Annotated[float, Field(ge=MIN_PERIOD_S, le=MAX_DURATION_S, allow_inf_nan=False)]
Millis = Annotated[float, Field(ge=0, le=MAX_MS, allow_inf_nan=False)]
Scale = Annotated[float, Field(ge=SCALE_RANGE[0], le=SCALE_RANGE[1], allow_inf_nan=False)]
Duration = Annotated[float, Field(gt=0, le=MAX_DURATION_S, allow_inf_nan=False)]
Cv = Annotated[float, Field(ge=MIN_CV, le=MAX_CV, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Side = Annotated[int, Field(ge=1, le=MAX_SIDE_PX)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_M = TypeVar("_M", bound=_Strict)


class ServingSpec(_Strict):
    mode: Literal["request", "step"] = "request"
    max_num_seqs: Annotated[int, Field(ge=1, le=MAX_NUM_SEQS)] = 1
    request_batch_max_wait_ms: Millis = 0.0
    engine_overhead_ms: Millis = 0.0
    engine_overhead_ms_per_mpx: Millis = 0.0


class PoissonSpec(_Strict):
    process: Literal["poisson"]
    rate_rps: Positive


class RenewalSpec(_Strict):
    process: Literal["gamma", "weibull"]
    rate_rps: Positive
    cv: Cv = 1.0


class OnOffSpec(_Strict):
    process: Literal["onoff"]
    rate_rps: Positive
    on_s: Period = 60.0
    off_s: Period = 120.0
    burst_factor: Annotated[float, Field(ge=1, le=1e6, allow_inf_nan=False)] = 4.0


class DiurnalSpec(_Strict):
    process: Literal["diurnal"]
    rate_rps: Positive
    period_s: Period = 86400.0
    amplitude: Fraction = 0.5
    phase_s: Annotated[float, Field(ge=-MAX_DURATION_S, le=MAX_DURATION_S, allow_inf_nan=False)] = 0.0


class ServeGenSpec(_Strict):
    process: Literal["servegen"]
    path: str
    rate_scale: Scale = 1.0


class TraceArrivalSpec(_Strict):
    process: Literal["trace"]
    path: str
    time_scale: Scale = 1.0


ArrivalSpec = Annotated[PoissonSpec | RenewalSpec | OnOffSpec | DiurnalSpec | ServeGenSpec | TraceArrivalSpec,
                        Field(discriminator="process")]
LineOf = Callable[[tuple[Any, ...]], "int | None"]
ARRIVAL_TAGS = ("poisson", "gamma", "weibull", "onoff", "diurnal", "servegen", "trace")


class ClassSpecModel(_Strict):
    share: Positive
    """Relative (normalised by the largest share first, so any finite positive numbers work)."""
    slo_scale: Annotated[float, Field(gt=0, le=MAX_SLO_SCALE, allow_inf_nan=False)]


class ShapeSpecModel(_Strict):
    model: str
    modality: Modality
    height: Side
    width: Side
    num_frames: Annotated[int, Field(ge=1, le=MAX_FRAMES)] = 1
    steps: Annotated[int, Field(ge=1, le=MAX_STEPS)] = 50
    cfg: bool = True
    weight: Positive = 1.0
    prefix_groups: Annotated[int, Field(ge=0, le=MAX_PREFIX_GROUPS)] = 0


class ShapesFromSpec(_Strict):
    path: str
    model: str
    modality: Modality = "image"
    cfg: bool = False


MAX_REPLICAS = 1024
"""Most replicas of one group (far beyond any one stage's GPUs)."""


class ReplicaGroupSpec(_Strict):
    """``count`` replicas of ``sp_degree`` × ``cfg_parallel`` GPUs each, on ``profile`` (default: the
    scenario's)."""

    count: Annotated[int, Field(ge=1, le=MAX_REPLICAS)] = 1
    sp_degree: Literal[1, 2, 4, 8] = 1
    cfg_parallel: Literal[1, 2] = 1
    """CFG-parallel degree (vLLM-Omni ``cfg_parallel_size``): 2 runs a CFG request's two guidance
    branches on two groups of ``sp_degree`` GPUs; the profile needs a ``cfg_parallel`` block."""
    profile: str | None = None
    name: str | None = None
    """Replica names are ``NAME-i`` (default: ``PROFILE@spD``)."""


class ScenarioFile(_Strict):
    """A whole scenario file; see ``rlsched.sim.scenario.Scenario`` for what each key means."""

    name: str
    profile: str
    serving: ServingSpec = ServingSpec()
    duration_s: Duration
    arrival: ArrivalSpec
    classes: Annotated[dict[Priority, ClassSpecModel], Field(min_length=1)]
    mix: tuple[ShapeSpecModel, ...] = ()
    shapes_from: ShapesFromSpec | None = None
    replicas: tuple[ReplicaGroupSpec, ...] = ()
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _default_process(cls, data: Any) -> Any:
        # ``process`` may be left out (Poisson, as before the schema); the union needs the tag.
        arrival = data.get("arrival") if isinstance(data, dict) else None
        if isinstance(arrival, dict) and "process" not in arrival:
            data = {**data, "arrival": {"process": "poisson", **arrival}}
        return data

    @model_validator(mode="after")
    def _has_shapes(self) -> ScenarioFile:
        if not self.mix and self.shapes_from is None:
            raise ValueError("needs a 'mix' or 'shapes_from'")
        return self



class StackSpec(_Strict):
    """The software stack a cost profile was measured on (``stack:`` in ``envs/profiles/*.yaml``).

    Times for the same model and tokens differ up to 2x across stacks (eager vs
    ``torch.compile``, FlashAttention versions, sglang vs vLLM-Omni), so a profile must say
    which one it models; ``cfg`` says how that stack runs classifier-free guidance:
    ``batched`` (conditional and unconditional passes in one forward) or ``sequential``
    (two forwards per step on one GPU, as vLLM-Omni does), which pays the fixed per-forward
    cost twice.
    """

    engine: str
    attention: str
    compile: bool
    precision: Literal["bf16", "fp16", "fp8", "fp32"]
    cfg: Literal["batched", "sequential", "none"] = "batched"
    notes: str = ""


def validate_stack(data: Any, where: str) -> StackSpec:
    """``data`` checked as a profile's ``stack``; a ``ConfigError`` naming the file and key."""
    try:
        return StackSpec.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(x) for x in ("stack", *err["loc"]))
        raise ConfigError(where, f"{key}: {err['msg']}") from None

# ------------------------------------------------------------------ cost profiles

MAX_STEP_S = 3600.0
"""Longest fixed per-step time (``floor_s``, ``a_s``)."""
MAX_REQUEST_S = 86400.0
"""Longest per-request encode, or decode per megapixel-frame."""
MAX_COEFF = 1e6
"""Largest per-token and per-megapixel coefficient (seconds or GB)."""
MAX_GPU_GB = 1e6


def _coeff(hi: float) -> Any:
    return Field(ge=0, le=hi, allow_inf_nan=False)


class StepCoeffs(_Strict):
    """A denoise step costs ``max(k·floor_s, k·a_s + b·Σtokens + c·Σtokens²)`` (``rlsched.sim.cost``)."""

    floor_s: Annotated[float, _coeff(MAX_STEP_S)]
    a_s: Annotated[float, _coeff(MAX_STEP_S)]
    b_s_per_mtok: Annotated[float, _coeff(MAX_COEFF)]
    c_s_per_gtok2: Annotated[float, _coeff(MAX_COEFF)]

    @model_validator(mode="after")
    def _takes_time(self) -> StepCoeffs:
        if not (self.floor_s or self.a_s or self.b_s_per_mtok or self.c_s_per_gtok2):
            raise ValueError("a step must take time: floor_s, a_s, b_s_per_mtok and c_s_per_gtok2 are all 0")
        return self


class FlopsSpec(_Strict):
    linear_gflop_per_token: Annotated[float, _coeff(1e9)] = 0.0
    attn_flop_per_token2: Annotated[float, _coeff(1e15)] = 0.0


class ModelSpec(_Strict):
    """One model of a profile; see ``rlsched.sim.cost.ModelCost`` for what each key means (its ``sp``
    and ``cfg_parallel`` blocks are taken out and checked by ``rlsched.sim.cost`` before this schema
    sees the model)."""

    modality: Modality
    step: StepCoeffs
    encode_s: Annotated[float, _coeff(MAX_REQUEST_S)]
    decode_s_per_mpx: Annotated[float, _coeff(MAX_REQUEST_S)]
    weights_gb: Annotated[float, _coeff(MAX_GPU_GB)]
    act_gb_per_ktok: Annotated[float, _coeff(MAX_COEFF)]
    vae_gb_per_mpx: Annotated[float, _coeff(MAX_COEFF)]
    token_rule: Literal["latent", "sequence"] = "latent"
    patch_px: Annotated[int, Field(ge=1, le=4096)] = 16
    temporal_stride: Annotated[int, Field(ge=1, le=1024)] = 4
    cfg_passes: Annotated[int, Field(ge=1, le=16)] = 2
    memory_form: Literal["sum", "max"] = "sum"
    flops: FlopsSpec | None = None


class GpuSpec(_Strict):
    name: str
    memory_gb: Annotated[float, Field(gt=0, le=MAX_GPU_GB, allow_inf_nan=False)]
    peak_bf16_tflops: Annotated[float, _coeff(1e6)] = 0.0


class ProfileFile(_Strict):
    """A whole cost profile (``envs/profiles/NAME.yaml``, written by ``rlsched profile fit``)."""

    name: str
    gpu: GpuSpec
    stack: StackSpec
    sources: tuple[str, ...]
    models: Annotated[dict[str, ModelSpec], Field(min_length=1)]

    @field_validator("sources")
    @classmethod
    def _has_sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("a profile must name its sources")
        return value

    @model_validator(mode="after")
    def _weights_fit(self) -> ProfileFile:
        weights = sum(m.weights_gb for m in self.models.values())
        if weights >= self.gpu.memory_gb:
            raise ValueError(f"model weights ({weights:g} GB) do not fit in GPU memory ({self.gpu.memory_gb:g} GB)")
        return self


def validate_profile(data: Any, where: str, line_of: LineOf | None = None) -> ProfileFile:
    """``data`` checked as a cost profile; a ``ConfigError`` naming file, line (with ``line_of``), key and reason."""
    return _validate(ProfileFile, data, where, line_of)


def validate_scenario(data: Any, where: str, line_of: LineOf | None = None) -> ScenarioFile:
    """``data`` checked against the schema; a ``ConfigError`` naming file, line (with ``line_of``),
    key and reason."""
    return _validate(ScenarioFile, data, where, line_of)


def _validate(model: type[_M], data: Any, where: str, line_of: LineOf | None) -> _M:
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise schema_error(exc, where, line_of) from None


def schema_error(exc: ValidationError, where: str, line_of: LineOf | None = None) -> ConfigError:
    """One ``ConfigError`` listing every problem as ``key (line N): reason``; the first in ``where``."""
    errors = exc.errors(include_url=False)
    lines = [line_of(_file_loc(e["loc"])) if line_of else None for e in errors]
    keys = [_key(e["loc"]) for e in errors]
    head = f"{where}:{lines[0]}" if lines[0] else where
    head = f"{head}: {keys[0]}" if keys[0] else head
    rest = [f"{k} (line {n}): {_reason(e)}" if n else f"{k}: {_reason(e)}"
            for k, n, e in zip(keys[1:], lines[1:], errors[1:])]
    return ConfigError(head, "; ".join([_reason(errors[0]), *rest]))


def _file_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The error's path as keys of the file (no union tag, no ``[key]`` marker)."""
    return tuple(p for i, p in enumerate(loc)
                 if p != "[key]" and not (i == 1 and loc[0] == "arrival" and p in ARRIVAL_TAGS))


def _key(loc: tuple[Any, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if i == 1 and loc[0] == "arrival" and part in ARRIVAL_TAGS:
            continue  # the union's tag, not a key of the file
        if part == "[key]":
            out += " (key)"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _reason(err: Any) -> str:
    kind = err["type"]
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        return f"unknown key (value {_short(err['input'])})"
    if kind == "union_tag_invalid":
        return f"unknown process {_short(err['input'].get('process'))} (one of {', '.join(ARRIVAL_TAGS)})"
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "value_error" and isinstance(err["input"], dict):
        return msg  # a check across keys: the whole mapping says nothing more
    return f"{msg}, got {_short(err['input'])}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
