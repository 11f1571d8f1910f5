"""The GPUs diffusion is served on, by their numbers: dense BF16 throughput, memory bandwidth, memory, link.

``rlsched profile derive --gpu G`` takes a name as NVML reports it (``NVIDIA L40S``, ``NVIDIA H100 80GB
HBM3``), a short name (``--list-gpus``), or, for any other GPU, its numbers (``--gpu-spec
tflops=…,bandwidth_gbs=…,memory_gb=…[,link_gbs=…]``). Each figure is the vendor's datasheet number
(dense, no sparsity; BF16 tensor throughput with FP32 accumulate where the datasheet separates them),
and each entry names its datasheet. ``link_gbs`` is the per-GPU bandwidth sequence parallelism's
collectives use: NVLink / Infinity Fabric where the board has it, PCIe otherwise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rlsched.errors import ConfigError


@dataclass(frozen=True, slots=True)
class GPU:
    """One GPU model's throughput, bandwidth and memory."""

    name: str
    """Short name (the profile's ``gpu.name``)."""
    tflops: float
    """Dense BF16 tensor TFLOP/s."""
    bandwidth_gbs: float
    """Memory bandwidth, GB/s."""
    memory_gb: float
    link_gbs: float
    """Per-GPU bandwidth of the interconnect sequence parallelism uses, GB/s (one direction)."""
    source: str
    nvml: tuple[str, ...] = ()
    """Names NVML reports for it (matched case- and space-insensitively)."""
    generation: str = ""
    """Architecture generation (``GENERATIONS``): whose attention kernels, and so whose ceiling, it runs.
    Empty for a ``--gpu-spec`` GPU: no ceiling."""

    @property
    def attention_tflops(self) -> float:
        """The most attention TFLOP/s this GPU's generation's kernels reach (``ATTENTION_CEILINGS``), or
        ``inf`` where no published figure exists."""
        ceiling = ATTENTION_CEILINGS.get(self.generation)
        return math.inf if ceiling is None else ceiling.tflops


@dataclass(frozen=True, slots=True)
class KernelCeiling:
    """The attention throughput a generation's kernels reach at best, as published: a GPU whose datasheet
    peak times the fitted efficiency lies above it runs attention at this instead."""

    tflops: float
    """Forward attention TFLOP/s (BF16/FP16, head dim 128, long sequences: a DiT's shape)."""
    uncertainty: float
    """± TFLOP/s: how far the figure could be off for a DiT stack's kernels."""
    source: str
    kernel: str = "FlashAttention-2"
    """The kernel the figure is of: the one the shipped and public stacks run on that generation."""


GENERATIONS = ("Ampere", "Ada", "Hopper", "Blackwell", "CDNA3")
ATTENTION_CEILINGS: dict[str, KernelCeiling] = {
    "Ampere": KernelCeiling(230, 15, "FlashAttention-2 paper (Dao 2023, arXiv:2307.08691, sec. 4.1): forward "
                            "attention reaches up to 230 TFLOPS on an A100, 73 % of its 312 (head dim 64-128, "
                            "sequences 512-16k; shorter ones less)"),
    "Hopper": KernelCeiling(335, 15, "FlashAttention-2 paper (arXiv:2307.08691, sec. 4.1): the same kernels on an "
                            "H100 SXM5 reach up to 335 TFLOPS; FlashAttention-3 paper (Shah et al. 2024, "
                            "arXiv:2407.08608, abstract): FlashAttention-2 reaches 35 % of the H100 (346 TFLOPS). A "
                            "stack on FlashAttention-3 (up to 740 TFLOPS) runs faster than this"),
    "Blackwell": KernelCeiling(1600, 200, "FlashAttention-4 paper (Zadouri et al. 2026, arXiv:2603.05451, "
                               "abstract): forward attention reaches up to 1613 TFLOPS on a B200 (BF16, 71 %), up to "
                               "1.3x cuDNN 9.13; Dao-AILab/flash-attention PR #2605 (B200, BF16, head dim 128, "
                               "non-causal): cuDNN 1428 TFLOPS at 1k tokens, FlashAttention-4 1553-1749 at 4k-16k. "
                               "The stacks run cuDNN's SDPA there (vLLM-Omni PR #3079 routes Blackwell diffusion "
                               "attention to it; SGLang PR #33655 prefers it over FlashAttention-4 on every diffusion "
                               "shape it measured); the ± spans cuDNN at 1k tokens to FlashAttention-4 at 16k. A "
                               "stack on FlashAttention-2 (flash-attn 2.x) reaches ~360 TFLOPS on a B200 "
                               "(meta-pytorch/tritonbench PR #171: 352-362 at head dim 128, 2k-8k tokens): its "
                               "attention runs 4x slower than this", "cuDNN SDPA"),
    "CDNA3": KernelCeiling(590, 60, "ROCm/aiter op_tests/cpp/mha/README.md, table of the asm kernels (fwd_v3; "
                           "BF16, head dim 128, non-causal, batch mode): forward attention reaches up to 592 TFLOPS "
                           "on an MI300X, 527-592 at 4k-10k tokens (338-560 at 1k-2k), 45 % of its 1307. The "
                           "stacks run AITER there (vLLM-Omni's ROCm platform defaults diffusion attention to its "
                           "aiter-backed FLASH_ATTN on gfx942; SGLang's diffusion runtime to aiter). A stack on "
                           "PyTorch SDPA (AOTriton) runs slower (AITER 1.18-1.62x the Triton baseline on an MI300X, "
                           "midiareshadi.github.io/blog/attn-dsl-bench); one on MoonMath's HIP kernel (1.18x AITER "
                           "v3, moonmath.ai/cdna3attention) faster", "AITER"),
}
"""Attention kernel ceilings by generation, each of the kernel the shipped and public stacks run there
(FlashAttention-2 or PyTorch SDPA's flash backend on Ampere and Hopper, cuDNN's SDPA on Blackwell, AITER on
CDNA3).

Ada is not capped (datasheet × fitted efficiency): FlashAttention-2's forward reaches 169 TFLOPS on an RTX
4090 (head dim 128, 2k tokens, FP32 accumulate; apache/tvm ``tl_doc/flash_perf.md``), all of the
FP32-accumulate peak the table gives it (165.2; GeForce Ada's FP16-accumulate rate, 330, is twice that and
not what FlashAttention uses), so no cap below the datasheet holds there; no forward figure is published
for a datacenter Ada part (L40S, L40, L20, L4, RTX 6000 Ada: full-rate FP32 accumulate), and the 4090's
does not transfer to one."""


