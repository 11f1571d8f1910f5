"""What the three environments check alike: their arguments at construction (``EpisodeOptions`` for the
episode distribution, these for the rest) and each action against its action space at ``step``.

An action a space does not hold (the wrong shape, not a number, a slot past the last) is an
``InvalidDecision`` naming the environment and its space, never an ``IndexError`` or a silent negative
index; within its shape a ``Box`` action's values are clipped (NaN counts as 0: ``decode_action``), as
DiTBatch-v0's docstring says, and a ``Discrete`` slot the mask refuses is the proposal's (slot 0).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np

from rlsched import bounds
from rlsched.errors import ConfigError, InvalidDecision


def discrete_action(action: Any, n: int, env_id: str) -> int:
    """``action`` as a slot of ``Discrete(n)``: an integer (Python or numpy, a 0-d array, not a bool) in
    [0, n)."""
    value = action.item() if isinstance(action, np.ndarray) and action.ndim == 0 else action
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral) or not 0 <= value < n:
        raise InvalidDecision(f"{env_id}: action {_short(action)} is not in its action space Discrete({n}) "
                              f"(an integer 0..{n - 1})")
    return int(value)


def box_action(action: Any, dim: int, env_id: str) -> np.ndarray:
    """``action`` as ``dim`` numbers (``Box(-1, 1, (dim,))``'s shape); values are the decoder's to clip."""
    try:
        out = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError):
        out = None
    if out is None or out.shape != (dim,):
        raise InvalidDecision(f"{env_id}: action {_short(action)} is not in its action space Box(-1, 1, ({dim},)) "
                              f"({dim} numbers)")
    return out


def _short(action: Any) -> str:
    """The action's repr on one line, at most 120 characters."""
    return " ".join(repr(action).split())[:120]


def non_negative(field: str, value: Any) -> float:
    """A finite number >= 0 of seconds or weight (``burn_in_s``, ``late_penalty``)."""
    if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value >= 0):
        raise ConfigError(field, f"must be a finite number >= 0, not {value!r}")
    return float(value)


def workload_seed(field: str, value: Any) -> int | None:
    """None (drawn per episode) or a fixed workload seed in ``bounds.SEED``."""
    return None if value is None else bounds.SEED.check(value, field)


__all__ = ["box_action", "discrete_action", "non_negative", "workload_seed"]
