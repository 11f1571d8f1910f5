"""The declared schemas of scenario files (``envs/*.yaml``) and cost profiles (``envs/profiles/*.yaml``).

Pydantic models rather than hand-written checks, so every error names the file,
the line, the key (``arrival.rate_rps``, ``mix[2].height``, ``models.qwen-image.step.a_s``)
and the reason, and unknown keys are refused instead of ignored (a typo such as
``rate_rsp`` would otherwise run the default workload silently).

Every number has a range, from the one table of bounds (``rlsched.bounds``, which the
command-line flags and the plugin's settings read too): non-finite values are refused, and so
are values past the bounds, which lie far beyond any real deployment and keep every derived
time, count and memory figure finite (issue 18: range-checked at 0, tiny, huge and
non-finite). A boolean is never a number (``count: true`` is not one replica).
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from rlsched import bounds
from rlsched.bounds import (  # noqa: F401  (re-exported: the schema's bounds, named as before)
    MAX_CV,
    MAX_DURATION_S,
    MAX_FRAMES,
    MAX_MS,
    MAX_NUM_SEQS,
    MAX_PREFIX_GROUPS,
    MAX_REPLICAS,
    MAX_SIDE_PX,
    MAX_SLO_SCALE,
    MAX_STEPS,
    MIN_CV,
    MIN_PERIOD_S,
    SCALE_RANGE,
    Bound,
)
from rlsched.errors import ConfigError
from rlsched.sim.cache_backend import MAX_SKIP
from rlsched.sim.cache_backend import PRESETS as CACHE_PRESETS
from rlsched.sim.classes import (
    CLASS_NAME_PATTERN,
    CLASS_NAME_RULE,
    DEFAULT_QUOTA_WINDOW_S,
    MAX_CLASSES,
    QUOTA,
    QUOTA_WINDOW_S,
)
from rlsched.sim.request import MODALITIES, PRIORITY_CLASSES


def _not_a_bool(value: Any) -> Any:
    # pydantic reads true as 1 and 1.0 (even in a Literal[1, 2]); a boolean is never a number here
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


NOT_A_BOOL = BeforeValidator(_not_a_bool)


def within(bound: Bound) -> Any:
    """The pydantic ``Field`` of a number in ``bound`` (``rlsched.bounds``): its range, and finite unless
    the bound is of integers. A bound type is named once, as an alias the type checker reads:
    ``Millis: TypeAlias = Annotated[float, within(bounds.MILLIS), NOT_A_BOOL]``."""
    limits: dict[str, Any] = {} if bound.integer else {"allow_inf_nan": False}
    limits["gt" if bound.low_open else "ge"] = bound.low
    if bound.high != math.inf:
        limits["le"] = bound.high
    return Field(**limits)


def number(bound: Bound) -> Any:
    """The pydantic type of a number in ``bound``: its kind, its range, finite, and never a boolean. A
    type built at run time, so the type checker cannot read it: the schema's own fields use the aliases
    below."""
    if bound.values:
        return Annotated[Literal[bound.values], NOT_A_BOOL]
    return Annotated[int if bound.integer else float, within(bound), NOT_A_BOOL]


Positive: TypeAlias = Annotated[float, within(bounds.POSITIVE), NOT_A_BOOL]
Priority: TypeAlias = Literal["realtime", "batch", "background"]
Modality: TypeAlias = Literal["image", "video", "audio", "text"]


def _class_name(value: str) -> str:
    if not re.match(CLASS_NAME_PATTERN, value):
        raise ValueError(CLASS_NAME_RULE)
    return value


ClassName: TypeAlias = Annotated[str, AfterValidator(_class_name)]
assert set(typing.get_args(Priority)) == set(PRIORITY_CLASSES) and set(typing.get_args(Modality)) == set(MODALITIES)

Period: TypeAlias = Annotated[float, within(bounds.PERIOD_S), NOT_A_BOOL]
Millis: TypeAlias = Annotated[float, within(bounds.MILLIS), NOT_A_BOOL]
Scale: TypeAlias = Annotated[float, within(bounds.SCALE), NOT_A_BOOL]
Duration: TypeAlias = Annotated[float, within(bounds.DURATION_S), NOT_A_BOOL]
Cv: TypeAlias = Annotated[float, within(bounds.CV), NOT_A_BOOL]
Fraction: TypeAlias = Annotated[float, within(bounds.FRACTION), NOT_A_BOOL]
Side: TypeAlias = Annotated[int, within(bounds.SIDE_PX), NOT_A_BOOL]
NumSeqs: TypeAlias = Annotated[int, within(bounds.NUM_SEQS), NOT_A_BOOL]
BurstFactor: TypeAlias = Annotated[float, within(bounds.BURST_FACTOR), NOT_A_BOOL]
Phase: TypeAlias = Annotated[float, within(bounds.PHASE_S), NOT_A_BOOL]
SloScale: TypeAlias = Annotated[float, within(bounds.SLO_SCALE), NOT_A_BOOL]
ClassWeight: TypeAlias = Annotated[float, within(bounds.CLASS_WEIGHT), NOT_A_BOOL]
Frames: TypeAlias = Annotated[int, within(bounds.FRAMES), NOT_A_BOOL]
Steps: TypeAlias = Annotated[int, within(bounds.STEPS), NOT_A_BOOL]
PrefixGroups: TypeAlias = Annotated[int, within(bounds.PREFIX_GROUPS), NOT_A_BOOL]
Replicas: TypeAlias = Annotated[int, within(bounds.REPLICAS), NOT_A_BOOL]
Seed: TypeAlias = Annotated[int, within(bounds.SEED), NOT_A_BOOL]
TruthScale: TypeAlias = Annotated[float, within(bounds.TRUTH_SCALE), NOT_A_BOOL]
StepTime: TypeAlias = Annotated[float, within(bounds.STEP_S), NOT_A_BOOL]
Coeff: TypeAlias = Annotated[float, within(bounds.COEFF), NOT_A_BOOL]
LinearGflop: TypeAlias = Annotated[float, within(bounds.LINEAR_GFLOP), NOT_A_BOOL]
AttnFlop: TypeAlias = Annotated[float, within(bounds.ATTN_FLOP), NOT_A_BOOL]
RequestTime: TypeAlias = Annotated[float, within(bounds.REQUEST_S), NOT_A_BOOL]
WeightsGb: TypeAlias = Annotated[float, within(bounds.WEIGHTS_GB), NOT_A_BOOL]
PatchPx: TypeAlias = Annotated[int, within(bounds.PATCH_PX), NOT_A_BOOL]
TemporalStride: TypeAlias = Annotated[int, within(bounds.TEMPORAL_STRIDE), NOT_A_BOOL]
CfgPasses: TypeAlias = Annotated[int, within(bounds.CFG_PASSES), NOT_A_BOOL]
GpuGb: TypeAlias = Annotated[float, within(bounds.GPU_GB), NOT_A_BOOL]
Quota: TypeAlias = Annotated[float, within(QUOTA), NOT_A_BOOL]
QuotaWindow: TypeAlias = Annotated[float, within(QUOTA_WINDOW_S), NOT_A_BOOL]
SkipMean: TypeAlias = Annotated[float, within(bounds.floats(0, MAX_SKIP)), NOT_A_BOOL]
SkipSpread: TypeAlias = Annotated[float, within(bounds.floats(0, 0.5)), NOT_A_BOOL]
SpDegree: TypeAlias = Annotated[Literal[1, 2, 4, 8], NOT_A_BOOL]
CfgParallel: TypeAlias = Annotated[Literal[1, 2], NOT_A_BOOL]
assert typing.get_args(typing.get_args(SpDegree)[0]) == bounds.SP_DEGREE.values
assert typing.get_args(typing.get_args(CfgParallel)[0]) == bounds.CFG_PARALLEL.values


class Strict(BaseModel):
    """A declared file's block, or a recipe config block: unknown keys refused, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_M = TypeVar("_M", bound=Strict)


