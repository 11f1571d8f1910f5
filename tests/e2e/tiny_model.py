"""A tiny Qwen-Image-layout model directory, built locally (no download) and cached.

``vllm serve DIR --omni`` resolves the pipeline from ``model_index.json``
(``QwenImagePipeline``); with ``CostProfileExecutor`` behind
``distributed_executor_backend`` no worker loads weights, and the stage reads only
``model_index.json`` and ``vae/config.json`` (the post-processor's scale factor). The
other configs keep the folder in Qwen-Image's layout with tiny sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

VERSION = "1"
"""Bump when the layout changes: the cache is rebuilt."""

FILES: dict[str, dict] = {
    "model_index.json": {
        "_class_name": "QwenImagePipeline", "_diffusers_version": "0.36.0",
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"],
    },
    "scheduler/scheduler_config.json": {
        "_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 1.0,
        "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 0.9, "base_image_seq_len": 256,
        "max_image_seq_len": 8192, "shift_terminal": 0.02, "time_shift_type": "exponential",
    },
    "transformer/config.json": {
        "_class_name": "QwenImageTransformer2DModel", "patch_size": 2, "in_channels": 64, "out_channels": 16,
        "num_layers": 1, "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 32,
        "guidance_embeds": False, "axes_dims_rope": [4, 6, 6],
    },
    "vae/config.json": {
        "_class_name": "AutoencoderKLQwenImage", "base_dim": 8, "z_dim": 16, "dim_mult": [1, 2],
        "num_res_blocks": 1, "attn_scales": [], "temperal_downsample": [False, True],
        "temporal_downsample": [False, True, True], "dropout": 0.0,
    },
    "text_encoder/config.json": {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 512,
    },
}


def build(root: Path) -> Path:
    """``root`` holding the tiny model (written once; reused while ``VERSION`` matches)."""
    stamp = root / ".rlsched-tiny-model"
    if stamp.exists() and stamp.read_text() == VERSION:
        return root
    for rel, doc in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
    stamp.write_text(VERSION)
    return root
