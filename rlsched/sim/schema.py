"""The declared schema of scenario files (``envs/*.yaml``).

Pydantic models rather than hand-written checks, so every error names the file,
the key (``arrival.rate_rps``, ``mix[2].height``) and the reason, and unknown keys
are refused instead of ignored (a typo such as ``rate_rsp`` would otherwise run
the default workload silently).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rlsched.errors import ConfigError
from rlsched.sim.request import MODALITIES, PRIORITY_CLASSES

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(ge=1)]
Priority = Literal["realtime", "batch", "background"]
Modality = Literal["image", "video", "audio", "text"]
assert set(Priority.__args__) == set(PRIORITY_CLASSES) and set(Modality.__args__) == set(MODALITIES)  # type: ignore[attr-defined]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServingSpec(_Strict):
    mode: Literal["request", "step"] = "request"
    max_num_seqs: PositiveInt = 1
    request_batch_max_wait_ms: NonNegative = 0.0
    engine_overhead_ms: NonNegative = 0.0
    engine_overhead_ms_per_mpx: NonNegative = 0.0


class PoissonSpec(_Strict):
    process: Literal["poisson"]
    rate_rps: Positive


class RenewalSpec(_Strict):
    process: Literal["gamma", "weibull"]
    rate_rps: Positive
    cv: Positive = 1.0


class OnOffSpec(_Strict):
    process: Literal["onoff"]
    rate_rps: Positive
    on_s: Positive = 60.0
    off_s: Positive = 120.0
    burst_factor: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 4.0


class DiurnalSpec(_Strict):
    process: Literal["diurnal"]
    rate_rps: Positive
    period_s: Positive = 86400.0
    amplitude: Annotated[float, Field(ge=0, le=1)] = 0.5
    phase_s: Finite = 0.0


class ServeGenSpec(_Strict):
    process: Literal["servegen"]
    path: str
    rate_scale: Positive = 1.0


class TraceArrivalSpec(_Strict):
    process: Literal["trace"]
    path: str
    time_scale: Positive = 1.0


ArrivalSpec = Annotated[PoissonSpec | RenewalSpec | OnOffSpec | DiurnalSpec | ServeGenSpec | TraceArrivalSpec,
                        Field(discriminator="process")]
LineOf = Callable[[tuple[Any, ...]], "int | None"]
ARRIVAL_TAGS = ("poisson", "gamma", "weibull", "onoff", "diurnal", "servegen", "trace")


class ClassSpecModel(_Strict):
    share: Positive
    slo_scale: Positive


class ShapeSpecModel(_Strict):
    model: str
    modality: Modality
    height: PositiveInt
    width: PositiveInt
    num_frames: PositiveInt = 1
    steps: PositiveInt = 50
    cfg: bool = True
    weight: Positive = 1.0
    prefix_groups: Annotated[int, Field(ge=0)] = 0


class ShapesFromSpec(_Strict):
    path: str
    model: str
    modality: Modality = "image"
    cfg: bool = False


class ScenarioFile(_Strict):
    """A whole scenario file; see ``rlsched.sim.scenario.Scenario`` for what each key means."""

    name: str
    profile: str
    serving: ServingSpec = ServingSpec()
    duration_s: Positive
    arrival: ArrivalSpec
    classes: Annotated[dict[Priority, ClassSpecModel], Field(min_length=1)]
    mix: tuple[ShapeSpecModel, ...] = ()
    shapes_from: ShapesFromSpec | None = None
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

def validate_scenario(data: Any, where: str, line_of: LineOf | None = None) -> ScenarioFile:
    """``data`` checked against the schema; a ``ConfigError`` naming file, line (with ``line_of``),
    key and reason."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        return ScenarioFile.model_validate(data)
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
    return f"{err['msg'].removeprefix('Value error, ')}, got {_short(err['input'])}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