class ServingSpec(Strict):
    """``serving:``: vLLM-Omni's diffusion-scheduler knobs, as a deployment sets them."""

    mode: Literal["request", "step"] = "request"
    """``request``: waves run to completion; ``step``: one denoise step per round (preemption)."""
    max_num_seqs: NumSeqs = 1
    """Most requests in one batch (vLLM-Omni's ``max_num_seqs``)."""
    request_batch_max_wait_ms: Millis = 0.0
    """Request mode: how long FIFO may hold a short wave to coalesce more requests."""
    engine_overhead_ms: Millis = 0.0
    """Engine time per wave outside the GPU's work (busy loop, IPC), added to each batch."""
    engine_overhead_ms_per_mpx: Millis = 0.0
    """Engine time per output megapixel·frame of a finishing request (output tensors to images)."""
    quota_window_s: QuotaWindow = DEFAULT_QUOTA_WINDOW_S
    """The sliding window, in seconds, over which each class's share of the GPU's time is measured against
    its ``quota`` (``classes.NAME.quota``; read only when a class has one)."""


class PoissonSpec(Strict):
    """Poisson arrivals (the default when ``process`` is left out)."""

    process: Literal["poisson"]
    rate_rps: Positive
    """Mean arrivals per second (of the whole stage when the scenario has ``replicas``)."""


