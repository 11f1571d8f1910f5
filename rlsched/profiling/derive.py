"""``rlsched profile derive``: a cost profile for any DiT on any GPU, from architecture and datasheet alone.

A derived profile is a *prior*: the plugin's online calibration refines it while serving. Its terms, in
the shipped profiles' form (``rlsched.sim.cost``), per forward of the DiT:

- ``b_s_per_mtok`` = (linear FLOPs per token / (peak · eff_linear) + image-text attention FLOPs per token /
  (peak · eff_attention) + ``elementwise_bytes`` · hidden · 2 B · layers / (bandwidth · eff_bandwidth)) · 1e6
  (the last: what is not a GEMM, memory-bound);
- ``c_s_per_gtok2`` = attention FLOPs per token² / attention throughput · 1e9, where the attention throughput
  (here and above) is min(peak · eff_attention, the GPU generation's published attention-kernel ceiling,
  ``rlsched.profiling.gpus.ATTENTION_CEILINGS``: FlashAttention-2's on Ampere and Hopper, cuDNN's on
  Blackwell): an H100's kernels reach a third of its datasheet, an H20's or an A800's most of theirs;
- ``a_s`` = the prompt tokens' own FLOPs / (peak · eff_linear) + ``launch_s_per_layer`` · layers (the fixed
  cost of a forward that does not shrink with the image: kernel launches, norms, the host);
- ``floor_s`` = the DiT's weight bytes / (bandwidth · eff_bandwidth) (a forward reads every weight once);
- a ``torch.compile``d stack divides the step terms by ``compile_speedup`` (attention no faster than its ceiling);
- ``encode_s`` = 2 · text-encoder parameters · prompt tokens / (peak · eff_encode) + ``encode_fixed_s``;
- ``decode_s_per_mpx`` = the VAE decoder's convolution FLOPs per megapixel / (peak · eff_decode);
- memory: every parameter in BF16, times 1 + ``overhead_share`` (allocator, workspaces) + activations
  (``live_per_token`` + ``act_per_hidden`` · hidden) · 2 B per effective token + the VAE decode peak
  (``vae_bytes_per_channel_px`` · decoder channels per output pixel; a video VAE decodes in temporal chunks:
  / ``VIDEO_DECODE_CHUNKS``). ``live_per_token`` (what a forward holds live, from the architecture) keeps a
  batch's per-request memory from falling below what its members hold together, which batch-1 peaks alone
  cannot tell from a fixed overhead;
- sequence parallelism: the Ulysses all-to-alls (4 per block, hidden · 2 B per token each) and the ring's
  K/V passes over the GPU's link at ``eff_link``, ``sync_s_per_degree`` per extra GPU; CFG parallelism: the
  noise prediction's bytes over the same link.

The efficiencies (``Efficiencies``) are fitted on the shipped measurement sets
(``envs/profiles/measurements/*``): every degree-1 latency row that is a measurement (not an
``estimate:``) of a model whose architecture ships, on a GPU the table knows, in relative (log) least
squares with each GPU × model pair weighted equally and a weak pull towards the documented starting
values (``START``) so that a pair left out never leaves a term unidentified. Memory is fitted as an upper
envelope over the activation floor (no fitted point under-estimated) and then widened by
``MEMORY_MARGIN``: a prior must fail safe.
``envs/architectures/efficiencies.yaml`` holds the fit on every set (``fit_efficiencies``; a test re-fits
and compares); ``score_leave_one_out`` derives each pair with that pair's rows left out of the fit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from rlsched.errors import ConfigError
from rlsched.profiling.architecture import ARCH_DIR, Architecture, list_models, read_architecture
from rlsched.profiling.gpus import GPU, find_gpu
from rlsched.profiling.measurements import Measurement
from rlsched.sim.cost import CostModel, profile_from_dict

EFFICIENCY_FILE = ARCH_DIR / "efficiencies.yaml"
LATENCY_METRICS = ("step_s", "diffuse_s", "total_s", "encode_s", "decode_s")
VIDEO_DECODE_CHUNKS = 8
"""A video VAE decodes a clip a few latent frames at a time (causal chunks): its peak is about one this-th of
a whole-clip decode's (an estimate)."""
MEMORY_MARGIN = 1.1
"""Factor on the activation (its floor included) and overhead memory (the envelope of a handful of points)."""