GPUS: tuple[GPU, ...] = (
    GPU("A100", 312, 2039, 80, 300, "NVIDIA A100 datasheet (SXM4 80GB: 312 TFLOPS BF16 dense, 2,039 GB/s, "
        "NVLink 600 GB/s bidirectional)", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), "Ampere"),
    GPU("A100-40GB", 312, 1555, 40, 300, "NVIDIA A100 datasheet (40GB: 312 TFLOPS BF16 dense, 1,555 GB/s)",
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), "Ampere"),
    GPU("A800", 312, 2039, 80, 200, "NVIDIA A800 datasheet (SXM4 80GB: 312 TFLOPS BF16 dense, 2,039 GB/s, "
        "NVLink 400 GB/s bidirectional)", ("NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe"), "Ampere"),
    GPU("H100", 989, 3350, 80, 450, "NVIDIA H100 datasheet (SXM5: 989 TFLOPS BF16 dense, 3.35 TB/s, NVLink "
        "900 GB/s bidirectional)", ("NVIDIA H100 80GB HBM3", "NVIDIA H100"), "Hopper"),
    GPU("H100-PCIe", 756, 2000, 80, 64, "NVIDIA H100 datasheet (PCIe: 756 TFLOPS BF16 dense, 2 TB/s, PCIe Gen5 "
        "128 GB/s bidirectional)", ("NVIDIA H100 PCIe",), "Hopper"),
    GPU("H100-NVL", 835, 3900, 94, 300, "NVIDIA H100 datasheet (NVL: 835 TFLOPS BF16 dense, 3.9 TB/s, 94 GB, "
        "NVLink bridge 600 GB/s)", ("NVIDIA H100 NVL",), "Hopper"),
    GPU("H800", 989, 3350, 80, 200, "NVIDIA H800 datasheet (SXM5: 989 TFLOPS BF16 dense, 3.35 TB/s, NVLink "
        "400 GB/s bidirectional)", ("NVIDIA H800", "NVIDIA H800 80GB HBM3"), "Hopper"),
    GPU("H200", 989, 4800, 141, 450, "NVIDIA H200 datasheet (SXM: 989 TFLOPS BF16 dense, 4.8 TB/s, 141 GB, "
        "NVLink 900 GB/s bidirectional)", ("NVIDIA H200", "NVIDIA H200 NVL"), "Hopper"),
    GPU("H20", 148, 4000, 96, 450, "NVIDIA HGX H20 product brief (148 TFLOPS BF16 dense, 4.0 TB/s, 96 GB, "
        "NVLink 900 GB/s)", ("NVIDIA H20",), "Hopper"),
    GPU("B200", 2250, 8000, 180, 900, "NVIDIA DGX B200 / HGX B200 datasheet (2.25 PFLOPS BF16 dense per GPU, "
        "8 TB/s, 180 GB usable, NVLink 5 1.8 TB/s bidirectional)", ("NVIDIA B200",), "Blackwell"),
    GPU("L40S", 362, 864, 48, 32, "NVIDIA L40S datasheet (362 TFLOPS BF16 dense, 864 GB/s, 48 GB, PCIe Gen4 x16 "
        "64 GB/s bidirectional, no NVLink)", ("NVIDIA L40S",), "Ada"),
    GPU("L40", 181, 864, 48, 32, "NVIDIA L40 datasheet (181 TFLOPS BF16 dense, 864 GB/s, 48 GB, PCIe Gen4)",
        ("NVIDIA L40",), "Ada"),
    GPU("L20", 119.5, 864, 48, 32, "NVIDIA L20 product brief (119.5 TFLOPS FP16/BF16 dense, 864 GB/s, 48 GB, "
        "PCIe Gen4)", ("NVIDIA L20",), "Ada"),
    GPU("L4", 121, 300, 24, 32, "NVIDIA L4 datasheet (121 TFLOPS BF16 dense, 300 GB/s, 24 GB, PCIe Gen4)",
        ("NVIDIA L4",), "Ada"),
    GPU("A10G", 70, 600, 24, 32, "AWS EC2 G5 (A10G: 70 TFLOPS FP16/BF16 dense tensor, 600 GB/s, 24 GB, PCIe Gen4)",
        ("NVIDIA A10G",), "Ampere"),
    GPU("A10", 125, 600, 24, 32, "NVIDIA A10 datasheet (125 TFLOPS BF16 dense, 600 GB/s, 24 GB, PCIe Gen4)",
        ("NVIDIA A10",), "Ampere"),
    GPU("RTX4090", 165.2, 1008, 24, 32, "NVIDIA Ada GPU architecture whitepaper (RTX 4090: 165.2 TFLOPS BF16 dense "
        "with FP32 accumulate, 1,008 GB/s, 24 GB, PCIe Gen4)", ("NVIDIA GeForce RTX 4090",), "Ada"),
    GPU("RTX6000Ada", 364.2, 960, 48, 32, "NVIDIA RTX 6000 Ada datasheet (364.2 TFLOPS BF16 dense, 960 GB/s, 48 GB, "
        "PCIe Gen4)", ("NVIDIA RTX 6000 Ada Generation",), "Ada"),
    GPU("MI300X", 1307.4, 5300, 192, 448, "AMD Instinct MI300X datasheet (1,307.4 TFLOPS BF16 dense, 5.3 TB/s, "
        "192 GB, Infinity Fabric 896 GB/s aggregate peer bandwidth)", ("AMD Instinct MI300X",), "CDNA3"),
)
"""The GPUs ``--list-gpus`` shows; ``find_gpu`` looks a name up among them."""

