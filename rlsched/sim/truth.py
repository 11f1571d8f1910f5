"""The cost a GPU really runs at, beside the profile every decision reads (a scenario's ``truth:``).

A profile is fitted offline to someone's measurements; a user's stack differs (another GPU, attention
backend, ``torch.compile``, FP8, step skipping). ``Truth`` says how: execute on another profile
(``profile: NAME``) and/or scale the believed one::

    truth: {time_scale: 1.3}                  # every time term 30 % slower than believed
    truth: {quadratic_scale: 2.0}             # the attention term (∝ tokens²) twice the belief: shape-dependent
    truth: {memory_scale: 1.15}               # activations and decode peaks 15 % above the belief
    truth: {decode_scale: 1.4}                # the VAE decode 40 % slower, the rest as believed
    truth: {comm_scale: 3}                    # SP/CFG communication 3x the belief (PCIe, not NVLink)
    truth: {profile: qwen-image-a100-vllm-omni}  # another profile altogether (its GPU memory too)
    truth: {cache: teacache}                  # a cache backend skips a hidden share of each request's steps

What a deployment hides, as truths (issue 46):

* a **cache backend** (TeaCache, Cache-DiT, first-block cache: ``cache:``, ``rlsched.sim.cache_backend``, where
  its numbers come from): each request skips its own share of its denoise steps, drawn per request and
  seen by no decision. The only truth here that differs *per request*, not per model;
* **``torch.compile``** and fused kernels: a uniform speed-up is ``time_scale`` (cache-dit's FLUX table on an
  L20: 10.28 → 8.48 s with compile, ``time_scale: 0.82``; issue 46 cites ×1.5–1.6 on FLUX on an H100,
  ``time_scale: 0.65``); an attention-only one (a faster attention kernel: FlashAttention-3, SageAttention)
  is ``quadratic_scale`` below 1;
* **a GPU of another form**: ``profile:`` of another GPU *and* model family, whose coefficients differ in
  form (the fixed, linear and attention terms in other proportions), not by one scale; or the shipped
  profile with one part of a request's time scaled alone: ``encode_scale`` (the text encoder),
  ``decode_scale`` (the VAE decode: memory-bandwidth bound, so a GPU whose bandwidth is a smaller share of
  its FLOPs — an L40S's 864 GB/s against 362 TFLOPS, an H100's 3,350 against 989 — decodes slower than its
  transformer steps say) and ``comm_scale`` (the sequence-parallel and CFG-parallel communication: PCIe
  instead of NVLink).

The simulator then runs every batch (its duration, its memory, the OOM check) at the true cost, while
policies, routers, the central queue and every published prediction read the scenario's ``profile:`` —
exactly what a deployed scheduler holds. SLOs stay ``slo_scale`` × the believed standalone time: the
number a user wrote against the profile. Scales multiply a model's coefficients: ``time_scale`` every
time term (step floor, fixed, linear and attention terms, encode, decode, the SP and CFG-parallel
communication terms), ``quadratic_scale`` the attention term once more, ``encode_scale`` the encode,
``decode_scale`` the decode and ``comm_scale`` the SP and CFG-parallel communication terms once more
(every one of them, the latency of the CFG exchange included), ``memory_scale`` the per-request
memory (activations and decode peak; the weights are known to the byte). ``profile:`` applies to the
replicas on the scenario's profile; a replica group that names its own profile keeps it, scaled.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from pydantic import ValidationError

from rlsched.errors import ConfigError
from rlsched.sim.cache_backend import CacheSkip
from rlsched.sim.cost import CFGCost, CostModel, ModelCost, SPCost, load_profile
from rlsched.sim.schema import TruthSpec, raised_config_error, schema_error

STEP_TERMS = ("floor_s", "a_s", "b_s_per_mtok", "c_s_per_gtok2")
"""A model's denoise-step coefficients (a profile file's ``step:`` block)."""
TIME_TERMS = (*STEP_TERMS, "encode_s", "decode_s_per_mpx")
"""What ``time_scale`` multiplies on a model (and ``SP_TIME_TERMS`` of its ``sp`` block)."""
SP_TIME_TERMS = ("ulysses_comm_s_per_mtok", "ulysses_sync_s_per_degree", "ring_comm_s_per_mtok",
                 "ring_sync_s_per_degree")
FORM_TERMS = ("fixed", "encode", "decode", "comm")
"""The parts of a model's time that a scale tuple may scale once more, after ``(time, quadratic, memory)``
(``rescaled``; the calibration's form terms)."""
SCALE_TERMS = ("time", "attention", "memory", *FORM_TERMS)
"""A scale tuple's entries by the names the plugin's log line and ``rlsched_calibration_scale`` give them
(``rescaled``'s quadratic scale is ``attention``)."""
FIXED_TERMS = ("floor_s", "a_s")
"""A step's terms that do not grow with its tokens (what the calibration's ``fixed`` scale multiplies)."""
MEMORY_TERMS = ("act_gb_per_ktok", "vae_gb_per_mpx")
"""What ``memory_scale`` multiplies (the weights are known to the byte)."""


@dataclass(frozen=True)
class Truth:
    """How the GPU's real cost differs from the scenario's profile (see the module docstring)."""

    profile: str = ""
    """Execute on this profile (name or path; ``""``: the scenario's own)."""
    time_scale: float = 1.0
    quadratic_scale: float = 1.0
    memory_scale: float = 1.0
    encode_scale: float = 1.0
    decode_scale: float = 1.0
    comm_scale: float = 1.0
    """The SP and CFG-parallel communication terms (a one-GPU layout has none)."""
    cache: CacheSkip | None = None
    """A cache backend's hidden per-request skipping (a ``truth.cache`` mapping is read into one)."""

    def __post_init__(self) -> None:
        if isinstance(self.cache, dict):
            object.__setattr__(self, "cache", CacheSkip(**self.cache))

    @property
    def exact(self) -> bool:
        """The profile is the truth (no ``truth:``, or one that changes nothing)."""
        return not self.profile and self.cache is None and all(s == 1.0 for s in self._scales())

    def _scales(self) -> tuple[float, ...]:
        """``rescaled``'s ``(time, quadratic, memory, fixed, encode, decode, comm)``."""
        return (self.time_scale, self.quadratic_scale, self.memory_scale, 1.0, self.encode_scale,
                self.decode_scale, self.comm_scale)

    def apply(self, belief: CostModel, own_profile: bool = False) -> CostModel | None:
        """The true cost of a replica whose decisions read ``belief`` (its profile at one GPU);
        ``own_profile``: its group names its own profile, which ``profile:`` does not replace.
        None when the belief is the truth."""
        if self.exact:
            return None
        base = load_profile(self.profile) if self.profile and not own_profile else belief
        scales = self._scales()
        true = base if all(s == 1.0 for s in scales) else rescaled(base, dict.fromkeys(base.models, scales), "truth")
        if self.cache is None:
            return true
        return dataclasses.replace(true, name=f"{true.name}×cache", cache=self.cache.fresh())

    @classmethod
    def parse(cls, text: str, where: str) -> Truth:
        """``time_scale=1.3,quadratic_scale=2`` or ``profile=NAME`` (the ``truth:`` keys, comma-separated),
        checked as the scenario key is; ``ConfigError`` naming ``where`` and the key otherwise."""
        pairs = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, value = part.partition("=")
            if not eq:
                raise ConfigError(where, f"{part!r}: expected KEY=VALUE (keys: {', '.join(TruthSpec.model_fields)})")
            pairs[key.strip()] = value.strip()
        numbers = {k: _number(v) if k != "profile" else v for k, v in pairs.items()}
        try:
            spec = TruthSpec.model_validate(numbers)
        except ValidationError as exc:
            raise raised_config_error(exc) or schema_error(exc, where) from None
        return cls(**spec.model_dump())

    def label(self) -> str:
        """Short text for tables and logs: ``profile=X time×1.3 attn×2 mem×1.15`` (``exact``)."""
        parts = [f"profile={self.profile}"] if self.profile else []
        parts += [f"{what}×{scale:g}" for what, scale in (
            ("time", self.time_scale), ("attn", self.quadratic_scale), ("mem", self.memory_scale),
            ("encode", self.encode_scale), ("decode", self.decode_scale), ("comm", self.comm_scale)) if scale != 1.0]
        parts += [f"cache={self.cache.label()}"] if self.cache is not None else []
        return " ".join(parts) or "exact"


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text  # the schema names the key and says what it expected


EXACT = Truth()
BELIEFS = ("profile", "truth")
"""What decisions read: the scenario's profile (as deployed), or its truth (deployed with the true profile)."""


def decided_on(belief: str, cost: CostModel, true: CostModel | None) -> tuple[CostModel, CostModel | None]:
    """(what decisions read, what the GPU runs at — None: the same) of a replica believing ``cost`` on a GPU
    that runs at ``true``: ``belief="truth"`` decides on the truth too (``BELIEFS``). The truth is still
    passed as what the GPU runs at, so that replica plays the same deployment as the others — the plugin's
    memory check on every batch (``Simulator.memory_check``) — only with the true profile in hand."""
    return (true, true) if belief == "truth" and true is not None else (cost, true)


def scaled(cost: CostModel, time_scale: float = 1.0, quadratic_scale: float = 1.0,
           memory_scale: float = 1.0) -> CostModel:
    """``cost`` with every model's coefficients scaled (see the module docstring); ``cost`` itself
    when every scale is 1."""
    if time_scale == quadratic_scale == memory_scale == 1.0:
        return cost
    return rescaled(cost, {name: (time_scale, quadratic_scale, memory_scale) for name in cost.models}, "truth")


def rescaled(cost: CostModel, scales: dict[str, tuple[float, ...]], tag: str) -> CostModel:
    """``cost`` with each named model's coefficients scaled by its ``(time, quadratic, memory[, fixed, encode,
    decode, comm])`` (models not named keep theirs; each of ``FORM_TERMS``, default 1, scales its part once
    more: ``fixed`` the step's floor and per-forward cost, ``encode`` the encode, ``decode`` the decode,
    ``comm`` the SP and CFG-parallel communication), named ``NAME×tag``; the class (a layout's cost) and every
    other field kept."""
    models = {name: _scaled_model(m, *scales[name]) if name in scales else m for name, m in cost.models.items()}
    return dataclasses.replace(cost, name=f"{cost.name}×{tag}", models=models)


def _scaled_model(m: ModelCost, time: float, quad: float, memory: float, fixed: float = 1.0, encode: float = 1.0,
                  decode: float = 1.0, comm: float = 1.0) -> ModelCost:
    changes: dict[str, object] = {k: getattr(m, k) * time for k in TIME_TERMS}
    changes["c_s_per_gtok2"] = m.c_s_per_gtok2 * time * quad
    for k in FIXED_TERMS:
        changes[k] = getattr(m, k) * time * fixed
    changes["encode_s"] = m.encode_s * time * encode
    changes["decode_s_per_mpx"] = m.decode_s_per_mpx * time * decode
    changes.update({k: getattr(m, k) * memory for k in MEMORY_TERMS})
    if m.sp is not None:
        changes["sp"] = _scaled_sp(m.sp, time * comm)
    if m.cfg_parallel is not None:
        changes["cfg_parallel"] = _scaled_cfg(m.cfg_parallel, time * comm)
    return dataclasses.replace(m, **changes)


def _scaled_sp(sp: SPCost, time: float) -> SPCost:
    return dataclasses.replace(sp, **{k: getattr(sp, k) * time for k in SP_TIME_TERMS if getattr(sp, k) is not None})


def _scaled_cfg(cfg: CFGCost, time: float) -> CFGCost:
    return dataclasses.replace(cfg, latency_s=cfg.latency_s * time,
                               link_gb_s=cfg.link_gb_s / time if time > 0 else math.inf)  # time 0: no exchange


__all__ = ["BELIEFS", "EXACT", "FIXED_TERMS", "FORM_TERMS", "MEMORY_TERMS", "SCALE_TERMS", "SP_TIME_TERMS",
           "STEP_TERMS", "TIME_TERMS", "Truth", "decided_on", "rescaled", "scaled"]