@dataclass(frozen=True, slots=True)
class Efficiencies:
    """How much of a GPU's datasheet a DiT stack reaches (fitted; ``START`` are the starting values)."""

    eff_linear: float = 0.6
    eff_attention: float = 0.6
    """Share of the datasheet peak attention reaches, up to the GPU generation's kernel ceiling
    (``rlsched.profiling.gpus.ATTENTION_CEILINGS``): fitted where the ceiling does not bind (H20, A100/A800)."""
    elementwise_bytes: float = 40.0
    """Bytes moved per hidden element per token per block by what is not a GEMM (norms, activations,
    rotary embedding, residuals): the memory-bound share of a step, which makes a GPU of high bandwidth
    per FLOP (H20) reach a higher FLOP efficiency than one of low (L40S)."""
    launch_s_per_layer: float = 3e-4
    compile_speedup: float = 1.3
    eff_encode: float = 0.2
    encode_fixed_s: float = 0.01
    eff_decode: float = 0.2
    eff_bandwidth: float = 0.7
    overhead_share: float = 0.1
    """Memory beyond the weights that grows with them (allocator blocks, workspaces, copies), as a share of
    the weight bytes."""
    act_per_hidden: float = 20.0
    """Activation memory per token beyond ``live_per_token``, in units of the width (× hidden × 2 B)."""
    vae_bytes_per_channel_px: float = 16.0
    eff_link: float = 0.2
    sync_s_per_degree: float = 0.008


START = Efficiencies()
TIME_KEYS = ("eff_linear", "eff_attention", "elementwise_bytes", "launch_s_per_layer", "compile_speedup", "eff_encode",
             "eff_decode")
"""The coefficients the latency rows fit (the rest: memory, link, or documented estimates)."""


def load_efficiencies(path: Path = EFFICIENCY_FILE) -> Efficiencies:
    from rlsched.sim.yamlio import read_yaml

    data = read_yaml(path)
    known = {f.name for f in fields(Efficiencies)}
    values = data.get("efficiencies") if isinstance(data, dict) else None
    if not isinstance(values, dict) or set(values) - known:
        raise ConfigError(str(path), f"'efficiencies' must map some of {sorted(known)} to numbers")
    bad = [k for k, v in values.items() if isinstance(v, bool) or not isinstance(v, (int, float))
           or not math.isfinite(v) or v <= 0]
    if bad:
        raise ConfigError(str(path), f"efficiencies {bad} must be finite numbers > 0")
    return replace(START, **{k: float(v) for k, v in values.items()})


@dataclass(frozen=True, slots=True)
class Stack:
    """The software stack a derived profile models."""

    compile: bool = False
    cfg: str = "sequential"
    """How CFG runs: ``sequential`` (two forwards per step, as vLLM-Omni), ``batched`` or ``none``."""
    engine: str = "vLLM-Omni diffusion stage (derived prior)"


