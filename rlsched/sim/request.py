"""A request (immutable spec) and its record (what happened to it).

The compatibility key mirrors vLLM-Omni 0.30: requests batch together only when
they share ``RequestBatchSamplingParamsKey`` (model, shape, frames, steps, CFG);
in step mode the key omits the step count, like ``StepBatchSamplingParamsKey``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlsched.errors import InvalidRequest

PRIORITY_CLASSES: tuple[str, ...] = ("realtime", "batch", "background")
"""The shipped classes, and the tiers every class maps onto (``rlsched.sim.classes``): the learned
policies' observations and actions are laid out over these three."""
TIER_WEIGHTS = {"realtime": 3.0, "batch": 2.0, "background": 1.0}
"""The shipped classes' weights in the weighted SLO attainment (realtime counts 3x background)."""
MODALITIES: tuple[str, ...] = ("image", "video", "audio", "text")
CLASS_INDEX = {c: i for i, c in enumerate(PRIORITY_CLASSES)}
MODALITY_INDEX = {m: i for i, m in enumerate(MODALITIES)}

Key = tuple[str, int, int, int, int, bool]
EngineKey = tuple[str, int, int, int, int, bool, int]
"""A record's key in the engine (``PluginState``): ``Key`` and the id of vLLM's own batching key, so that equal
keys mean vLLM would batch the two requests."""


@dataclass(frozen=True, slots=True)
class Request:
    """One generation request as the user sent it."""

    id: int
    """Unique within a workload."""
    arrival_s: float
    """Arrival time in seconds since the start of the run."""
    model: str
    """Name of the model entry in the cost profile that serves it."""
    modality: str
    """One of ``MODALITIES``."""
    height: int
    """Pixels (audio/text: 1)."""
    width: int
    """Pixels (audio/text: 1)."""
    num_frames: int
    """Video frames; 1 for images; latent length for audio/text."""
    num_inference_steps: int
    """Denoising steps."""
    cfg: bool
    """Classifier-free guidance on (two DiT passes per step)."""
    priority: str
    """Its class's name: one of ``PRIORITY_CLASSES``, or of the scenario's own ``classes``."""
    slo_s: float
    """End-to-end latency objective in seconds (``inf`` = none)."""
    prefix_id: int = -1
    """Shared prompt-prefix group for cache-aware batching (-1: none)."""
    tier: str = ""
    """The one of ``PRIORITY_CLASSES`` its class maps onto (``rlsched.sim.classes``); ``""``: the
    class's own name, which must then be a shipped one."""
    weight: float = 0.0
    """Its class's weight in the weighted SLO attainment; ``0``: the tier's (``TIER_WEIGHTS``)."""

    def __post_init__(self) -> None:
        _check_positive_int(self, ("height", "width", "num_frames", "num_inference_steps"))
        if not math.isfinite(self.arrival_s) or self.arrival_s < 0:
            raise InvalidRequest("arrival_s", self.arrival_s, "must be a finite number >= 0")
        if math.isnan(self.slo_s) or self.slo_s <= 0:
            raise InvalidRequest("slo_s", self.slo_s, "must be > 0 (inf for none)")
        if not isinstance(self.priority, str) or not self.priority:
            raise InvalidRequest("priority", self.priority, "must be a class name")
        if not self.tier:  # a shipped class named alone (the shipped scenarios, traces, the plugin's defaults)
            if self.priority not in CLASS_INDEX:
                raise InvalidRequest("priority", self.priority, f"must be one of {PRIORITY_CLASSES}")
            object.__setattr__(self, "tier", PRIORITY_CLASSES[CLASS_INDEX[self.priority]])
        elif self.tier not in CLASS_INDEX:
            raise InvalidRequest("tier", self.tier, f"must be one of {PRIORITY_CLASSES}")
        if not self.weight:
            object.__setattr__(self, "weight", TIER_WEIGHTS[self.tier])
        elif not 0 < self.weight < math.inf:
            raise InvalidRequest("weight", self.weight, "must be a finite number > 0")
        if self.modality not in MODALITY_INDEX:
            raise InvalidRequest("modality", self.modality, f"must be one of {MODALITIES}")

    def key(self, step_mode: bool = False) -> Key:
        """Compatibility key: only requests with equal keys may share a batch (equal keys are one
        tuple: a million records of a few shapes hold a few keys, not a million)."""
        steps = 0 if step_mode else self.num_inference_steps
        key = (self.model, self.height, self.width, self.num_frames, steps, self.cfg)
        shared = _KEYS.get(key)
        if shared is None:
            if len(_KEYS) >= _KEYS_MAX:  # a server meeting ever new shapes: bounded, not a leak
                _KEYS.clear()
            shared = _KEYS[key] = key
        return shared


_KEYS: dict[Key, Key] = {}
_KEYS_MAX = 4096


def _check_positive_int(req: Request, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(req, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidRequest(name, value, "must be a positive integer")


# Record statuses.
WAITING, RUNNING, COMPLETED, FAILED_OOM, REJECTED = (
    "waiting", "running", "completed", "failed_oom", "rejected")


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request, plus cost figures cached at admission."""

    request: Request
    tokens: float
    """Effective latent tokens per step, in millions (CFG counts twice)."""
    quad: float
    """Attention term: passes × tokens², in 1e9 token²."""
    encode_s: float
    """Prompt-encode time, paid when the request first runs."""
    decode_s: float
    """VAE-decode time, paid when its last step ends."""
    work_s: float
    """Standalone execution time (batch of one, encode + steps + decode)."""
    step_s: float
    """Standalone time of one denoise step."""
    mem_gb: float
    """Activation + decode memory this request adds to a batch."""
    deadline_s: float
    status: str = WAITING
    first_scheduled_s: float = math.nan
    finish_s: float = math.nan
    steps_done: int = 0
    batch_id: int = -1
    preemptions: int = 0
    reject_reason: str = ""
    """Why the request was rejected (``rejected`` status only)."""
    key: Key | EngineKey = field(default=("", 0, 0, 0, 0, False))

    def __post_init__(self) -> None:
        # Records of one shape have equal cost figures: they share one tuple's float objects
        # rather than hold six new floats each (144 bytes a record, 144 MB for a million).
        figures = (self.tokens, self.quad, self.encode_s, self.decode_s, self.work_s, self.step_s, self.mem_gb)
        shared = _FIGURES.get(figures)
        if shared is None:
            _keep(figures)
        elif all(type(v) is float for v in figures):  # 2 == 2.0, but an int stays an int
            self.tokens, self.quad, self.encode_s, self.decode_s, self.work_s, self.step_s, self.mem_gb = shared

    @property
    def remaining_s(self) -> float:
        """Standalone time still to run (steps left × step time)."""
        left = self.request.num_inference_steps - self.steps_done
        return self.work_s * left / self.request.num_inference_steps

    @property
    def slo_met(self) -> bool:
        return self.status == COMPLETED and self.finish_s <= self.deadline_s


def _keep(figures: tuple[float, ...]) -> None:
    """Remember ``figures`` for the records to come when sharing them is exact: floats only, none
    zero (a shared 0.0 would turn -0.0 into 0.0) or NaN (equal to nothing). Bounded: cleared when full."""
    if 0.0 in figures or any(type(v) is not float or v != v for v in figures):
        return
    if len(_FIGURES) >= _FIGURES_MAX:
        _FIGURES.clear()
    _FIGURES[figures] = figures


_FIGURES: dict[tuple[float, ...], tuple[float, ...]] = {}
_FIGURES_MAX = 4096
"""Distinct figure sets kept (one per shape and model: a workload has a few dozen)."""
