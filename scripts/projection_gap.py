"""Optimality gap of the fast projection against the exact MILP, on seeded random instances.

    .venv/bin/python scripts/projection_gap.py [--instances 2000] [--seed 0] [--json]

Gap of one instance = (exact − fast) / exact total utility (0 when exact is 0; |gap| below
1e-12 is summation-order rounding and counts as 0).
Families: ``uniform`` (sizes equal within a key, as real requests of one shape are),
``heterogeneous`` (every request its own memory and tokens, a compute budget on half
of them) and ``starving`` (heterogeneous, 20 % of requests past the threshold).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import numpy as np

from rlsched.projection import project, project_exact
from rlsched.projection.instances import random_instance

FAMILIES = {
    "uniform": {"uniform": True},
    "heterogeneous": {"uniform": False},
    "starving": {"uniform": False, "starving_share": 0.2},
}


def gaps(rng: np.random.Generator, count: int, **family: object) -> np.ndarray:
    out = np.empty(count)
    for i in range(count):
        items, res = random_instance(rng, n=int(rng.integers(4, 65)), n_keys=int(rng.integers(1, 5)),
                                     compute_budget=bool(rng.random() < 0.5), **family)
        fast = float(items.utility[project(items, res)].sum())
        with _quiet():
            best = float(items.utility[project_exact(items, res)].sum())
        gap = (best - fast) / best if best > 0 else 0.0
        out[i] = 0.0 if abs(gap) < 1e-12 else gap  # below 1e-12: summation-order rounding
    return out


@contextlib.contextmanager
def _quiet():
    """Silence HiGHS's C-level debug line on stdout (it ignores ``disp=False``)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def summary(g: np.ndarray) -> dict[str, float]:
    return {"instances": int(g.size), "mean_gap": float(g.mean()), "p95_gap": float(np.percentile(g, 95)),
            "max_gap": float(g.max()), "optimal_share": float(np.mean(g <= 1e-9))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=2000, help="instances per family")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    result = {name: summary(gaps(rng, args.instances, **fam)) for name, fam in FAMILIES.items()}
    if args.json:
        print(json.dumps(result))
        return
    for name, s in result.items():
        print(f"{name:>14}: mean {100 * s['mean_gap']:.3f} %  p95 {100 * s['p95_gap']:.3f} %  "
              f"max {100 * s['max_gap']:.3f} %  optimal {100 * s['optimal_share']:.1f} %  (n={s['instances']})")


if __name__ == "__main__":
    main()