def derive_profile(arch: Architecture, gpu: GPU, eff: Efficiencies, stack: Stack = Stack(),
                   name: str | None = None, digits: int | None = 5) -> dict[str, Any]:
    """The profile (as ``render_profile`` writes it) of ``arch`` on ``gpu`` at ``eff``, each coefficient
    rounded to ``digits`` significant digits (``None``: exact, for fitting)."""
    def _sig(x: float) -> float:
        return x if digits is None else _round(x, digits)

    peak = gpu.tflops * 1e12
    speed = eff.compile_speedup if stack.compile else 1.0
    lin = peak * eff.eff_linear * speed
    # a generation's attention kernels stop short of a big datasheet peak (FlashAttention-2 on an H100: 335
    # of 989 TFLOPS), not of a small one (an H20's 148): one efficiency cannot hold both, a ceiling does
    att = min(peak * eff.eff_attention * speed, gpu.attention_tflops * 1e12)
    bw = gpu.bandwidth_gbs * 1e9 * eff.eff_bandwidth
    t = arch.transformer
    step = {"floor_s": t.params * 2 / bw,
            "a_s": arch.text_gflop_per_forward * 1e9 / lin + eff.launch_s_per_layer * t.attn_layers / speed,
            "b_s_per_mtok": (arch.linear_gflop_per_token * 1e9 / lin + arch.text_attn_flop_per_token / att
                             + eff.elementwise_bytes * t.hidden * 2 * t.attn_layers / (bw * speed)) * 1e6,
            "c_s_per_gtok2": arch.attn_flop_per_token2 * 1e9 / att}
    decode_peak = eff.vae_bytes_per_channel_px * arch.vae_channels * 1e6 / 1e9
    if arch.vae_temporal > 1:
        decode_peak /= VIDEO_DECODE_CHUNKS
    model = {
        "modality": arch.modality,
        "patch_px": arch.patch_px,
        "temporal_stride": arch.temporal_stride,
        "step": {k: _sig(v) for k, v in step.items()},
        "encode_s": _sig(2 * arch.text_encoder_params * arch.text_tokens / (peak * eff.eff_encode)
                         + eff.encode_fixed_s),
        "decode_s_per_mpx": _sig(arch.vae_decode_gflop_per_mpx * 1e9 / (peak * eff.eff_decode)),
        "weights_gb": _sig(arch.params * 2 / 1e9 * (1 + eff.overhead_share * MEMORY_MARGIN)),
        "act_gb_per_ktok": _sig(MEMORY_MARGIN * (live_per_token(arch, stack) + eff.act_per_hidden * t.hidden)
                                * 2 * 1e3 / 1e9),
        "vae_gb_per_mpx": _sig(decode_peak),
        "flops": {"linear_gflop_per_token": _sig(arch.linear_gflop_per_token),
                  "attn_flop_per_token2": _sig(arch.attn_flop_per_token2)},
        "sp": {k: v if k == "method" else _sig(v) for k, v in _sp_block(arch, gpu, eff).items()},
    }
    if stack.cfg != "none":
        link = gpu.link_gbs * eff.eff_link
        model["cfg_parallel"] = {
            "bytes_per_token": t.out_channels * t.patch * t.patch * 2, "link_gb_s": _sig(link),
            "latency_s": _sig(eff.sync_s_per_degree / (4 * t.attn_layers)),
            "source": f"derived, not measured: the noise prediction ({t.out_channels} latent channels x "
                      f"{t.patch}x{t.patch} patch, bf16) per token over {gpu.name}'s link ({gpu.link_gbs:g} GB/s "
                      f"at eff_link {eff.eff_link:.3g})"}
    return {"name": name or f"{arch.name}-{gpu.name.lower()}-derived",
            "gpu": {"name": gpu.name, "memory_gb": gpu.memory_gb, "peak_bf16_tflops": gpu.tflops},
            "stack": {"engine": stack.engine, "attention": _attention_note(gpu),
                      "compile": stack.compile, "precision": "bf16", "cfg": stack.cfg,
                      "notes": "derived by rlsched profile derive: a prior for online calibration, not a measurement"},
            "sources": [*arch.sources, f"GPU: {gpu.source}",
                        "efficiencies: envs/architectures/efficiencies.yaml, fitted on the shipped measurement sets"],
            "models": {arch.name: model}}


def live_per_token(arch: Architecture, stack: Stack = Stack()) -> float:
    """Elements a forward holds live per effective token (``rlsched.sim.cost`` counts every CFG pass's
    tokens): one block's linear outputs per token (the parameters a token passes through per block over the
    width: Q, K, V, the attention's projection, the MLP's hidden and its output), each held once — halved
    where a pipeline that runs CFG runs its two passes as separate forwards (one pass's tokens live at a
    time). Counted from the architecture, not fitted: the floor under a request's activation memory, so that
    a batch's sum of per-request memory does not fall below what its members hold at once however little of
    a measured peak the envelope fit attributes to activations."""
    t = arch.transformer
    per_token = t.linear_params_per_token / t.attn_layers / t.hidden
    return per_token / 2 if arch.cfg_default and stack.cfg == "sequential" else per_token