class RenewalSpec(Strict):
    """A renewal process: gamma- or Weibull-distributed gaps of mean ``1 / rate_rps``."""

    process: Literal["gamma", "weibull"]
    rate_rps: Positive
    """Mean arrivals per second."""
    cv: Cv = 1.0
    """Coefficient of variation of the gaps (> 1: bursty; 1 with gamma: Poisson)."""


class OnOffSpec(Strict):
    """A two-state MMPP: exponential on and off sojourns, the rate ``burst_factor`` times higher while on."""

    process: Literal["onoff"]
    rate_rps: Positive
    """Long-run mean arrivals per second (the off-state rate is set to keep it)."""
    on_s: Period = 60.0
    """Mean length of an on (burst) period, seconds."""
    off_s: Period = 120.0
    """Mean length of an off period, seconds."""
    burst_factor: BurstFactor = 4.0
    """The on-state rate over the off-state rate."""


class DiurnalSpec(Strict):
    """Poisson at ``rate_rps · (1 + amplitude · sin(2π (t + phase_s) / period_s))`` (by thinning)."""

    process: Literal["diurnal"]
    rate_rps: Positive
    """Mean arrivals per second over a whole period."""
    period_s: Period = 86400.0
    """Length of one cycle, seconds (a day by default)."""
    amplitude: Fraction = 0.5
    """Relative swing of the rate: peak ``rate_rps · (1 + amplitude)``, trough ``rate_rps · (1 - amplitude)``."""
    phase_s: Phase = 0.0
    """Shift of the cycle, seconds: the window starts at ``phase_s`` into it."""


class ServeGenSpec(Strict):
    """A ServeGen client trace: each 600 s window draws its own renewal gaps at the trace's rate and CV."""

    process: Literal["servegen"]
    path: str
    """The ServeGen CSV (beside the scenario file first, then the working folder, then ``envs/``)."""
    rate_scale: Scale = 1.0
    """Multiplies the trace's rates."""


class TraceArrivalSpec(Strict):
    """Arrival times replayed from an Azure-format trace (``TIMESTAMP`` column); those past ``duration_s`` are cut."""

    process: Literal["trace"]
    path: str
    """The trace CSV (beside the scenario file first, then the working folder, then ``envs/``)."""
    time_scale: Scale = 1.0
    """Divides the trace's times: below 1 stretches them (fewer arrivals per second)."""


ArrivalSpec = Annotated[PoissonSpec | RenewalSpec | OnOffSpec | DiurnalSpec | ServeGenSpec | TraceArrivalSpec,
                        Field(discriminator="process")]
LineOf = Callable[[tuple[Any, ...]], "int | None"]
ARRIVAL_TAGS = ("poisson", "gamma", "weibull", "onoff", "diurnal", "servegen", "trace")


