"""A DiT pipeline's architecture read from its diffusers configs: FLOPs per token, parameters, token rule.

``rlsched profile derive`` builds a cost profile from this and a GPU's numbers (``rlsched.profiling.gpus``)
without measuring anything. The input is a diffusers model folder as the Hugging Face repository publishes
it — ``model_index.json`` and ``transformer/config.json`` at least; ``text_encoder*/config.json`` and
``vae/config.json`` when present, else the pipeline class's documented defaults (``PIPELINES``) — or
the name of a folder shipped under ``envs/architectures/`` (``--list-models``). No weights are read.

Conventions (those of the shipped profiles' ``flops`` blocks):

- ``linear_gflop_per_token``: 2 × the parameters every latent token passes through (attention projections
  and MLPs of every block; the per-sample modulation/AdaLN linears are not per token), in GFLOP.
- ``attn_flop_per_token2``: ``4 · attention width · attention layers`` (QKᵀ and AV), per token².
- Text tokens: an MMDiT (FLUX, SD3, Qwen-Image, HunyuanVideo) runs them through every block beside the
  image tokens, a cost per step that does not grow with the image (the profile's fixed term) plus the
  image-text attention (per image token); a cross-attention DiT (Wan) attends to them in each block.

A transformer class not in ``TRANSFORMERS`` is refused (``ConfigError`` naming the class and the file).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched.errors import ConfigError
from rlsched.resources import data_dir

ARCH_DIR = data_dir("envs") / "architectures"


@dataclass(frozen=True, slots=True)
class Transformer:
    """What the cost of one DiT forward depends on, per latent token."""

    hidden: int
    """Attention width (heads × head dim)."""
    attn_layers: int
    """Blocks with self-attention over the image tokens."""
    linear_params_per_token: float
    """Parameters a latent token passes through (projections and MLPs), all blocks."""
    params: float
    """All parameters of the transformer."""
    patch: int
    """Latent pixels per token side."""
    patch_t: int
    """Latent frames per token (video)."""
    joint_text: bool
    """Text tokens join the image tokens' sequence (MMDiT); else cross-attention (Wan)."""
    out_channels: int
    """Latent channels of the noise prediction (the CFG-parallel exchange's payload per token)."""


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Defaults of one diffusers pipeline class (used where its configs do not say)."""

    modality: str
    text_tokens: int
    """Text tokens per prompt the DiT sees (the pipeline's ``max_sequence_length``)."""
    text_encoder_params: float
    """Parameters of its text encoders, when no ``text_encoder*/config.json`` is given."""
    vae_spatial: int
    vae_temporal: int
    vae_params: float
    cfg_default: bool
    """Whether the pipeline runs classifier-free guidance by default (guidance-distilled: no)."""
    note: str


PIPELINES: dict[str, Pipeline] = {
    "FluxPipeline": Pipeline("image", 512, 4.89e9, 8, 1, 8.4e7, False,
                             "guidance-distilled; 512 T5 tokens (max_sequence_length); CLIP-L + T5-XXL"),
    "StableDiffusion3Pipeline": Pipeline("image", 333, 5.6e9, 8, 1, 8.4e7, True,
                                         "77 CLIP + 256 T5 tokens; CLIP-L + CLIP-G + T5-XXL"),
    "QwenImagePipeline": Pipeline("image", 256, 8.3e9, 8, 4, 1.3e8, True,
                                  "Qwen2.5-VL-7B prompt embeddings (256 tokens assumed); true CFG by default"),
    "WanPipeline": Pipeline("video", 512, 5.7e9, 8, 4, 1.3e8, True, "512 umT5 tokens; CFG by default"),
    "HunyuanVideoPipeline": Pipeline("video", 256, 7.6e9, 8, 4, 2.5e8, False,
                                     "guidance-distilled; 256 Llama tokens; Llama-3-8B + CLIP-L"),
}
"""Per pipeline class: the defaults ``derive`` uses where a folder has no config saying otherwise."""


@dataclass(frozen=True, slots=True)
class Architecture:
    """A pipeline's architecture as the cost model needs it."""

    name: str
    pipeline: str
    modality: str
    transformer: Transformer
    text_tokens: int
    text_encoder_params: float
    vae_params: float
    vae_spatial: int
    vae_temporal: int
    vae_decode_gflop_per_mpx: float
    """VAE decoder FLOPs per output megapixel·frame (convolutions), GFLOP."""
    vae_channels: int
    """Channels of the decoder's full-resolution stage (its decode peak scales with them)."""
    cfg_default: bool
    sources: tuple[str, ...]

    @property
    def patch_px(self) -> int:
        return self.vae_spatial * self.transformer.patch

    @property
    def temporal_stride(self) -> int:
        return self.vae_temporal * self.transformer.patch_t

    @property
    def linear_gflop_per_token(self) -> float:
        return 2 * self.transformer.linear_params_per_token / 1e9

    @property
    def attn_flop_per_token2(self) -> float:
        return 4.0 * self.transformer.hidden * self.transformer.attn_layers

    @property
    def text_attn_flop_per_token(self) -> float:
        """Attention FLOPs per image token against the prompt's tokens (both ways for an MMDiT)."""
        t = self.transformer
        return (8.0 if t.joint_text else 4.0) * t.hidden * t.attn_layers * self.text_tokens

    @property
    def text_gflop_per_forward(self) -> float:
        """Linear and text-text attention FLOPs of the prompt's tokens per forward (MMDiT), GFLOP."""
        if not self.transformer.joint_text:
            return 0.0
        n = self.text_tokens
        return (self.linear_gflop_per_token * 1e9 * n + self.attn_flop_per_token2 * n * n) / 1e9

    @property
    def params(self) -> float:
        return self.transformer.params + self.text_encoder_params + self.vae_params


def list_models() -> list[str]:
    """Names of the architectures shipped under ``envs/architectures``."""
    return sorted(p.name for p in ARCH_DIR.iterdir() if (p / "model_index.json").is_file())


def read_architecture(model: str | Path) -> Architecture:
    """The architecture of a diffusers model folder, or of a shipped one by name."""
    folder = Path(model)
    if not (folder / "model_index.json").is_file():
        if (ARCH_DIR / str(model) / "model_index.json").is_file():
            folder = ARCH_DIR / str(model)
        elif folder.exists():
            raise ConfigError("--model", f"{folder} has no model_index.json (a diffusers model folder needs "
                                         "model_index.json and transformer/config.json)")
        else:
            raise ConfigError("--model", f"{model!r} is neither a diffusers model folder nor a shipped "
                                         f"architecture ({', '.join(list_models())})")
    index = _json(folder / "model_index.json")
    pipeline = str(index.get("_class_name", ""))
    if pipeline not in PIPELINES:
        raise ConfigError(str(folder / "model_index.json"), f"pipeline class {pipeline!r} is not one rlsched can "
                                                            f"derive a profile for ({', '.join(PIPELINES)})")
    defaults = PIPELINES[pipeline]
    tf_path = folder / "transformer" / "config.json"
    if not tf_path.is_file():
        raise ConfigError(str(folder), "no transformer/config.json: the DiT's architecture is needed")
    transformer = _transformer(_json(tf_path), tf_path)
    encoders = sorted(p for p in folder.glob("text_encoder*/config.json"))
    te_params = (sum(_text_encoder_params(_json(p), p) for p in encoders) if encoders
                 else defaults.text_encoder_params)
    vae_path = folder / "vae" / "config.json"
    vae = _vae(_json(vae_path), vae_path) if vae_path.is_file() else None
    spatial, temporal, vae_params, decode, channels = vae or (defaults.vae_spatial, defaults.vae_temporal,
                                                              defaults.vae_params, 12.0 * 1e3, 128)
    sources = [f"{folder.name}: {pipeline} ({index.get('_name_or_path', 'local folder')}), "
               f"{transformer.params / 1e9:.2f}B-parameter DiT"]
    sources.append(f"text encoders: {len(encoders)} config(s) read" if encoders
                   else f"text encoders: {pipeline} default {defaults.text_encoder_params / 1e9:.1f}B parameters")
    if vae is None:
        sources.append(f"VAE: {pipeline} default (no vae/config.json)")
    return Architecture(folder.name, pipeline, defaults.modality, transformer, defaults.text_tokens, te_params,
                        vae_params, spatial, temporal, decode, channels, defaults.cfg_default, tuple(sources))


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}", f"not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "must hold a JSON object")
    return data