def _attention_note(gpu: GPU) -> str:
    from rlsched.profiling.gpus import ATTENTION_CEILINGS

    ceiling = ATTENTION_CEILINGS.get(gpu.generation)
    if ceiling is None:
        return "FLOP count at a fitted efficiency of the datasheet peak (no published kernel ceiling)"
    return (f"FLOP count at a fitted efficiency of the datasheet peak, at most {gpu.generation}'s {ceiling.kernel} "
            f"ceiling of {ceiling.tflops:g} ± {ceiling.uncertainty:g} TFLOPS ({ceiling.source})")


def _sp_block(arch: Architecture, gpu: GPU, eff: Efficiencies) -> dict[str, Any]:
    t = arch.transformer
    link = gpu.link_gbs * 1e9 * eff.eff_link
    a2a_bytes = 4 * t.attn_layers * t.hidden * 2  # per token: Q, K, V in and the output back, every block
    kv_bytes = 2 * t.attn_layers * t.hidden * 2  # per token: its K and V passed round the ring
    return {"method": "ulysses", "ulysses_comm_s_per_mtok": a2a_bytes * 1e6 / link,
            "ulysses_sync_s_per_degree": eff.sync_s_per_degree,
            "ring_comm_s_per_mtok": kv_bytes * 1e6 / link, "ring_sync_s_per_degree": eff.sync_s_per_degree}


def derived_cost(arch: Architecture, gpu: GPU, eff: Efficiencies, stack: Stack = Stack(),
                 digits: int | None = 5) -> CostModel:
    return profile_from_dict(derive_profile(arch, gpu, eff, stack, digits=digits), f"derived {arch.name} on {gpu.name}")


def _round(x: float, digits: int = 5) -> float:
    return 0.0 if x == 0 else round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


# ---- fitting the efficiencies on the shipped measurement sets ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Point:
    """One shipped measurement the efficiencies are fitted or scored on."""

    row: Measurement
    set_name: str
    stack: Stack

    @property
    def pair(self) -> tuple[str, str]:
        return (self.row.model, self.row.gpu)

    @property
    def label(self) -> str:
        r = self.row
        return f"{r.model} on {r.gpu}, {r.shape} b{r.batch} {r.steps} steps{' cfg' if r.cfg else ''} ({r.stack})"


def shipped_points(root: Path | None = None) -> list[Point]:
    """Every degree-1 latency and memory row of the shipped sets the derivation can predict, each row once
    (the copy in the set that fits it, with that set's stack)."""
    from rlsched.profiling.fit import measurement_set
    from rlsched.profiling.measurements import read_measurements
    from rlsched.sim.cost import PROFILE_DIR
    from rlsched.sim.yamlio import read_yaml

    root = root or PROFILE_DIR / "measurements"
    models, known = set(list_models()), []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        csv_path, spec_path = measurement_set(folder)
        stack = read_yaml(spec_path).get("stack", {})
        for row in read_measurements(csv_path):
            if (row.layout.degree > 1 or row.replicas > 1 or row.model not in models
                    or row.source.startswith("estimate") or row.metric not in (*LATENCY_METRICS, "peak_gb")
                    or not _known_gpu(row.gpu)):
                continue
            compiled = "compile" in row.stack.lower() or (bool(stack.get("compile")) and row.use == "fit")
            cfg = str(stack.get("cfg", "sequential"))
            known.append(Point(row, folder.name, Stack(compiled, "batched" if cfg == "none" else cfg, row.stack)))
    return _dedupe(known)


def _known_gpu(name: str) -> bool:
    try:
        find_gpu(name)
    except ConfigError:
        return False
    return True


def _dedupe(points: list[Point]) -> list[Point]:
    """One point per measured number: a row copied into another set as a check keeps its fitting set's copy."""
    def key(p: Point) -> tuple[Any, ...]:
        r = p.row
        return (r.model, r.gpu, r.height, r.width, r.frames, r.batch, r.steps, r.cfg, r.metric, r.value)

    best: dict[tuple[Any, ...], Point] = {}
    for p in points:
        k = key(p)
        if k not in best or (p.row.use == "fit" and best[k].row.use != "fit"):
            best[k] = p
    return list(best.values())