class ClassSpecModel(Strict):
    """One priority class under ``classes:``."""

    share: Positive
    """Relative (normalised by the largest share first, so any finite positive numbers work)."""
    slo_scale: SloScale
    """A request's SLO is ``slo_scale`` × its standalone execution time (vLLM-Omni's benchmark definition)."""
    weight: ClassWeight | None = None
    """Value of meeting one of its SLOs in the weighted SLO attainment (default: 3, 2, 1 for ``realtime``,
    ``batch``, ``background``; 1 for a class of your own)."""
    tier: Priority | None = None
    """The shipped class the learned policies read it as (default: a shipped name its own; another by its
    weight's rank, heaviest ``realtime``: ``rlsched.sim.classes.default_tiers``)."""
    quota: Quota | None = None
    """The most of the GPU's time this class may take while requests of other classes wait, a fraction in
    (0, 1] (1: no cap): a work-conserving cap. When its share of the GPU-seconds started over the last
    ``serving.quota_window_s`` has reached its quota and a request of another class (one not held itself)
    waits, its requests are held out of the decision and the policy decides over the others; when nothing
    else waits it runs, so the GPU never idles because of a quota. A batch's seconds are its standalone
    cost estimate, split among its requests by their standalone step times (``rlsched.sim.quota``). The
    quotas of a scenario need not sum to 1; none: never held."""


class ShapeSpecModel(Strict):
    """One entry of ``mix:``: a request shape and its relative frequency."""

    model: str
    """A model of the profile."""
    modality: Modality
    """What the request outputs."""
    height: Side
    """Pixels."""
    width: Side
    """Pixels."""
    num_frames: Frames = 1
    """1 for an image; a video's frame count."""
    steps: Steps = 50
    """Denoise steps."""
    cfg: bool = True
    """Classifier-free guidance (two passes per step, as the profile's stack runs them)."""
    weight: Positive = 1.0
    """Relative frequency in the mix."""
    prefix_groups: PrefixGroups = 0
    """> 0: requests carry a prompt-prefix id in ``[0, prefix_groups)`` (cache-aware batching)."""


class ShapesFromSpec(Strict):
    """``shapes_from:``: shapes sampled from a Hetu-DiT trace's rows instead of ``mix``."""

    path: str
    """The Hetu-DiT trace (beside the scenario file first, then the working folder, then ``envs/``)."""
    model: str
    """The profile's model every shape runs on."""
    modality: Modality = "image"
    """What every request outputs."""
    cfg: bool = False
    """Classifier-free guidance on every request."""


class ReplicaGroupSpec(Strict):
    """``count`` replicas of ``sp_degree`` × ``cfg_parallel`` GPUs each, on ``profile`` (default: the
    scenario's)."""

    count: Replicas = 1
    """Replicas of the group; every group of a stage together has at most ``MAX_REPLICAS``."""
    sp_degree: SpDegree = 1
    """Sequence-parallel degree: the GPUs one request is split over (the profile needs an ``sp`` block above 1)."""
    cfg_parallel: CfgParallel = 1
    """CFG-parallel degree (vLLM-Omni ``cfg_parallel_size``): 2 runs a CFG request's two guidance
    branches on two groups of ``sp_degree`` GPUs; the profile needs a ``cfg_parallel`` block."""
    profile: str | None = None
    """The group's cost profile, a name or a path (default: the scenario's)."""
    name: str | None = None
    """Replica names are ``NAME-i`` (default: ``PROFILE@spD``)."""


class CacheTruthSpec(Strict):
    """``truth.cache``: a cache backend (TeaCache, Cache-DiT) that skips a hidden share of each request's
    denoise steps, drawn per request (``rlsched.sim.cache_backend``, where the numbers come from). A preset's
    name stands for the whole block: ``cache: teacache``, ``cache-dit`` or ``fbcache``; ``preset:`` with
    other keys overrides them."""

    preset: Literal["", "teacache", "cache-dit", "fbcache"] = ""
    """Start from this backend's values (``""``: the defaults below)."""
    skip_mean: SkipMean = 0.4
    """Mean share of a request's denoise steps skipped."""
    skip_spread: SkipSpread = 0.15
    """Standard deviation of the share across requests (it depends on the prompt; unseen by the scheduler)."""
    dist: Literal["beta", "uniform", "fixed"] = "beta"
    """How the shares spread around their mean (``fixed``: every request at the mean)."""
    check_share: Fraction = 0.0
    """Share of a step's time a skipped step still pays (the check that decided to skip it)."""
    seed: Seed = 0
    """The cache's own seed: each request's share is a function of it and the request's id and arrival."""

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        name = data if isinstance(data, str) else data.get("preset") if isinstance(data, dict) else None
        if not isinstance(name, str) or name not in CACHE_PRESETS:
            return {"preset": data} if isinstance(data, str) else data  # the Literal names the presets
        return {**CACHE_PRESETS[name], "preset": name, **(data if isinstance(data, dict) else {})}

    @model_validator(mode="after")
    def _spread_fits(self) -> CacheTruthSpec:
        mean, spread = self.skip_mean, self.skip_spread
        if self.dist == "beta" and 0 < mean and spread ** 2 >= mean * (1 - mean):
            raise ValueError(f"skip_mean {self.skip_mean:g}, skip_spread {self.skip_spread:g}: a beta of this mean "
                             f"needs skip_spread below {math.sqrt(self.skip_mean * (1 - self.skip_mean)):.3g}")
        return self


