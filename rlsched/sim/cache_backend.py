"""A cache backend's hidden per-request step skipping (a scenario's ``truth: {cache: ...}``).

vLLM-Omni's cache backends (``cache_backend="tea_cache"`` or ``"cache_dit"``) reuse a denoise step's
transformer output when the step's input barely moved since the last computed step, so a request runs only
a share of its steps in full. That share depends on the prompt and the content being generated: no field of
the request tells it, no scheduler sees it, and it changes from request to request. Here each request ``i``
skips a share ``s_i`` of its denoise steps, drawn once from a seeded distribution of mean ``skip_mean`` and
standard deviation ``skip_spread`` (``dist``), and its true denoise time is ``(1 − s_i (1 − check_share)) ×``
its steps' time: a skipped step still pays ``check_share`` of a step for the check that decided to skip it
(TeaCache: the timestep-modulated input, ≈ 0; Cache-DiT's DBCache ``F8B0``: its first 8 of FLUX's 57 blocks,
0.14; first-block cache ``F1B0``: 1 block, 0.02). Encode, decode and memory are unchanged (a cache holds one
step's residual per request, small beside its activations).

A batch of several requests skips the mean of its members' shares: TeaCache and Cache-DiT decide per forward
on the whole batch tensor, whose relative change is its members' average. The share of a request is a pure
function of the cache's ``seed`` and the request's identity (its id and arrival time), so it is reproducible
per seed, the same whichever policy or replica runs the request (paired comparisons), and different in every
workload. It lives only in the true cost (``CostModel.cache``); the profile every decision reads, the records
policies and routers rank, and the durations' predictions the calibrator compares with have none.

Presets (``cache: teacache``), from public numbers:

* ``teacache`` — mean share 0.4 (×1.67 at the mean), spread 0.15. vLLM-Omni's TeaCache guide: "1.5x-2.0x
  speedup with minimal quality loss" (docs.vllm.ai/projects/vllm-omni, user_guide/diffusion/cache_acceleration/
  teacache); TeaCache's own numbers: FLUX ×1.4 lossless, ×2 without much degradation; HunyuanVideo ×1.6 / ×2;
  Wan2.1 ×1.5 / ×2 (github.com/welltop-cn/ComfyUI-TeaCache); HunyuanVideo 720p on an A800 50 → 30 → 23 min at
  ``rel_l1_thresh`` 0.1 / 0.15 (×1.67 / ×2.17, ali-vilab/TeaCache TeaCache4HunyuanVideo); FLUX.1-dev on an A100,
  50 steps, 23 → 13 → 9 s at 0.2 / 0.4 (DiffSynth-Studio's TeaCache example).
* ``cache-dit`` — Cache-DiT's default DBCache ``F8B0`` (8 warm-up steps): mean share 0.45, spread 0.2,
  check share 0.14 (×1.63 at the mean). vLLM-Omni's cache blog: "1.5x to over 2x speedups in image generation"
  (blog.vllm.ai 2025-12-19, vLLM-Omni Diffusion Cache Acceleration); SGLang-Diffusion: Cache-DiT "up to 1.69x"
  on Qwen-Image. The spread is Cache-DiT's own: the same ``F1B0`` (0.08) setting ran one FLUX prompt ×1.59
  faster (24.85 → 15.59 s, L20, 28 steps) and a texture prompt ×4.6 (27.85 → 6.04 s) (vipshop/cache-dit
  docs/DBCache.md).
* ``fbcache`` — first-block cache (Cache-DiT ``F1B0``, ParaAttention/Nunchaku ``residual_diff_threshold``
  0.08–0.12): mean share 0.4, spread 0.2, check share 0.02.

A share never exceeds ``MAX_SKIP`` (0.9): every backend computes its warm-up steps in full (Cache-DiT's
default 8 of 28 for FLUX caps its share at 0.71).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlsched.sim.request import Request

MAX_SKIP = 0.9
"""The largest share of a request's steps any backend skips (its warm-up steps always run)."""
MIN_SPREAD = 1e-4
"""A spread below this is none: every share is the mean (and a beta's shape stays finite)."""
DISTS = ("beta", "uniform", "fixed")
"""How shares spread around their mean: a beta (default), a uniform of the same mean and standard deviation,
or every request at the mean (the cache as a uniform speed-up of the steps: the calibrated mean is then exact)."""
PRESETS: dict[str, dict[str, Any]] = {
    "teacache": {"skip_mean": 0.4, "skip_spread": 0.15, "dist": "beta", "check_share": 0.0},
    "cache-dit": {"skip_mean": 0.45, "skip_spread": 0.2, "dist": "beta", "check_share": 0.14},
    "fbcache": {"skip_mean": 0.4, "skip_spread": 0.2, "dist": "beta", "check_share": 0.02},
}
"""Named backends (see the module docstring for their sources)."""