def predict_point(point: Point, eff: Efficiencies, archs: dict[str, Architecture] | None = None,
                  digits: int | None = 5) -> float:
    from rlsched.profiling.fit import predict

    arch = (archs or {}).get(point.row.model) or read_architecture(point.row.model)
    return predict(derived_cost(arch, find_gpu(point.row.gpu), eff, point.stack, digits), point.row)


def fit_efficiencies(points: Iterable[Point], start: Efficiencies = START) -> Efficiencies:
    """The efficiencies that fit ``points`` best (latency: log least squares, pairs weighted equally, a weak
    prior on ``start``; memory: the upper envelope of the peak rows)."""
    import numpy as np
    from scipy.optimize import least_squares

    points = list(points)
    archs = {m: read_architecture(m) for m in {p.row.model for p in points}}
    timed = [p for p in points if p.row.metric in LATENCY_METRICS]
    per_pair: dict[tuple[str, str], int] = {}
    for p in timed:
        per_pair[p.pair] = per_pair.get(p.pair, 0) + 1
    weights = np.array([1 / math.sqrt(per_pair[p.pair]) for p in timed])
    x0 = np.log([getattr(start, k) for k in TIME_KEYS])

    def at(x: Any) -> Efficiencies:
        return replace(start, **{k: float(math.exp(v)) for k, v in zip(TIME_KEYS, x)})

    def resid(x: Any) -> Any:
        eff = at(x)
        r = [math.log(predict_point(p, eff, archs, None) / p.row.value) for p in timed]
        return np.concatenate([weights * np.array(r), PRIOR_WEIGHT * (x - x0)])

    sol = least_squares(resid, x0, bounds=(np.log(LOWER), np.log(UPPER)), xtol=1e-10, ftol=1e-10)
    eff = replace(at(sol.x), **{k: _round(float(math.exp(v)), 4) for k, v in zip(TIME_KEYS, sol.x)})
    return _fit_memory([p for p in points if p.row.metric == "peak_gb"], eff, archs)


PRIOR_WEIGHT = 0.3
"""Pull (per log unit) of each time coefficient towards its start value: weak next to the rows, enough
that a coefficient no remaining row informs (encode and decode, once their one pair is left out) stays
at its documented start."""
LOWER = (0.05, 0.05, 1.0, 1e-6, 1.0, 0.005, 0.005)
UPPER = (0.9, 0.9, 400.0, 0.05, 3.0, 0.9, 0.9)
"""Bounds of ``TIME_KEYS`` (efficiencies below 1, a compiled stack no slower than eager)."""


def _fit_memory(points: list[Point], eff: Efficiencies, archs: dict[str, Architecture]) -> Efficiencies:
    """Overhead and activation factor as the upper envelope of the peak rows: the pair (o, f) that leaves no
    row above the model and over-estimates least (a two-variable linear programme; each pair weighted
    equally). Without peak rows, the start values."""
    import numpy as np
    from scipy.optimize import linprog

    if not points:
        return eff
    margin = MEMORY_MARGIN
    rows, cost = [], np.zeros(2)
    per_pair: dict[tuple[str, str], int] = {}
    for p in points:
        per_pair[p.pair] = per_pair.get(p.pair, 0) + 1
    for p in points:
        zero = replace(eff, act_per_hidden=0.0, overhead_share=0.0)
        base = predict_point(p, zero, archs, None)
        # the envelope is of the model before its margin: the margin is the safety on top of it
        per_o = (predict_point(p, replace(zero, overhead_share=0.01), archs, None) - base) / 0.01 / margin
        per_f = (predict_point(p, replace(zero, act_per_hidden=1.0), archs, None) - base) / margin
        rows.append((per_o, per_f, p.row.value - base))  # need per_o*o + per_f*f >= value - base
        cost += np.array([per_o, per_f]) / p.row.value / per_pair[p.pair]
    a_ub = -np.array([[r[0], r[1]] for r in rows])
    b_ub = -np.array([r[2] for r in rows])
    sol = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=[(0.02, 1.0), (0.01, 2000.0)], method="highs")
    if not sol.success:
        raise ConfigError("memory fit", f"no overhead and activation factor cover the peak rows ({sol.message})")
    share, factor = (_round(float(v) * 1.0001, 4) for v in sol.x)  # rounded up: still an envelope
    return replace(eff, overhead_share=share, act_per_hidden=factor)


