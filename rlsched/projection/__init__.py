"""Projection: per-request utilities + resources → one feasible batch (RLTune's split).

Choosing the batch to start now is a multi-dimensional 0/1 knapsack restricted to
one compatibility key: maximise Σ utility subject to Σ memory ≤ memory budget,
count ≤ the key's batch cap, Σ tokens ≤ compute budget. ``project`` is the fast
path (greedy + local search, numpy); ``project_exact`` solves it with HiGHS (scipy,
imported on first use).
"""

from rlsched.projection.exact import project_exact
from rlsched.projection.knapsack import Items, Resources, project, takes_all

__all__ = ["Items", "Resources", "project", "project_exact", "takes_all"]
