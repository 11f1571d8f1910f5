"""Cost model: step latency and memory of a batch, from a profile file.

Per denoise step a batch costs ``max(k·floor, k·a + b·ΣT + c·ΣQ)`` where, per request,
``T = passes·n`` (effective latent tokens, CFG = 2 passes) and ``Q = passes·n²``
(attention); ``k`` is the number of forwards per step: 1, or ``passes`` when the
profile's stack runs CFG as sequential forwards (``stack.cfg: sequential``), which pay
the fixed per-forward cost twice. Encode is paid when a request first runs and VAE
decode when it finishes. Memory of a batch = weights of every model on the GPU +
Σ per-request activation (∝ T) and decode peak (∝ pixels·frames). Every profile is
the output of ``rlsched profile fit`` on a committed measurement file
(``envs/profiles/measurements/NAME/``) and names its sources and software stack.

Sequence parallelism (optional ``sp`` block of a model, see :class:`SPCost`): one request's
step split over ``d = ulysses·ring`` GPUs costs
``max(k·floor, k·a + (b·ΣT + c·ΣQ)/d) + comm + k·sync·(d-1)``, with the Ulysses all-to-all
``u_comm·ΣT·(u-1)/(u²·r)`` and the ring KV pass ``r_comm·ΣT·(r-1)/(r·u)`` (each GPU's share
of the traffic) and ``sync`` the per-degree rate of the slowest method in the layout. At
``d = 1`` it is exactly :meth:`ModelCost.step_time`. Per GPU, weights are replicated and
activations split (``/d``); the VAE decode peak is not (decode runs on one rank).

CFG parallelism (optional ``cfg_parallel`` block of a model, see :class:`CFGCost`; vLLM-Omni's
``parallel_config.cfg_parallel_size``): a layout with CFG degree ``c = 2`` runs the guidance
branches of a CFG request on ``c`` groups of ``d`` GPUs (``c·d`` GPUs), each group one branch
(vLLM-Omni's ``CFGParallelMixin``: branch ``i`` on rank ``i % c``, then an ``all_gather`` of the
noise predictions and the combine on every rank). A step of a CFG batch then costs one group's
share, ``step_sp(ΣT·p'/p, ΣQ·p'/p, passes=p')`` with ``p' = ⌈p/c⌉`` branches per group (so a
``sequential`` stack pays ``p'`` forwards, not ``p``), plus the exchange
``latency_s + bytes_per_token·ΣT·(c-1)/c / link``. A request without CFG gains nothing:
vLLM-Omni runs its one conditional forward on every group (no exchange), so its step is the
SP layout's. Per GPU the weights are not split and activations hold one group's branches.
The block is DERIVED (no public measurement of CFG-parallel speed-up is calibrated).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlsched.atomic import input_file
from rlsched.errors import ConfigError, InvalidRequest
from rlsched.resources import data_dir, portable, shipped_path
from rlsched.sim.cache_backend import CacheSkip
from rlsched.sim.request import Request, RequestRecord
from rlsched.sim.schema import LineOf, ModelSpec, StackSpec, validate_profile
from rlsched.sim.yamlio import read_yaml_lines

PROFILE_DIR = data_dir("envs") / "profiles"

SP_METHODS = ("ulysses", "ring")
SP_KEYS = ("method", "ulysses_comm_s_per_mtok", "ulysses_sync_s_per_degree", "ring_comm_s_per_mtok",
           "ring_sync_s_per_degree")
"""Keys of a model's ``sp`` block (the coefficient keys are ``rlsched profile fit`` names)."""
CFG_DEGREES = (1, 2)
"""CFG-parallel degrees: one GPU group per guidance branch (vLLM-Omni's Qwen-Image pipelines have two)."""
CFG_KEYS = ("bytes_per_token", "link_gb_s", "latency_s", "source")
"""Keys of a model's ``cfg_parallel`` block (see :class:`CFGCost`)."""