# ---- leave one pair out ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scored:
    point: Point
    predicted: float

    @property
    def ratio(self) -> float:
        return self.predicted / self.point.row.value


def score_leave_one_out(points: list[Point] | None = None) -> list[Scored]:
    """Each point predicted by a profile derived with its GPU × model pair's rows left out of the fit."""
    points = shipped_points() if points is None else points
    archs = {m: read_architecture(m) for m in {p.row.model for p in points}}
    out = []
    for pair in sorted({p.pair for p in points}):
        eff = fit_efficiencies([p for p in points if p.pair != pair])
        out += [Scored(p, predict_point(p, eff, archs)) for p in points if p.pair == pair]
    return out


def summary(scored: list[Scored]) -> dict[str, float]:
    """Median |error| and worst ratio of the latency points, worst memory under-estimate."""
    import statistics

    lat = [s for s in scored if s.point.row.metric in LATENCY_METRICS]
    mem = [s for s in scored if s.point.row.metric == "peak_gb"]
    return {"latency_points": len(lat), "median_abs_error": statistics.median(abs(s.ratio - 1) for s in lat),
            "worst_ratio": max(max(s.ratio, 1 / s.ratio) for s in lat), "memory_points": len(mem),
            "worst_memory_under": max([0.0, *(1 - s.ratio for s in mem)])}


def render_efficiencies(eff: Efficiencies, n_points: int) -> str:
    lines = ["# Efficiencies of `rlsched profile derive`, fitted on every shipped measurement set",
             f"# ({n_points} points). Written by scripts/derive_score.py --write-efficiencies: do not edit by hand",
             "# (tests/profiling/test_derive.py re-fits and compares). What each means: rlsched/profiling/derive.py;",
             "# attention runs at most at its GPU generation's published kernel ceiling (ATTENTION_CEILINGS in",
             "# rlsched/profiling/gpus.py, each with its source and uncertainty), which is not fitted.",
             "efficiencies:"]
    lines += [f"  {k}: {v!r}" for k, v in asdict(eff).items()]
    return "\n".join(lines) + "\n"


def render_derived(profile: dict[str, Any], command: str) -> str:
    """The derived profile as YAML, with a header saying it is a prior and how it was made."""
    from rlsched.profiling.fit import FitResult, render_profile

    model = next(iter(profile["models"]))
    comment = (f"{model} on {profile['gpu']['name']}: DERIVED, not measured — a prior from the architecture's\n"
               "FLOP and parameter counts and the GPU's datasheet at efficiencies fitted on rlsched's shipped\n"
               "measurement sets (median |error| and worst point of that leave-one-pair-out score:\n"
               "docs/derive.md). Serve it with online calibration on; commit what `rlsched profile calibrate`\n"
               f"writes from your server. Made by `{command}`.")
    text = render_profile(FitResult(profile, [], comment), "")
    return text.replace("# Written by `rlsched profile fit `: do not edit by hand; edit the\n"
                        "# measurements or fit.yaml and re-fit (tests/sim/test_profile_fit.py compares).\n", "")


AUTO = "auto"
"""``profile: auto`` (``extras.rlsched``, ``rlsched deploy --profile auto``): derive the served model's profile."""