def _int(cfg: dict[str, Any], key: str, path: Path, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
        raise ConfigError(f"{path}: {key}", f"must be a whole number >= 0, not {value!r}")
    return int(value)


def _mmdit(cfg: dict[str, Any], path: Path, double: int, single: int, mlp: float = 4.0) -> tuple[float, float]:
    """(per-token linear params, all params) of an MMDiT with ``double`` two-stream blocks (image and text
    each: QKV + out + MLP, and a 6h AdaLN per stream) and ``single`` one-stream blocks (QKV + MLP in,
    fused out, a 3h AdaLN)."""
    h = _int(cfg, "num_attention_heads", path) * _int(cfg, "attention_head_dim", path)
    per_double = (4 + 2 * mlp) * h * h
    per_single = (3 + mlp + (1 + mlp)) * h * h
    per_token = double * per_double + single * per_single
    params = double * (2 * per_double + 2 * 6 * h * h) + single * (per_single + 3 * h * h)
    return per_token, params


def _flux(cfg: dict[str, Any], path: Path) -> Transformer:
    double, single = _int(cfg, "num_layers", path), _int(cfg, "num_single_layers", path)
    per_token, params = _mmdit(cfg, path, double, single, float(cfg.get("mlp_ratio", 4.0)))
    h = _int(cfg, "num_attention_heads", path) * _int(cfg, "attention_head_dim", path)
    patch = _int(cfg, "patch_size", path, 1)
    # FLUX packs 2x2 latents into one token (in_channels 64 = 16 latent channels x 4), patch_size 1 after it
    packed = 2 if _int(cfg, "in_channels", path, 64) == 64 and patch == 1 else patch
    refiner = _int(cfg, "num_refiner_layers", path, 0) * (4 + 8) * h * h
    return Transformer(h, double + single, per_token, params + refiner, packed, _int(cfg, "patch_size_t", path, 1),
                       True, _int(cfg, "out_channels", path, 16) or 16)


def _qwen_image(cfg: dict[str, Any], path: Path) -> Transformer:
    layers = _int(cfg, "num_layers", path)
    per_token, params = _mmdit(cfg, path, layers, 0)
    h = _int(cfg, "num_attention_heads", path) * _int(cfg, "attention_head_dim", path)
    return Transformer(h, layers, per_token, params, _int(cfg, "patch_size", path, 2), 1, True,
                       _int(cfg, "out_channels", path, 16))


def _sd3(cfg: dict[str, Any], path: Path) -> Transformer:
    layers = _int(cfg, "num_layers", path)
    per_token, params = _mmdit(cfg, path, layers, 0)
    h = _int(cfg, "num_attention_heads", path) * _int(cfg, "attention_head_dim", path)
    dual = len(cfg.get("dual_attention_layers") or ())  # SD3.5-medium: a second self-attention in these blocks
    per_token += dual * 4 * h * h
    return Transformer(h, layers + dual, per_token, params + dual * 4 * h * h, _int(cfg, "patch_size", path, 2),
                       1, True, _int(cfg, "out_channels", path, 16))


def _wan(cfg: dict[str, Any], path: Path) -> Transformer:
    layers = _int(cfg, "num_layers", path)
    h = _int(cfg, "num_attention_heads", path) * _int(cfg, "attention_head_dim", path)
    ffn = _int(cfg, "ffn_dim", path)
    # per token: self-attention QKV+out (4h^2), cross-attention Q+out (2h^2; K/V are the prompt's), FFN
    per_token = layers * (6 * h * h + 2 * h * ffn)
    params = layers * (8 * h * h + 2 * h * ffn) + _int(cfg, "text_dim", path, 4096) * h + h * h
    patch = cfg.get("patch_size", [1, 2, 2])
    if not (isinstance(patch, list) and len(patch) == 3 and all(isinstance(p, int) and p > 0 for p in patch)):
        raise ConfigError(f"{path}: patch_size", f"must be [t, h, w] whole numbers, not {patch!r}")
    return Transformer(h, layers, per_token, params, patch[1], patch[0], False, _int(cfg, "out_channels", path, 16))


TRANSFORMERS: dict[str, Callable[[dict[str, Any], Path], Transformer]] = {
    "FluxTransformer2DModel": _flux,
    "HunyuanVideoTransformer3DModel": _flux,
    "QwenImageTransformer2DModel": _qwen_image,
    "SD3Transformer2DModel": _sd3,
    "WanTransformer3DModel": _wan,
}


def _transformer(cfg: dict[str, Any], path: Path) -> Transformer:
    cls = str(cfg.get("_class_name", ""))
    if cls not in TRANSFORMERS:
        raise ConfigError(f"{path}: _class_name", f"{cls!r} is not a DiT rlsched can read ({', '.join(TRANSFORMERS)})")
    tf = TRANSFORMERS[cls](cfg, path)
    if tf.hidden == 0 or tf.attn_layers == 0:
        raise ConfigError(str(path), "attention width and layer count must be > 0")
    return tf


def _text_encoder_params(cfg: dict[str, Any], path: Path) -> float:
    """Parameters of a transformers text encoder (T5/umT5 encoder, CLIP text, Llama/Qwen decoders)."""
    if "d_model" in cfg:  # T5 family: the encoder stack only
        d, ff, layers = _int(cfg, "d_model", path), _int(cfg, "d_ff", path), _int(cfg, "num_layers", path)
        inner = _int(cfg, "num_heads", path) * _int(cfg, "d_kv", path, d // max(_int(cfg, "num_heads", path), 1))
        gated = "gated" in str(cfg.get("feed_forward_proj", ""))
        return _int(cfg, "vocab_size", path) * d + layers * (4 * d * inner + (3 if gated else 2) * d * ff)
    h, ff = _int(cfg, "hidden_size", path), _int(cfg, "intermediate_size", path)
    layers, heads = _int(cfg, "num_hidden_layers", path), _int(cfg, "num_attention_heads", path)
    kv = _int(cfg, "num_key_value_heads", path, heads)
    gated = "clip" not in str(cfg.get("model_type", "")).lower()  # CLIP: fc1/fc2; decoders: SwiGLU
    attn = 2 * h * h + 2 * h * (h * kv // max(heads, 1))
    embed = _int(cfg, "vocab_size", path) * h * (1 if cfg.get("tie_word_embeddings", True) else 2)
    vision = cfg.get("vision_config")
    extra = 0.0
    if isinstance(vision, dict):
        vh, vff = _int(vision, "hidden_size", path), _int(vision, "intermediate_size", path)
        extra = _int(vision, "depth", path) * (4 * vh * vh + 3 * vh * vff)
    return embed + layers * (attn + (3 if gated else 2) * h * ff) + extra


def _vae(cfg: dict[str, Any], path: Path) -> tuple[int, int, float, float, int]:
    """(spatial factor, temporal factor, parameters, decoder GFLOP per output Mpx·frame, full-res channels)."""
    if "block_out_channels" in cfg:  # AutoencoderKL / HunyuanVideo: 2D or 3D conv stages
        channels = [int(c) for c in cfg["block_out_channels"]]
        resnets = _int(cfg, "layers_per_block", path, 2) + 1
        spatial = _int(cfg, "spatial_compression_ratio", path, 2 ** (len(channels) - 1))
        temporal = _int(cfg, "temporal_compression_ratio", path, 1)
        kernel = 27 if temporal > 1 else 9
    else:  # AutoencoderKLWan / QwenImage: causal 3D convs from base_dim x dim_mult
        base = _int(cfg, "decoder_base_dim", path, _int(cfg, "base_dim", path, 96))
        channels = [base * int(m) for m in cfg.get("dim_mult", [1, 2, 4, 4])]
        resnets = _int(cfg, "num_res_blocks", path, 2) + 1
        spatial = _int(cfg, "scale_factor_spatial", path, 2 ** (len(channels) - 1))
        temporal = _int(cfg, "scale_factor_temporal", path, 4)
        kernel = 27
    # each stage: `resnets` blocks of two convolutions; stage i runs at 1/4^i of the output pixels (a
    # VAE that patchifies its output, Wan2.2's, runs its last stage at 1/patch^2 of them)
    unpatch = _int(cfg, "patch_size", path, 1) ** 2
    flop_per_px = sum(resnets * 2 * 2 * kernel * c * c / 4 ** i for i, c in enumerate(channels)) / unpatch
    params = 2 * sum(resnets * 2 * kernel * c * c for c in channels)  # encoder and decoder alike
    return spatial, temporal, float(params), flop_per_px * 1e6 / 1e9, channels[0]