@dataclass(frozen=True, slots=True)
class SPLayout:
    """How one request's denoise step is split over GPUs: ``ulysses`` (all-to-all over attention
    heads) times ``ring`` (ring attention over the sequence), ``degree = ulysses·ring`` GPUs per
    group, times ``cfg`` groups (CFG parallelism: one guidance branch per group); ``gpus =
    degree·cfg``."""

    ulysses: int = 1
    ring: int = 1
    cfg: int = 1
    """CFG-parallel degree (vLLM-Omni ``cfg_parallel_size``): 1, or 2 groups of ``degree`` GPUs."""

    @property
    def degree(self) -> int:
        """The sequence-parallel degree (GPUs of one CFG group)."""
        return self.ulysses * self.ring

    @property
    def gpus(self) -> int:
        """GPUs of one replica on this layout (vLLM-Omni's ``world_size``: sp × cfg)."""
        return self.degree * self.cfg

    @property
    def sp_only(self) -> SPLayout:
        """This layout without CFG parallelism (what one group runs)."""
        return SPLayout(self.ulysses, self.ring) if self.cfg != 1 else self

    def __str__(self) -> str:
        parts = [f"{m}{n}" for m, n in (("ulysses", self.ulysses), ("ring", self.ring), ("cfg", self.cfg)) if n > 1]
        return "x".join(parts) or "1"

    @classmethod
    def of(cls, degree: int, method: str = "ulysses", cfg: int = 1) -> SPLayout:
        """``degree`` GPUs with one method (``ulysses`` or ``ring``), times ``cfg`` CFG groups."""
        if isinstance(degree, bool) or not isinstance(degree, numbers.Integral) or degree < 1:
            raise ConfigError("sp degree", f"must be an integer >= 1, not {degree!r}")
        degree = int(degree)
        if method not in SP_METHODS:
            raise ConfigError("sp method", f"must be one of {SP_METHODS}, not {method!r}")
        cfg = _cfg_degree(cfg, "cfg-parallel degree")
        return cls(degree, 1, cfg) if method == "ulysses" else cls(1, degree, cfg)

    @classmethod
    def parse(cls, text: str, default_method: str = "ulysses") -> SPLayout:
        """``4`` (the default method), ``ulysses4``/``u4``, ``ring2``/``r2``, ``ulysses2xring2``/``u2r2``,
        each with an optional CFG-parallel degree: ``u2c2``/``ulysses2xcfg2``, ``2c2``, ``c2``/``cfg2``."""
        import re

        raw = str(text).strip().lower()
        if raw.isdigit():
            return cls.of(int(raw), default_method)
        numbered = re.fullmatch(r"(\d+)x?(?:cfg|c)(\d+)", raw)
        if numbered:
            return cls.of(int(numbered.group(1)), default_method, _cfg_degree(int(numbered.group(2)), text))
        m = re.fullmatch(r"(?:(?:ulysses|u)(\d+))?x?(?:(?:ring|r)(\d+))?x?(?:(?:cfg|c)(\d+))?", raw)
        if not raw or m is None or not any(m.groups()):
            raise ConfigError("sp layout", f"{text!r} is not D, ulyssesD, ringD or ulyssesUxringR (u2r2), each "
                                           "with an optional CFG-parallel degree (u2c2, 2c2, c2)")
        u, r = int(m.group(1) or 1), int(m.group(2) or 1)
        if u < 1 or r < 1:
            raise ConfigError("sp layout", f"{text!r}: degrees must be >= 1")
        return cls(u, r, _cfg_degree(int(m.group(3) or 1), text))


def _cfg_degree(cfg: object, what: object) -> int:
    if isinstance(cfg, bool) or not isinstance(cfg, numbers.Integral) or int(cfg) not in CFG_DEGREES:
        raise ConfigError("cfg-parallel degree", f"{what!r}: must be one of {CFG_DEGREES} (one GPU group per "
                                                 f"guidance branch), not {cfg!r}")
    return int(cfg)