def auto_profile(model: str, gpu: str = "", nvml_name: str | None = None,
                 key: str = "extras.rlsched.profile") -> tuple[CostModel, str]:
    """``profile: auto``: the derived profile of the model folder ``model`` on the GPU named by ``gpu`` (a
    name, or ``tflops=…,bandwidth_gbs=…,memory_gb=…``) or else by NVML, and one line saying what it derived
    from what. ``ConfigError`` naming ``key`` where it cannot (no model folder, no GPU, an architecture it
    cannot read)."""
    from rlsched.profiling.gpus import parse_gpu_spec

    try:
        if gpu:
            chosen, origin = (parse_gpu_spec(gpu) if "=" in gpu else find_gpu(gpu)), "the gpu setting"
        elif nvml_name:
            chosen, origin = find_gpu(nvml_name), f"NVML: {nvml_name}"
        else:
            raise ConfigError("gpu", "NVML reports no GPU here: set extras.rlsched.gpu (a name such as L40S, "
                                     "or tflops=...,bandwidth_gbs=...,memory_gb=...)")
        if not model:
            raise ConfigError("model", "the served model's folder is unknown")
        arch = replace(read_architecture(_local(model)), name=Path(model).name)
    except ConfigError as exc:
        raise ConfigError(key, f"auto: cannot derive a profile: {exc.where}: {exc.why}") from None
    data = derive_profile(arch, chosen, load_efficiencies())
    line = (f"derived {data['name']} from {arch.pipeline} at {model} ({arch.transformer.params / 1e9:.3g}B-parameter "
            f"DiT) on {chosen.name} ({origin}; {chosen.tflops:g} TFLOPS, {chosen.bandwidth_gbs:g} GB/s, "
            f"{chosen.memory_gb:g} GB): a prior, calibrated while serving")
    return profile_from_dict(data, f"{key}: auto ({model} on {chosen.name})"), line


def _local(model: str) -> str:
    """``model`` as a folder: itself, or a Hugging Face repository id's snapshot in the local cache (its
    configs only; nothing is downloaded: a server that serves the id has it cached already)."""
    if Path(model).exists() or "/" not in model:
        return model
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(model, local_files_only=True, allow_patterns=["*.json"]))
    except Exception:  # not cached, or no huggingface_hub: read_architecture says what is missing
        return model


# ---- scored on public measurements the efficiencies were not fitted to ----------------------------------

OFF_GPU_MARKERS = ("t5 cpu", "cpu offload")
"""A stack whose text names one of these runs part of a request off the GPU (the text encoder on the CPU,
whole models paged in per request): a derived profile does not model it, so those rows are scored apart."""


def stack_of(text: str) -> Stack:
    """The stack a measurement CSV's ``stack`` column names: ``compile`` in it is a ``torch.compile``d DiT,
    ``cfg batched`` both CFG passes in one forward (else sequential, as diffusers' Wan and Qwen-Image run)."""
    low = text.lower()
    return Stack("compile" in low, "batched" if "cfg batched" in low else "sequential", text)


def runs_off_gpu(point: Point) -> bool:
    low = point.row.stack.lower().replace("_", " ").replace("-", " ")
    return any(marker in low for marker in OFF_GPU_MARKERS)


def measured_points(csv_path: Path) -> list[Point]:
    """The degree-1 latency and peak-memory rows of any measurement CSV, each with the stack its row names."""
    from rlsched.profiling.measurements import read_measurements

    return [Point(row, csv_path.parent.name, stack_of(row.stack)) for row in read_measurements(csv_path)
            if row.layout.degree == 1 and row.replicas == 1 and row.metric in (*LATENCY_METRICS, "peak_gb")]


def score_points(points: list[Point], eff: Efficiencies | None = None) -> list[Scored]:
    """Each point predicted by the profile derived at ``eff`` (the shipped efficiencies by default). The GPU's
    memory is not checked: a row whose stack keeps the text encoder on the CPU still has a latency to score."""
    from rlsched.profiling.fit import predict

    eff = load_efficiencies() if eff is None else eff
    archs = {m: read_architecture(m) for m in {p.row.model for p in points}}
    out = []
    for p in points:
        gpu = replace(find_gpu(p.row.gpu), memory_gb=1e6)
        out.append(Scored(p, predict(derived_cost(archs[p.row.model], gpu, eff, p.stack), p.row)))
    return out
