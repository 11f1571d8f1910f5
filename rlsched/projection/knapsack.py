"""Greedy knapsack over compatibility groups (reference version; see project())."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Resources:
    """What one batch may use."""

    memory_gb: float
    """Memory for activations: (GPU memory − weights) × (1 − memory_safety_margin)."""
    compute_budget_mtok: float = math.inf
    """Most effective latent tokens (millions) per batch; inf: no limit."""
    starvation_threshold_s: float = math.inf
    """A request waiting longer is admitted first (bounded starvation)."""


@dataclass(frozen=True, slots=True)
class Items:
    """Waiting requests as parallel arrays (index i = one request)."""

    utility: np.ndarray
    """Value of starting the request now (>= 0)."""
    mem_gb: np.ndarray
    tokens_m: np.ndarray
    key_id: np.ndarray
    """Compatibility group id (int); a batch holds one id."""
    cap: np.ndarray
    """Batch-size cap of the item's group (int >= 1), e.g. per modality."""
    wait_s: np.ndarray

    def __len__(self) -> int:
        return int(self.utility.shape[0])


def project(items: Items, res: Resources) -> np.ndarray:
    """Indices of the batch to start now; empty only when no request fits alone.

    Starving requests (``wait_s > starvation_threshold_s``) pin the batch to the key
    of the longest-waiting one and are taken first. Otherwise each key's best greedy
    packing (utility density) is compared and the best total wins.
    """
    n = len(items)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    fits = (items.mem_gb <= res.memory_gb) & (items.tokens_m <= res.compute_budget_mtok)
    starving = fits & (items.wait_s > res.starvation_threshold_s)
    if starving.any():
        oldest = int(np.argmax(np.where(starving, items.wait_s, -np.inf)))
        return _pack(items, res, items.key_id == items.key_id[oldest], starving)
    best, best_val = np.empty(0, dtype=np.int64), -1.0
    for key in np.unique(items.key_id[fits]):
        chosen = _pack(items, res, items.key_id == key, np.zeros(n, dtype=bool))
        val = float(items.utility[chosen].sum())
        if val > best_val:
            best, best_val = chosen, val
    return best


def _pack(items: Items, res: Resources, group: np.ndarray, first: np.ndarray) -> np.ndarray:
    idx = np.flatnonzero(group)
    density = items.utility[idx] / np.maximum(items.mem_gb[idx], 1e-6)
    order = idx[np.lexsort((-density, ~first[idx]))]
    cap = int(items.cap[idx[0]])
    mem = tok = 0.0
    out = []
    for i in order.tolist():
        if len(out) >= cap:
            break
        if mem + items.mem_gb[i] <= res.memory_gb and tok + items.tokens_m[i] <= res.compute_budget_mtok:
            out.append(i)
            mem += items.mem_gb[i]
            tok += items.tokens_m[i]
    return np.asarray(out, dtype=np.int64)