@dataclass(frozen=True, slots=True)
class SPCost:
    """Sequence-parallel coefficients of one model on the profile's GPUs and interconnect.

    ``*_comm_s_per_mtok``: seconds per million effective tokens of a method's per-GPU traffic
    (Ulysses: ``ΣT·(u-1)/(u²·r)``; ring: ``ΣT·(r-1)/(r·u)``). ``*_sync_s_per_degree``: fixed
    launch/sync seconds per forward per extra GPU (the layout pays the rate of its slowest
    method times ``d-1``). ``None``: the method is not calibrated for this profile."""

    method: str = "ulysses"
    """Method an integer degree means."""
    ulysses_comm_s_per_mtok: float | None = None
    ulysses_sync_s_per_degree: float | None = None
    ring_comm_s_per_mtok: float | None = None
    ring_sync_s_per_degree: float | None = None

    def supports(self, method: str) -> bool:
        return getattr(self, f"{method}_comm_s_per_mtok") is not None

    def overhead_s(self, tokens_m: float, k: int, layout: SPLayout) -> float:
        """Communication + synchronisation seconds of one step (``k`` forwards) of a batch with
        ``tokens_m`` million effective tokens on ``layout``."""
        u, r = layout.ulysses, layout.ring
        comm, rate = 0.0, 0.0
        if u > 1:
            if self.ulysses_comm_s_per_mtok is None or self.ulysses_sync_s_per_degree is None:
                raise ConfigError("sp", f"no ulysses coefficients (layout {layout})")
            comm += self.ulysses_comm_s_per_mtok * tokens_m * (u - 1) / (u * u * r)
            rate = self.ulysses_sync_s_per_degree
        if r > 1:
            if self.ring_comm_s_per_mtok is None or self.ring_sync_s_per_degree is None:
                raise ConfigError("sp", f"no ring coefficients (layout {layout})")
            comm += self.ring_comm_s_per_mtok * tokens_m * (r - 1) / (r * u)
            rate = max(rate, self.ring_sync_s_per_degree)
        return comm + k * rate * (layout.degree - 1)


@dataclass(frozen=True, slots=True)
class CFGCost:
    """CFG-parallel coefficients of one model on the profile's GPUs and interconnect, DERIVED
    (no public CFG-parallel measurement is calibrated; ``source`` says how each was derived).

    Per step of a CFG batch every rank receives the other groups' noise predictions
    (vLLM-Omni's ``all_gather`` over the CFG group): ``latency_s + bytes_per_token·ΣT·(c-1)/c /
    (link_gb_s·1e9)`` with ``ΣT`` the batch's effective tokens (every branch)."""

    bytes_per_token: float
    """Noise-prediction bytes per latent token per branch (output channels × bytes of the dtype)."""
    link_gb_s: float
    """Effective GB/s of the exchange per GPU."""
    latency_s: float
    """Fixed seconds of the exchange per step (one collective's launch and synchronisation)."""
    source: str = ""

    def exchange_s(self, tokens_m: float, cfg: int) -> float:
        received = tokens_m * 1e6 * self.bytes_per_token * (cfg - 1) / cfg
        return self.latency_s + received / (self.link_gb_s * 1e9)