assert set(typing.get_args(CacheTruthSpec.model_fields["preset"].annotation)) == {"", *CACHE_PRESETS}


class TruthSpec(Strict):
    """``truth:``: the cost the GPU really runs at (``rlsched.sim.truth``); decisions read ``profile:``."""

    profile: str = ""
    """Execute on this profile, a name or a path (``""``: the scenario's own)."""
    time_scale: TruthScale = 1.0
    """Multiplies every time term of the profile."""
    quadratic_scale: TruthScale = 1.0
    """Multiplies the attention term (∝ tokens²) once more."""
    memory_scale: TruthScale = 1.0
    """Multiplies the per-request memory (activations, decode peak)."""
    encode_scale: TruthScale = 1.0
    """Multiplies the text/condition encode once more."""
    decode_scale: TruthScale = 1.0
    """Multiplies the VAE decode once more (memory-bandwidth bound: another GPU's differs in form)."""
    comm_scale: TruthScale = 1.0
    """Multiplies the sequence- and CFG-parallel communication terms once more (PCIe against NVLink)."""
    cache: CacheTruthSpec | None = None
    """A cache backend skipping a hidden per-request share of the denoise steps (below; a preset's name
    alone: ``cache: teacache``); none: every step runs."""


class ScenarioFile(Strict):
    """A whole scenario file; see ``rlsched.sim.scenario.Scenario`` for what each key means."""

    name: str
    """What tables and plots show (need not match the file's name)."""
    profile: str
    """The cost profile: a shipped name (``envs/profiles/NAME.yaml``) or a path (with its suffix; beside the
    scenario file first, then the working folder)."""
    serving: ServingSpec = ServingSpec()
    """vLLM-Omni's scheduler knobs (below)."""
    duration_s: Duration
    """Arrivals are generated over ``[0, duration_s)``; the run then drains the queue."""
    arrival: ArrivalSpec
    """The arrival process: ``process`` and its keys (below)."""
    classes: Annotated[dict[ClassName, ClassSpecModel], Field(min_length=1, max_length=MAX_CLASSES)]
    """1 to 8 priority classes, each with its share, SLO scale, weight and tier: the shipped ``realtime``,
    ``batch``, ``background``, or names of your own (a letter, then letters, digits, ``_``, ``-``)."""
    mix: tuple[ShapeSpecModel, ...] = ()
    """Request shapes and their weights (a scenario needs ``mix`` or ``shapes_from``)."""
    shapes_from: ShapesFromSpec | None = None
    """Shapes from a Hetu-DiT trace instead of ``mix``."""
    replicas: tuple[ReplicaGroupSpec, ...] = ()
    """A multi-replica stage, groups of replicas (empty: one GPU)."""
    truth: TruthSpec = TruthSpec()
    """The cost the GPU really runs at, when it differs from ``profile`` (``rlsched.sim.truth``)."""
    description: str = ""
    """Free text."""

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



class StackSpec(Strict):
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


# ------------------------------------------------------------------ cost profiles

class StepCoeffs(Strict):
    """A denoise step costs ``max(k·floor_s, k·a_s + b·Σtokens + c·Σtokens²)`` (``rlsched.sim.cost``)."""

    floor_s: StepTime
    a_s: StepTime
    b_s_per_mtok: Coeff
    c_s_per_gtok2: Coeff

    @model_validator(mode="after")
    def _takes_time(self) -> StepCoeffs:
        if not (self.floor_s or self.a_s or self.b_s_per_mtok or self.c_s_per_gtok2):
            raise ValueError("a step must take time: floor_s, a_s, b_s_per_mtok and c_s_per_gtok2 are all 0")
        return self


