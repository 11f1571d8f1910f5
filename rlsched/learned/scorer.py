"""The frozen scorer both learned scorers serve: the candidate policy (``rlsched.learned.pick``,
one score per candidate batch) and the learned router (``rlsched.learned.router``, one score per
replica). A numpy forward pass of ``rlsched.agents.scorer_net.CandidateNet``; its checkpoint
layers are read and checked by ``read_scorer``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlsched.errors import CheckpointError
from rlsched.learned.checkpoint import WEIGHTS, read_dim, read_layers

Scorer = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""(global features (G,), candidate features (K, F)) → one score per candidate (K,)."""


@dataclass(frozen=True)
class FrozenScorer:
    """The trained scorer in numpy: g = tanh(global · Wg + bg); per candidate
    h = tanh(W2 · tanh(W1 · [c, g] + b1) + b2); score = w3 · h + b3 (see ``CandidateNet``)."""

    glob: tuple[np.ndarray, np.ndarray]
    hidden: tuple[tuple[np.ndarray, np.ndarray], ...]
    out: tuple[np.ndarray, np.ndarray]
    proposal_bias: float
    """Added to the proposal's score (slot 0): the margin an alternative must beat."""
    meta: dict[str, Any]

    def __call__(self, g: np.ndarray, cand: np.ndarray) -> np.ndarray:
        w, b = self.glob
        ge = np.tanh(g @ w.T + b)
        x = np.concatenate([cand, np.broadcast_to(ge, (cand.shape[0], ge.size))], axis=1)
        for w, b in self.hidden:
            x = np.tanh(x @ w.T + b)
        w, b = self.out
        return (x @ w.T + b)[:, 0] + self.proposal_bias * cand[:, 1]


def read_scorer(where: str, meta: dict[str, Any], t: dict[str, np.ndarray], g_dim: int, f_dim: int,
                what: str) -> FrozenScorer:
    """The scorer's layers from a checkpoint's tensors, every shape checked: ``g_dim`` global
    features, ``f_dim`` fields per ``what`` (candidate batch, replica)."""
    g_in, g_out = read_dim(where, meta, "global_dim"), read_dim(where, meta, "global_out")
    if g_in != g_dim:
        raise CheckpointError(f"{where}: global_dim {g_in} != this rlsched's {g_dim}; retrain")
    (glob,) = read_layers(where, t, ["glob"], g_in, g_out, "global_dim", "global_out")
    last = t.get("hidden.1.weight")  # its width is the scorer's; read_layers checks the rest
    width = last.shape[0] if last is not None and last.ndim == 2 else 0
    hidden = read_layers(where, t, ["hidden.0", "hidden.1"], f_dim + g_out, width,
                         f"{f_dim} {what} fields + global_out", "hidden.1.weight's rows")
    (out,) = read_layers(where, t, ["out"], hidden[-1][0].shape[0], 1, "hidden.1", "one score")
    bias = t.get("proposal_bias")
    if bias is None or bias.shape != (1,) or not np.isfinite(bias).all():
        raise CheckpointError(f"{where}: proposal_bias must be one finite number in {WEIGHTS}")
    return FrozenScorer(glob, hidden, out, float(bias[0]), meta)