@dataclass(frozen=True, slots=True)
class ModelCost:
    """Cost coefficients of one model on the profile's GPU."""

    name: str
    modality: str
    """Modality the model generates (image models also serve 1-frame video keys)."""
    floor_s: float
    """Minimum step time: kernel-launch / memory-bound floor at small batches."""
    a_s: float
    """Fixed per-step overhead."""
    b_s_per_mtok: float
    """Seconds per million effective latent tokens (linear layers)."""
    c_s_per_gtok2: float
    """Seconds per 1e9 passes·tokens² (attention)."""
    encode_s: float
    """Text/condition encode per request."""
    decode_s_per_mpx: float
    """VAE decode seconds per megapixel·frame."""
    weights_gb: float
    act_gb_per_ktok: float
    """Activation memory per thousand effective tokens."""
    vae_gb_per_mpx: float
    """Decode peak memory per megapixel·frame."""
    token_rule: str = "latent"
    """``latent``: latent_frames·(H/patch)·(W/patch); ``sequence``: num_frames."""
    patch_px: int = 16
    temporal_stride: int = 4
    cfg_passes: int = 2
    memory_form: str = "sum"
    """``sum``: a request holds activation + decode peak; ``max``: activations (denoising) and
    the VAE-decode peak happen at different times, so a request holds the larger of the two.
    Within a batch every request has the same shape (same key), so ``max`` per request equals
    weights + max(Σ activations, Σ decode peaks) for the batch."""
    sequential_cfg: bool = False
    """Set from the profile's ``stack.cfg``: CFG passes run as separate forwards."""
    linear_gflop_per_token: float = 0.0
    """Architecture: GFLOP of the linear layers per latent token per pass (0: not given)."""
    attn_flop_per_token2: float = 0.0
    """Architecture: attention FLOP per token² per pass (4·hidden·layers; 0: not given)."""
    sp: SPCost | None = None
    """Sequence-parallel coefficients (``None``: only degree 1 is calibrated)."""
    cfg_parallel: CFGCost | None = None
    """CFG-parallel coefficients, derived (``None``: CFG parallelism is not modelled for it)."""

    def latent_tokens(self, req: Request) -> int:
        if self.token_rule == "sequence":
            return req.num_frames
        frames = (req.num_frames - 1) // self.temporal_stride + 1
        return frames * math.ceil(req.height / self.patch_px) * math.ceil(req.width / self.patch_px)

    def step_time(self, tokens_m: float, quad_g: float, passes: int = 1) -> float:
        """Seconds for one denoise step of a batch with these sums (``passes``: CFG passes of
        its requests, which matter only when the stack runs them as sequential forwards)."""
        k = passes if self.sequential_cfg else 1
        return max(k * self.floor_s, k * self.a_s + self.b_s_per_mtok * tokens_m + self.c_s_per_gtok2 * quad_g)

    def passes(self, req: Request) -> int:
        return self.cfg_passes if req.cfg else 1

    def check_frames(self, num_frames: int) -> None:
        """``InvalidRequest`` for a multi-frame request to an image model (its cost would be a video's that
        the model never generates): a scenario mix, a trace row and ``profile predict --frames`` are refused."""
        if self.modality == "image" and num_frames != 1:
            raise InvalidRequest("num_frames", num_frames, f"model {self.name!r} generates images: one frame")

    def sp_layout(self, degree: int | str | SPLayout) -> SPLayout:
        """``degree`` as a layout this model is calibrated for: an integer means the profile's
        ``sp.method``; a string is parsed (``u2r2``); degree 1 is always valid."""
        default = self.sp.method if self.sp is not None else "ulysses"
        if isinstance(degree, SPLayout):
            layout = degree
        elif isinstance(degree, str):
            layout = SPLayout.parse(degree, default)
        else:
            layout = SPLayout.of(degree, default)
        if layout.ulysses < 1 or layout.ring < 1:
            raise ConfigError("sp layout", f"degrees must be >= 1, not {layout!r}")
        _cfg_degree(layout.cfg, str(layout))
        if layout.cfg > 1 and self.cfg_parallel is None:
            raise ConfigError(f"model {self.name!r}", f"no 'cfg_parallel' block in its profile: CFG parallelism"
                              f" (layout {layout}) is not modelled for it")
        if layout.degree == 1:
            return layout
        if self.sp is None:
            raise ConfigError(f"model {self.name!r}", f"no 'sp' block in its profile: sequence parallelism"
                              f" (degree {layout.degree}) is not calibrated for it")
        for method in SP_METHODS:
            if getattr(layout, method) > 1 and not self.sp.supports(method):
                raise ConfigError(f"model {self.name!r}", f"its profile's 'sp' block has no {method} coefficients"
                                  f" (layout {layout})")
        return layout

    def step_time_sp(self, tokens_m: float, quad_g: float, passes: int = 1,
                     degree: int | str | SPLayout = 1) -> float:
        """Seconds for one denoise step of a batch with these sums split over ``degree`` GPUs
        (an int: the profile's ``sp.method``; or an :class:`SPLayout`). Degree 1 returns
        exactly :meth:`step_time`. A CFG-parallel layout runs a CFG batch's branches on separate
        groups (see the module docstring); a batch without CFG runs as on ``layout.sp_only``."""
        layout = self.sp_layout(degree)
        if layout.cfg > 1 and passes > 1:
            return self._cfg_step(tokens_m, quad_g, passes, layout)
        if layout.degree == 1:
            return self.step_time(tokens_m, quad_g, passes)
        assert self.sp is not None  # sp_layout refuses degree > 1 without it
        k = passes if self.sequential_cfg else 1
        compute = max(k * self.floor_s,
                      k * self.a_s + (self.b_s_per_mtok * tokens_m + self.c_s_per_gtok2 * quad_g) / layout.degree)
        return compute + self.sp.overhead_s(tokens_m, k, layout)

    def _cfg_step(self, tokens_m: float, quad_g: float, passes: int, layout: SPLayout) -> float:
        """One step of a CFG batch on a CFG-parallel layout: one group's branches, then the exchange."""
        assert self.cfg_parallel is not None  # sp_layout refuses cfg > 1 without it
        per = self.group_passes(passes, layout)
        share = per / passes
        group = self.step_time_sp(tokens_m * share, quad_g * share, per, layout.sp_only)
        return group + self.cfg_parallel.exchange_s(tokens_m, layout.cfg)

    @staticmethod
    def group_passes(passes: int, layout: SPLayout) -> int:
        """Guidance branches one CFG group runs (vLLM-Omni deals branch ``i`` to rank ``i % cfg``)."""
        return -(-passes // layout.cfg)

    def request_memory_gb(self, tokens_m: float, mpx: float, degree: int | str | SPLayout = 1,
                          passes: int = 1) -> float:
        """Per-GPU memory of one request beyond the weights: activations (split over the
        ``degree`` GPUs; on a CFG-parallel layout only one group's share of the request's
        ``passes`` branches) and the VAE-decode peak (not split); degree 1 equals
        ``record(req).mem_gb`` exactly."""
        layout = self.sp_layout(degree)
        d = layout.degree
        act, vae = self.act_gb_per_ktok * tokens_m * 1e3, self.vae_gb_per_mpx * mpx
        if layout.cfg > 1 and passes > 1:
            act = act * self.group_passes(passes, layout) / passes
        if d > 1:
            act = act / d
        return max(act, vae) if self.memory_form == "max" else act + vae

    def implied_tflops(self) -> tuple[float, float]:
        """(linear, attention) FLOP/s in TFLOP/s that the fitted coefficients imply; a profile
        whose coefficients imply more than the GPU's peak is not physical (0 where unknown)."""
        lin = self.linear_gflop_per_token * 1e9 * 1e6 / self.b_s_per_mtok / 1e12 if self.b_s_per_mtok else 0.0
        att = self.attn_flop_per_token2 * 1e9 / self.c_s_per_gtok2 / 1e12 if self.c_s_per_gtok2 else 0.0
        return lin, att


@dataclass(frozen=True, slots=True)
class CostModel:
    """All models sharing one GPU."""

    name: str
    gpu: str
    gpu_memory_gb: float
    models: dict[str, ModelCost]
    sources: tuple[str, ...]
    stack: StackSpec | None = None
    """Software stack the profile was measured on (every shipped profile names one)."""
    peak_tflops: float = 0.0
    """The GPU's dense BF16 peak, TFLOP/s (0: not given), for the physical sanity check."""
    cache: CacheSkip | None = None
    """A cache backend's hidden per-request share of skipped denoise steps (``rlsched.sim.cache_backend``):
    only a truth carries one (or the oracle that decides on it); None: every step runs."""

    @property
    def weights_gb(self) -> float:
        return sum(m.weights_gb for m in self.models.values())

    def model(self, name: str) -> ModelCost:
        try:
            return self.models[name]
        except KeyError:
            raise InvalidRequest("model", name, f"not in profile {self.name!r} ({sorted(self.models)})") from None

    def record(self, req: Request, deadline_s: float = math.inf) -> RequestRecord:
        """A fresh record with the request's cost figures filled in."""
        m = self.model(req.model)
        n = m.latent_tokens(req)
        passes = m.passes(req)
        tokens, quad = passes * n / 1e6, passes * n * n / 1e9
        mpx = req.height * req.width * req.num_frames / 1e6
        step = m.step_time(tokens, quad, passes)
        if self.cache is not None:
            step *= self.cache.factor(req)
        decode = m.decode_s_per_mpx * mpx
        work = m.encode_s + req.num_inference_steps * step + decode
        act, vae = m.act_gb_per_ktok * tokens * 1e3, m.vae_gb_per_mpx * mpx
        mem = max(act, vae) if m.memory_form == "max" else act + vae
        return RequestRecord(req, tokens, quad, m.encode_s, decode, work, step, mem, deadline_s)

    def batch_step_time(self, records: Sequence[RequestRecord]) -> float:
        """One denoise step for records that share a key (hence a model)."""
        m = self.models[records[0].request.model]
        passes = m.passes(records[0].request)
        step = m.step_time(sum(r.tokens for r in records), sum(r.quad for r in records), passes)
        return step if self.cache is None else step * self._skipping(records)

    def _skipping(self, records: Sequence[RequestRecord]) -> float:
        """A batch's denoise time over its steps' time under ``cache``: its members' mean (the backends
        decide per forward on the whole batch tensor)."""
        assert self.cache is not None
        return sum(self.cache.factor(r.request) for r in records) / len(records)

    def batch_duration(self, batch: Sequence[RequestRecord], step_mode: bool = False, overhead_ms: float = 0.0,
                       overhead_ms_per_mpx: float = 0.0, steps_done: Sequence[int] | None = None) -> float:
        """Seconds one batch of same-key records keeps the engine busy — the one execution-time
        predictor that the simulator, the cost-profile executor, the candidate features and the
        batching cap share.

        Request mode: the whole wave (every step, each member's encode and decode). Step mode:
        one denoise step, plus encode for members at their first step and decode at their last
        (``steps_done`` per member; default: the records' own). ``overhead_ms`` is the engine's
        time per batch, ``overhead_ms_per_mpx`` its host time per output megapixel·frame of a
        finishing request (``ServingConfig``'s ``engine_overhead_ms*``)."""
        return _wave(batch, self.batch_step_time(batch), step_mode, overhead_ms, overhead_ms_per_mpx, steps_done)

    def batch_memory_gb(self, records: list[RequestRecord]) -> float:
        return self.weights_gb + sum(r.mem_gb for r in records)

    def fits(self, records: Sequence[RequestRecord]) -> bool:
        """The batch fits the GPU's memory (the simulator fails it as OOM otherwise)."""
        return self.batch_memory_gb(list(records)) <= self.gpu_memory_gb

    def standalone_s(self, req: Request) -> float:
        return self.record(req).work_s

    # Sequence (and CFG) parallelism: one batch over ``degree`` GPUs (weights replicated per GPU).
    # Degree 1 gives exactly batch_step_time / batch_memory_gb / batch_duration.

    def batch_step_time_sp(self, records: Sequence[RequestRecord], degree: int | str | SPLayout = 1) -> float:
        """One denoise step of same-key records split over ``degree`` GPUs."""
        m = self.models[records[0].request.model]
        passes = m.passes(records[0].request)
        step = m.step_time_sp(sum(r.tokens for r in records), sum(r.quad for r in records), passes, degree)
        return step if self.cache is None else step * self._skipping(records)

    def batch_memory_gb_sp(self, records: Sequence[RequestRecord], degree: int | str | SPLayout = 1) -> float:
        """Peak memory per GPU of a batch on ``degree`` GPUs: every model's weights (replicated)
        plus each request's activations / degree and its decode peak."""
        m = self.models[records[0].request.model]
        layout = m.sp_layout(degree)
        if layout.gpus == 1:
            return self.batch_memory_gb(list(records))
        return self.weights_gb + sum(m.request_memory_gb(r.tokens, _output_mpx(r), layout, m.passes(r.request))
                                     for r in records)

    def batch_duration_sp(self, batch: Sequence[RequestRecord], degree: int | str | SPLayout = 1,
                          step_mode: bool = False, overhead_ms: float = 0.0, overhead_ms_per_mpx: float = 0.0,
                          steps_done: Sequence[int] | None = None) -> float:
        """:meth:`batch_duration` with the denoise steps split over ``degree`` GPUs (encode and
        VAE decode are not split: they run on one rank)."""
        layout = self.models[batch[0].request.model].sp_layout(degree)
        if layout.gpus == 1:
            return self.batch_duration(batch, step_mode, overhead_ms, overhead_ms_per_mpx, steps_done)
        step = self.batch_step_time_sp(batch, layout)
        return _wave(batch, step, step_mode, overhead_ms, overhead_ms_per_mpx, steps_done)

    def standalone_sp_s(self, req: Request, degree: int | str | SPLayout = 1) -> float:
        """Seconds one request takes alone on ``degree`` GPUs (degree 1: :meth:`standalone_s`)."""
        rec = self.record(req)
        layout = self.model(req.model).sp_layout(degree)
        if layout.gpus == 1:
            return rec.work_s
        return rec.encode_s + req.num_inference_steps * self.batch_step_time_sp([rec], layout) + rec.decode_s


def profile_path(name_or_path: str | Path) -> Path:
    """The file of a profile given by name (``envs/profiles/NAME.yaml``) or by path; a shipped
    ``envs/profiles/…`` path is found from any folder (``shipped_path``), as ``deploy`` writes it."""
    path = Path(name_or_path)
    return PROFILE_DIR / f"{name_or_path}.yaml" if not path.suffix else shipped_path(path)


def load_profile(name_or_path: str | Path) -> CostModel:
    """Load a profile by name or path (``profile_path``; errors name file, line and key)."""
    path = profile_path(name_or_path)
    input_file(path, "profile file")
    data, line_of = read_yaml_lines(path)
    return profile_from_dict(data, str(path), line_of)


def portable_profile(name_or_path: str) -> str:
    """A profile as a process started in any folder reads it: a path (with a suffix) absolute when it
    is a file here that is not shipped (``rlsched.resources.portable``); a name as it is."""
    return portable(name_or_path) if Path(name_or_path).suffix else name_or_path


def profile_from_dict(data: Any, where: str, line_of: LineOf | None = None) -> CostModel:
    """A ``CostModel`` from parsed YAML, validated against ``rlsched.sim.schema.ProfileFile``: every
    coefficient finite and in range, unknown keys refused (errors name ``where``, the line when
    ``line_of`` maps key paths to lines, the key and the reason)."""
    data, sp_blocks = _take_sp(data, where)
    spec = validate_profile(data, where, line_of)
    seq = spec.stack.cfg == "sequential"
    models = {name: _model(name, m, seq) for name, m in spec.models.items()}
    return _with_sp(CostModel(spec.name, spec.gpu.name, spec.gpu.memory_gb, models, spec.sources, spec.stack,
                              spec.gpu.peak_bf16_tflops), sp_blocks)


def _model(name: str, spec: ModelSpec, sequential_cfg: bool = False) -> ModelCost:
    flops = spec.flops.model_dump() if spec.flops is not None else {}
    return ModelCost(name=name, sequential_cfg=sequential_cfg, **spec.step.model_dump(), **flops,
                     **spec.model_dump(exclude={"step", "flops"}))


def _take_sp(data: Any, where: str) -> tuple[Any, dict[str, dict[str, Any]]]:
    """``data`` without its models' ``sp`` and ``cfg_parallel`` blocks (not mutated), and those
    blocks validated: ``{model: {"sp": SPCost, "cfg_parallel": CFGCost}}`` (the ones it has)."""
    models = data.get("models") if isinstance(data, dict) else None
    keys = ("sp", "cfg_parallel")
    if not isinstance(models, dict) or not any(isinstance(m, dict) and any(k in m for k in keys)
                                               for m in models.values()):
        return data, {}
    parse = {"sp": _sp, "cfg_parallel": _cfg_parallel}
    blocks = {name: {k: parse[k](m[k], f"{where}: models.{name}.{k}") for k in keys if k in m}
              for name, m in models.items() if isinstance(m, dict) and any(k in m for k in keys)}
    stripped = {name: {k: v for k, v in m.items() if k not in keys} if isinstance(m, dict) else m
                for name, m in models.items()}
    return {**data, "models": stripped}, blocks


def _with_sp(cost: CostModel, blocks: dict[str, dict[str, Any]]) -> CostModel:
    if not blocks:
        return cost
    models = {name: replace(m, **blocks[name]) if name in blocks else m for name, m in cost.models.items()}
    return replace(cost, models=models)


def _cfg_parallel(data: Any, where: str) -> CFGCost:
    """A model's ``cfg_parallel`` block, validated: exactly the known keys, positive finite
    bandwidth and bytes, a finite latency >= 0, and a ``source`` that says it is derived."""
    if not isinstance(data, dict):
        raise ConfigError(where, "must be a mapping")
    extra, missing = sorted(set(data) - set(CFG_KEYS)), [k for k in CFG_KEYS if k not in data]
    if extra:
        raise ConfigError(where, f"unknown keys {extra} (known: {list(CFG_KEYS)})")
    if missing:
        raise ConfigError(where, f"missing keys {missing}")
    values: dict[str, float] = {}
    for key, low_ok in (("bytes_per_token", False), ("link_gb_s", False), ("latency_s", True)):
        v = data[key]
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v <= 1e9
        if not ok or v < 0 or (v == 0 and not low_ok):
            bound = ">= 0" if low_ok else "> 0"
            raise ConfigError(where, f"{key} must be a finite number {bound} (at most 1e9), not {v!r}")
        values[key] = float(v)
    source = data["source"]
    if not isinstance(source, str) or not source.strip().lower().startswith("derived"):
        raise ConfigError(where, f"source must be a string starting 'derived' (no CFG-parallel measurement is "
                                 f"calibrated), not {source!r}")
    return CFGCost(**values, source=source)


def _sp(data: Any, where: str) -> SPCost:
    """A model's ``sp`` block, validated: known keys, a known method, the default method's
    coefficients present, every coefficient a finite number >= 0."""
    if not isinstance(data, dict):
        raise ConfigError(where, "must be a mapping")
    extra = sorted(set(data) - set(SP_KEYS))
    if extra:
        raise ConfigError(where, f"unknown keys {extra} (known: {list(SP_KEYS)})")
    method = data.get("method", "ulysses")
    if method not in SP_METHODS:
        raise ConfigError(where, f"method must be one of {SP_METHODS}, not {method!r}")
    values: dict[str, float] = {}
    for key in SP_KEYS[1:]:
        if key not in data:
            continue
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or v > 1e6:
            raise ConfigError(where, f"{key} must be a finite number in [0, 1e6], not {v!r}")
        values[key] = float(v)
    for m in SP_METHODS:
        have = [k for k in (f"{m}_comm_s_per_mtok", f"{m}_sync_s_per_degree") if k in values]
        if len(have) == 1:
            raise ConfigError(where, f"{m} needs both {m}_comm_s_per_mtok and {m}_sync_s_per_degree")
    if f"{method}_comm_s_per_mtok" not in values:
        raise ConfigError(where, f"method {method!r} has no {method}_comm_s_per_mtok / {method}_sync_s_per_degree")
    return SPCost(method, **values)


def _wave(batch: Sequence[RequestRecord], step: float, step_mode: bool, overhead_ms: float,
          overhead_ms_per_mpx: float, steps_done: Sequence[int] | None) -> float:
    """``CostModel.batch_duration`` around one denoise step of ``step`` seconds (any layout)."""
    if not step_mode:
        steps = batch[0].request.num_inference_steps
        return steps * step + sum(r.encode_s + r.decode_s + _output_mpx(r) * overhead_ms_per_mpx / 1e3
                                  for r in batch) + overhead_ms / 1e3
    extra = overhead_ms / 1e3
    done = steps_done if steps_done is not None else [r.steps_done for r in batch]
    for r, d in zip(batch, done):
        if d == 0:
            extra += r.encode_s
        if d + 1 == r.request.num_inference_steps:
            extra += r.decode_s + _output_mpx(r) * overhead_ms_per_mpx / 1e3
    return step + extra


def _output_mpx(rec: RequestRecord) -> float:
    q = rec.request
    return q.height * q.width * q.num_frames / 1e6
