"""What the projection packs: the waiting requests as parallel arrays (``Items``) and what one batch may use
(``Resources``). Below both solvers (``knapsack``, ``few``), which import it and not each other's types."""

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
    lost_starvation_threshold_s: float = math.inf
    """A lost request waiting longer is admitted first even over savable ones."""


@dataclass(frozen=True, slots=True)
class Items:
    """Waiting requests as parallel arrays (index i = one request)."""

    utility: np.ndarray
    """Value of starting the request now (>= 0; NaN and negatives count as 0)."""
    mem_gb: np.ndarray
    """Memory the request adds to a batch."""
    tokens_m: np.ndarray
    """Effective latent tokens (millions) the request adds to a batch."""
    key_id: np.ndarray
    """Compatibility group id (int); a batch holds one id."""
    cap: np.ndarray
    """Batch-size cap of the item's group (int >= 1), e.g. per modality; a group uses its smallest."""
    wait_s: np.ndarray
    """Seconds the request has waited (compared with the starvation threshold)."""
    lost: np.ndarray | None = None
    """Requests that can no longer meet their SLO (None: none)."""

    def __len__(self) -> int:
        return int(self.utility.shape[0])


__all__ = ["Items", "Resources"]