@dataclass(frozen=True)
class CacheSkip:
    """The hidden per-request skipped-step share of a cache backend (see the module docstring)."""

    skip_mean: float = 0.4
    """Mean share of a request's denoise steps skipped."""
    skip_spread: float = 0.15
    """Standard deviation of the share across requests (the content dependence)."""
    dist: str = "beta"
    """One of ``DISTS``."""
    check_share: float = 0.0
    """Share of a step's time a skipped step still pays (the check that decided to skip it)."""
    seed: int = 0
    """The cache's own seed: shares are a function of it and each request's identity."""
    preset: str = ""
    """The preset these values came from (``""``: given key by key); a label only."""
    _memo: dict[tuple[int, float], float] = field(default_factory=dict, init=False, compare=False, repr=False)

    def share(self, req: Request) -> float:
        """The share of ``req``'s denoise steps skipped, drawn once per request (cached)."""
        key = (req.id, req.arrival_s)
        s = self._memo.get(key)
        if s is None:
            s = self._memo[key] = self._draw(req)
        return s

    def factor(self, req: Request) -> float:
        """``req``'s true denoise time over its steps' time: ``1 − share × (1 − check_share)``."""
        return 1.0 - self.share(req) * (1.0 - self.check_share)

    def mean_factor(self) -> float:
        """The factor at the mean share: what a calibration of the step terms converges to, about."""
        return 1.0 - self.skip_mean * (1.0 - self.check_share)

    def fresh(self) -> CacheSkip:
        """The same backend with an empty cache of drawn shares (one per run: the shares are the same)."""
        return CacheSkip(self.skip_mean, self.skip_spread, self.dist, self.check_share, self.seed, self.preset)

    def label(self) -> str:
        return self.preset or f"skip {self.skip_mean:g}±{self.skip_spread:g} {self.dist}" + (
            f" check {self.check_share:g}" if self.check_share else "")

    def _draw(self, req: Request) -> float:
        mean, sd = self.skip_mean, self.skip_spread
        if self.dist == "fixed" or sd < MIN_SPREAD or mean == 0:
            return min(mean, MAX_SKIP)
        rng = np.random.default_rng([self.seed, req.id, _bits(req.arrival_s)])
        if self.dist == "uniform":
            half = math.sqrt(3.0) * sd
            s = rng.uniform(mean - half, mean + half)
        else:
            a, b = beta_shape(mean, sd)
            s = rng.beta(a, b)
        return float(min(max(s, 0.0), MAX_SKIP))


def beta_shape(mean: float, sd: float) -> tuple[float, float]:
    """The beta distribution's (α, β) of ``mean`` and standard deviation ``sd`` (needs ``sd² < mean (1 − mean)``)."""
    k = mean * (1.0 - mean) / (sd * sd) - 1.0
    return mean * k, (1.0 - mean) * k


def _bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


__all__ = ["DISTS", "MAX_SKIP", "PRESETS", "CacheSkip", "beta_shape"]
