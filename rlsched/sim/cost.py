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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched.errors import ConfigError, InvalidRequest
from rlsched.resources import data_dir
from rlsched.sim.request import Request, RequestRecord
from rlsched.sim.schema import StackSpec, validate_stack
from rlsched.sim.yamlio import read_yaml

PROFILE_DIR = data_dir("envs") / "profiles"


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
        decode = m.decode_s_per_mpx * mpx
        work = m.encode_s + req.num_inference_steps * step + decode
        act, vae = m.act_gb_per_ktok * tokens * 1e3, m.vae_gb_per_mpx * mpx
        mem = max(act, vae) if m.memory_form == "max" else act + vae
        return RequestRecord(req, tokens, quad, m.encode_s, decode, work, step, mem, deadline_s)

    def batch_step_time(self, records: Sequence[RequestRecord]) -> float:
        """One denoise step for records that share a key (hence a model)."""
        m = self.models[records[0].request.model]
        passes = m.passes(records[0].request)
        return m.step_time(sum(r.tokens for r in records), sum(r.quad for r in records), passes)

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
        step = self.batch_step_time(batch)
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

    def batch_memory_gb(self, records: list[RequestRecord]) -> float:
        return self.weights_gb + sum(r.mem_gb for r in records)

    def standalone_s(self, req: Request) -> float:
        return self.record(req).work_s


def load_profile(name_or_path: str | Path) -> CostModel:
    """Load ``envs/profiles/NAME.yaml`` or a path to a profile file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(str(path), "profile file not found")
    data = read_yaml(path)
    return profile_from_dict(data, str(path))


def profile_from_dict(data: Any, where: str) -> CostModel:
    try:
        gpu = data["gpu"]
        stack = validate_stack(data["stack"], where)
        seq = stack.cfg == "sequential"
        models = {name: _model(name, dict(spec), f"{where}: models.{name}", seq)
                  for name, spec in data["models"].items()}
        sources = tuple(data["sources"])
        cost = CostModel(data["name"], gpu["name"], float(gpu["memory_gb"]), models, sources, stack,
                         float(gpu.get("peak_bf16_tflops", 0.0)))
    except (KeyError, TypeError) as exc:
        raise ConfigError(where, f"missing or malformed field {exc}") from None
    if not sources:
        raise ConfigError(where, "a profile must name its sources")
    if cost.weights_gb >= cost.gpu_memory_gb:
        raise ConfigError(where, "model weights do not fit in GPU memory")
    return cost


def _model(name: str, spec: dict[str, Any], where: str, sequential_cfg: bool = False) -> ModelCost:
    step = spec.pop("step")
    flops = spec.pop("flops", {}) or {}
    try:
        model = ModelCost(name=name, floor_s=step["floor_s"], a_s=step["a_s"],
                          b_s_per_mtok=step["b_s_per_mtok"], c_s_per_gtok2=step["c_s_per_gtok2"],
                          sequential_cfg=sequential_cfg, **flops, **spec)
    except TypeError as exc:
        raise ConfigError(where, str(exc)) from None
    if model.memory_form not in ("sum", "max"):
        raise ConfigError(where, f"memory_form must be 'sum' or 'max', not {model.memory_form!r}")
    if model.token_rule not in ("latent", "sequence"):
        raise ConfigError(where, f"token_rule must be 'latent' or 'sequence', not {model.token_rule!r}")
    for fname in ("floor_s", "b_s_per_mtok", "weights_gb", "encode_s"):
        value = getattr(model, fname)
        if not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
            raise ConfigError(where, f"{fname} must be a number >= 0, not {value!r}")
    return model


def _output_mpx(rec: RequestRecord) -> float:
    q = rec.request
    return q.height * q.width * q.num_frames / 1e6