SPEC_KEYS = ("tflops", "bandwidth_gbs", "memory_gb", "link_gbs")


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def find_gpu(name: str) -> GPU:
    """The table's GPU for a short name (``L40S``, ``h100``) or an NVML name (``NVIDIA H100 80GB HBM3``)."""
    key = _key(name)
    for gpu in GPUS:
        if key in {_key(gpu.name), *(_key(n) for n in gpu.nvml)}:
            return gpu
    raise ConfigError("--gpu", f"{name!r} is not a GPU rlsched knows ({', '.join(g.name for g in GPUS)}); give its "
                               "numbers instead: --gpu-spec tflops=...,bandwidth_gbs=...,memory_gb=...")


def parse_gpu_spec(text: str, name: str = "custom") -> GPU:
    """A GPU from ``tflops=…,bandwidth_gbs=…,memory_gb=…[,link_gbs=…]`` (link default: PCIe Gen4, 32 GB/s)."""
    values: dict[str, float] = {}
    for item in text.split(","):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in SPEC_KEYS:
            raise ConfigError("--gpu-spec", f"{item.strip()!r} is not KEY=NUMBER with KEY one of {SPEC_KEYS}")
        if key in values:
            raise ConfigError("--gpu-spec", f"{key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"--gpu-spec {key}", f"not a number: {raw.strip()!r}") from None
        if not math.isfinite(value) or value <= 0 or value > 1e6:
            raise ConfigError(f"--gpu-spec {key}", f"must be a number in (0, 1e6], not {raw.strip()!r}")
        values[key] = value
    missing = [k for k in SPEC_KEYS[:3] if k not in values]
    if missing:
        raise ConfigError("--gpu-spec", f"missing {missing} (tflops=...,bandwidth_gbs=...,memory_gb=...)")
    return GPU(name, values["tflops"], values["bandwidth_gbs"], values["memory_gb"], values.get("link_gbs", 32.0),
               f"--gpu-spec {text}")
