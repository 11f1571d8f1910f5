"""``rlsched profile measure``: time a diffusers transformer's denoise step (and VAE decode)
on this device over a grid of batch sizes and resolutions, and write a measurement CSV
that ``rlsched profile fit`` reads.

Weights are random (built from a config, nothing is downloaded): step time and memory
depend on the architecture and shapes, not on the weight values. ``tiny-*`` configs are a
few layers of a few channels, so the code path runs in CPU CI; the full-size configs
(``flux``, ``qwen-image``, ``wan``) are the published architectures (FLUX.1-dev,
Qwen-Image, Wan2.1-T2V-14B) and need a GPU. torch and diffusers are imported here only (the simulator never needs them).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched.errors import ConfigError
from rlsched.profiling.measurements import Measurement, write_measurements

TEXT_TOKENS = {"tiny": 8, "full": 512}


@dataclass(frozen=True, slots=True)
class Arch:
    """A diffusers transformer + VAE family and the config of one size of it."""

    model: str
    """Model name written to the CSV (the profile's model key)."""
    family: str
    """``flux`` (image MMDiT, packed 2x2 latents), ``qwen-image`` (the same packing, a 3D VAE)
    or ``wan`` (video DiT, 3D VAE)."""
    transformer: dict[str, Any]
    vae: dict[str, Any]
    size: str
    """``tiny`` or ``full``."""


ARCHS: dict[str, Arch] = {
    "tiny-flux": Arch("tiny-flux", "flux", dict(num_layers=1, num_single_layers=1, attention_head_dim=16,
                                                 num_attention_heads=2, joint_attention_dim=32,
                                                 pooled_projection_dim=32, axes_dims_rope=(4, 6, 6)),
                      dict(latent_channels=16, block_out_channels=(8, 8, 8, 8), layers_per_block=1,
                           norm_num_groups=4, down_block_types=("DownEncoderBlock2D",) * 4,
                           up_block_types=("UpDecoderBlock2D",) * 4, use_quant_conv=False,
                           use_post_quant_conv=False), "tiny"),
    "flux": Arch("flux1-dev", "flux", dict(guidance_embeds=True),
                 dict(latent_channels=16, block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                      down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                      use_quant_conv=False, use_post_quant_conv=False), "full"),
    "tiny-wan": Arch("tiny-wan", "wan", dict(num_attention_heads=2, attention_head_dim=12, in_channels=16,
                                             out_channels=16, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=1),
                     dict(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1), "tiny"),
    "wan": Arch("wan2.1-t2v-14b", "wan", {}, {}, "full"),
    "tiny-qwen-image": Arch("tiny-qwen-image", "qwen-image",
                            dict(num_layers=1, attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                 axes_dims_rope=(4, 6, 6)),
                            dict(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1), "tiny"),
    "qwen-image": Arch("qwen-image", "qwen-image", {}, {}, "full"),
}


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    arch: str
    batch_sizes: list[int]
    resolutions: str
    """Comma-separated ``WxH`` or ``WxHxFRAMES``."""
    cfg: bool
    repeats: int
    decode: bool
    dtype: str
    compile: bool
    seed: int


def parse_resolutions(text: str) -> list[tuple[int, int, int]]:
    """``"832x480x33,64x64"`` as (width, height, frames); frames default to 1."""
    out = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            nums = []
        if len(nums) not in (2, 3) or min(nums) < 1:
            raise ConfigError("--resolutions", f"{item!r} is not WIDTHxHEIGHT or WIDTHxHEIGHTxFRAMES")
        w, h, f = (*nums, 1)[:3]
        if w % 16 or h % 16:
            raise ConfigError("--resolutions", f"{item!r}: width and height must be multiples of 16")
        out.append((w, h, f))
    return out


def measure(spec: MeasureSpec, out: Path) -> list[Measurement]:
    """Time every (resolution, batch) point, write the CSV to ``out``, return its rows."""
    import torch
    from rich.progress import Progress

    arch = _arch(spec.arch)
    shapes = parse_resolutions(spec.resolutions)
    if spec.repeats < 1 or any(b < 1 for b in spec.batch_sizes):
        raise ConfigError("--repeats/--batch-sizes", "must be >= 1")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if arch.size == "full" and device == "cpu":
        raise ConfigError("--arch", f"{spec.arch!r} is full size and needs a GPU; use a tiny-* arch on CPU")
    dtype = _dtype(spec.dtype, device)
    torch.manual_seed(spec.seed)
    transformer, vae = _build(arch, device, dtype)
    if spec.compile:
        transformer = torch.compile(transformer)
    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    stack = _stack(spec, dtype)
    source = (f"rlsched profile measure --arch {spec.arch} (random weights, seed {spec.seed}, "
              f"median of {spec.repeats})")
    rows: list[Measurement] = []
    points = [(s, b) for s in shapes for b in spec.batch_sizes]
    with Progress(transient=True) as bar:
        task = bar.add_task(f"measuring {spec.arch} on {gpu}", total=len(points))
        for (w, h, f), batch in points:
            rows += _point(arch, transformer, vae, device, dtype, (w, h, f, batch), spec, gpu, stack, source)
            bar.advance(task)
    write_measurements(out, rows)
    return rows


def _point(arch: Arch, transformer: Any, vae: Any, device: str, dtype: Any, shape: tuple[int, int, int, int],
           spec: MeasureSpec, gpu: str, stack: str, source: str) -> list[Measurement]:
    import torch

    w, h, f, batch = shape
    forward, latents = _inputs(arch, transformer, device, dtype, w, h, f, batch)
    passes = 2 if spec.cfg else 1

    def step() -> None:
        for _ in range(passes):  # sequential CFG: one forward per pass, as vLLM-Omni runs it
            forward()

    def row(metric: str, value: float) -> Measurement:
        return Measurement(arch.model, gpu, stack, h, w, f, batch, 1, spec.cfg, metric, value, "fit", source)

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out = [row("step_s", _time(step, spec.repeats, device))]
    if spec.decode:
        out.append(row("decode_s", _time(lambda: vae.decode(latents), spec.repeats, device)))
    if device == "cuda":
        out.append(row("peak_gb", torch.cuda.max_memory_allocated() / 1e9))
    return out


def _time(fn: Callable[[], Any], repeats: int, device: str) -> float:
    """Median wall time of ``fn`` after one warm-up call, with the device synchronised."""
    import torch

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.inference_mode():
        fn()
        sync()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _inputs(arch: Arch, transformer: Any, device: str, dtype: Any, w: int, h: int, f: int,
            batch: int) -> tuple[Callable[[], Any], Any]:
    """A zero-argument forward of the transformer on random inputs, and VAE latents to decode."""
    import torch

    text = TEXT_TOKENS[arch.size]
    cfg = transformer.config
    t = torch.full((batch,), 500.0, device=device, dtype=dtype)
    if arch.family == "flux":
        lh, lw = h // 16, w // 16
        x = torch.randn(batch, lh * lw, cfg.in_channels, device=device, dtype=dtype)
        ctx = torch.randn(batch, text, cfg.joint_attention_dim, device=device, dtype=dtype)
        pooled = torch.randn(batch, cfg.pooled_projection_dim, device=device, dtype=dtype)
        img_ids = torch.zeros(lh * lw, 3, device=device, dtype=dtype)
        img_ids[:, 1] = torch.arange(lh, device=device).repeat_interleave(lw).to(dtype)
        img_ids[:, 2] = torch.arange(lw, device=device).repeat(lh).to(dtype)
        txt_ids = torch.zeros(text, 3, device=device, dtype=dtype)
        guidance = torch.full((batch,), 3.5, device=device, dtype=dtype) if cfg.guidance_embeds else None
        latents = torch.randn(batch, 16, h // 8, w // 8, device=device, dtype=dtype)
        return (lambda: transformer(hidden_states=x, encoder_hidden_states=ctx, pooled_projections=pooled,
                                    timestep=t / 1000, img_ids=img_ids, txt_ids=txt_ids, guidance=guidance,
                                    return_dict=False)), latents
    if arch.family == "qwen-image":
        lh, lw = h // 16, w // 16
        x = torch.randn(batch, lh * lw, cfg.in_channels, device=device, dtype=dtype)
        ctx = torch.randn(batch, text, cfg.joint_attention_dim, device=device, dtype=dtype)
        mask = torch.ones(batch, text, device=device, dtype=torch.long)
        latents = torch.randn(batch, 16, 1, h // 8, w // 8, device=device, dtype=dtype)
        return (lambda: transformer(hidden_states=x, encoder_hidden_states=ctx, encoder_hidden_states_mask=mask,
                                    timestep=t / 1000, img_shapes=[[(1, lh, lw)]] * batch,
                                    return_dict=False)), latents
    lf = (f - 1) // 4 + 1
    x = torch.randn(batch, cfg.in_channels, lf, h // 8, w // 8, device=device, dtype=dtype)
    ctx = torch.randn(batch, text, cfg.text_dim, device=device, dtype=dtype)
    return (lambda: transformer(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False)), x


def _build(arch: Arch, device: str, dtype: Any) -> tuple[Any, Any]:
    import torch
    from diffusers import (
        AutoencoderKL,
        AutoencoderKLQwenImage,
        AutoencoderKLWan,
        FluxTransformer2DModel,
        QwenImageTransformer2DModel,
        WanTransformer3DModel,
    )

    transformer_cls, vae_cls = {"flux": (FluxTransformer2DModel, AutoencoderKL),
                                "qwen-image": (QwenImageTransformer2DModel, AutoencoderKLQwenImage),
                                "wan": (WanTransformer3DModel, AutoencoderKLWan)}[arch.family]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in the target dtype: a 14B model in fp32 would not fit twice
    try:
        with torch.device(device):
            transformer = transformer_cls(**arch.transformer).eval()
            vae = vae_cls(**arch.vae).eval()
    finally:
        torch.set_default_dtype(previous)
    return transformer, vae


def _arch(name: str) -> Arch:
    try:
        return ARCHS[name]
    except KeyError:
        raise ConfigError("--arch", f"{name!r} is not one of {sorted(ARCHS)}") from None


def _dtype(name: str, device: str) -> Any:
    import torch

    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if name == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    if name not in table:
        raise ConfigError("--dtype", f"{name!r} is not auto, bf16, fp16 or fp32")
    return table[name]


def _stack(spec: MeasureSpec, dtype: Any) -> str:
    import diffusers
    import torch

    precision = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    mode = "compile" if spec.compile else "eager"
    cfg = "+seqcfg" if spec.cfg else ""
    return f"diffusers {diffusers.__version__} {mode} sdpa {precision}{cfg} torch {torch.__version__}"