class FlopsSpec(Strict):
    linear_gflop_per_token: LinearGflop = 0.0
    attn_flop_per_token2: AttnFlop = 0.0


class ModelSpec(Strict):
    """One model of a profile; see ``rlsched.sim.cost.ModelCost`` for what each key means (its ``sp``
    and ``cfg_parallel`` blocks are taken out and checked by ``rlsched.sim.cost`` before this schema
    sees the model)."""

    modality: Modality
    step: StepCoeffs
    encode_s: RequestTime
    decode_s_per_mpx: RequestTime
    weights_gb: WeightsGb
    act_gb_per_ktok: Coeff
    vae_gb_per_mpx: Coeff
    token_rule: Literal["latent", "sequence"] = "latent"
    patch_px: PatchPx = 16
    temporal_stride: TemporalStride = 4
    cfg_passes: CfgPasses = 2
    memory_form: Literal["sum", "max"] = "sum"
    flops: FlopsSpec | None = None


class GpuSpec(Strict):
    name: str
    memory_gb: GpuGb
    peak_bf16_tflops: Coeff = 0.0


class ProfileFile(Strict):
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
    spec = _validate(ScenarioFile, data, where, line_of)
    _check_stage(spec, where, line_of or (lambda loc: None))
    return spec


def group_name(name: str | None, profile: str, sp_degree: int, cfg_parallel: int) -> str:
    """A replica group's name: its own, else ``PROFILE@spD`` (``PROFILE@spDcfg2`` with CFG parallelism);
    its replicas are ``NAME-0``, ``NAME-1``, ..."""
    return name or f"{profile}@sp{sp_degree}" + (f"cfg{cfg_parallel}" if cfg_parallel > 1 else "")


def _check_stage(spec: ScenarioFile, where: str, line_of: LineOf) -> None:
    """The stage as a whole: at most ``MAX_REPLICAS`` replicas in all its groups, and one name per group
    (two groups of one name gave ambiguous ``per_replica`` rows)."""
    def at(loc: tuple[Any, ...], key: str) -> str:
        line = line_of(loc)
        return f"{where}:{line}: {key}" if line else f"{where}: {key}"

    total = sum(g.count for g in spec.replicas)
    if total > MAX_REPLICAS:
        raise ConfigError(at(("replicas",), "replicas"), f"{total} replicas in all groups; a stage has at most "
                                                         f"{MAX_REPLICAS}")
    first: dict[str, int] = {}
    for j, g in enumerate(spec.replicas):
        name = group_name(g.name, g.profile or spec.profile, g.sp_degree, g.cfg_parallel)
        i = first.setdefault(name, j)
        if i != j:
            loc_i, loc_j = (("replicas", k, "name") if spec.replicas[k].name else ("replicas", k) for k in (i, j))
            line_i = line_of(loc_i)
            raise ConfigError(at(loc_j, f"replicas[{j}].name"),
                              f"{name!r} is also the name of replicas[{i}]" + (f" (line {line_i})" if line_i else "")
                              + ": their replicas' per_replica rows would be ambiguous; give each group its own name")


def _validate(model: type[_M], data: Any, where: str, line_of: LineOf | None) -> _M:
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise schema_error(exc, where, line_of) from None


def raised_config_error(exc: ValidationError) -> ConfigError | None:
    """The ``ConfigError`` a validator raised for pydantic's first refusal (a message of its own, naming
    its field), if that is what it was."""
    raised = exc.errors(include_url=False)[0].get("ctx", {}).get("error")
    return raised if isinstance(raised, ConfigError) else None


def schema_error(exc: ValidationError, where: str, line_of: LineOf | None = None) -> ConfigError:
    """One ``ConfigError`` listing every problem as ``key (line N): reason``; the first in ``where``.
    A ``ConfigError`` a validator raised is passed on as it is (``raised_config_error``)."""
    raised = raised_config_error(exc)
    if raised is not None:
        return raised
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
