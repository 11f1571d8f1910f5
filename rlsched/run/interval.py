"""The 95 % t-interval of a mean over seeds: what every score over seeds reports beside its mean."""

from __future__ import annotations

import math
from typing import Any


def ci95_half_width(values: Any) -> float:
    """Half-width of the two-sided 95 % t-interval of the mean of ``values`` (NaN below 2)."""
    n = len(values)
    if n < 2:
        return math.nan
    import numpy as np

    return _t95(n) * float(np.std(values, ddof=1)) / math.sqrt(n)


def _t95(n: int) -> float:
    """Two-sided 95 % Student-t quantile for n samples (n−1 dof)."""
    table = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26}
    return table.get(n, 1.96 + 2.5 / max(n - 1, 1))


__all__ = ["ci95_half_width"]
