"""Random projection instances for benchmarks, optimality gaps and tests (seeded, numpy only)."""

from __future__ import annotations

import math

import numpy as np

from rlsched.projection.knapsack import Items, Resources

H200_ACTIVATION_GB = (141.0 - 66.0) * (1 - 0.2)
"""Qwen-Image on an H200: (GPU − weights) × (1 − the seed's 0.2 safety margin) = 60 GB."""
MODALITY_CAPS = np.array([8, 2, 16, 16])
"""The seed's ``max_batch_size_per_modality``: image, video, audio, text."""


def realistic(rng: np.random.Generator, n: int, n_keys: int = 36,
              memory_gb: float = H200_ACTIVATION_GB) -> tuple[Items, Resources]:
    """A waiting queue as the scheduler sees it: ``n`` requests over a few dozen keys.

    A key fixes the shape, so memory and tokens are equal within a key (0.5-25 GB,
    log-uniform), its cap follows a random modality, and a full batch of a typical
    key needs more memory than the budget (memory binds). Utilities are log-normal,
    waits stay under the starvation threshold (the full multi-key path is timed).
    """
    keys = min(n, n_keys)
    key_mem = np.exp(rng.uniform(math.log(0.5), math.log(25.0), keys))
    key_cap = MODALITY_CAPS[rng.integers(0, MODALITY_CAPS.size, keys)]
    kid = rng.integers(0, keys, n)
    items = Items(utility=rng.lognormal(0.0, 1.0, n), mem_gb=key_mem[kid], tokens_m=key_mem[kid] / 250.0,
                  key_id=kid, cap=key_cap[kid], wait_s=rng.uniform(0.0, 29.0, n))
    return items, Resources(memory_gb, starvation_threshold_s=30.0)


def random_instance(rng: np.random.Generator, n: int, n_keys: int, uniform: bool,
                    compute_budget: bool = False, starving_share: float = 0.0,
                    integral: bool = False) -> tuple[Items, Resources]:
    """An adversarial-ish instance: sizes per key (``uniform``) or per request, tight budgets.

    ``integral``: whole-number sizes and budgets, so sums are exact in floating point
    (comparisons with a MILP solver or brute force then cannot differ by rounding).
    """
    kid = rng.integers(0, n_keys, n)
    mem = _sizes(rng, n, n_keys, kid, uniform, integral)
    tok = _sizes(rng, n, n_keys, kid, uniform, integral)
    cap = rng.integers(1, 9, n_keys)[kid]
    budget = float(np.round(rng.uniform(0.2, 0.8) * mem.sum() / max(1, n_keys))) if integral else \
        rng.uniform(0.2, 0.8) * float(mem.sum()) / max(1, n_keys)
    compute = float(np.round(rng.uniform(0.3, 1.0) * budget)) if compute_budget else math.inf
    wait = rng.uniform(0.0, 10.0, n) + np.where(rng.random(n) < starving_share, 30.0, 0.0)
    utility = np.round(rng.uniform(0, 100, n)) if integral else rng.lognormal(0.0, 1.0, n)
    return Items(utility, mem, tok, kid, cap, wait), Resources(max(budget, 1.0), compute, 30.0)


def _sizes(rng: np.random.Generator, n: int, n_keys: int, kid: np.ndarray, uniform: bool,
           integral: bool) -> np.ndarray:
    raw = rng.uniform(1.0, 20.0, n_keys)[kid] if uniform else rng.uniform(1.0, 20.0, n)
    return np.round(raw) if integral else raw
