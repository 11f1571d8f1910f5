"""The three workload seed ranges, each kept for one purpose: training < validation < evaluation.

A seed names a workload (``Scenario.requests``). Training, tuning, labels and planning draw
theirs below 900; checkpoint choice during training uses 900-999; ``rlsched eval`` uses 1000
and above, so nothing is trained, tuned or selected on the workloads a report shows.
"""

from __future__ import annotations

from rlsched.bounds import MAX_SEED

TRAIN_SEEDS = range(0, 900)
"""Training, tuning, imitation labels and ``plan``'s layout choice."""
VALIDATION_SEEDS = range(900, 1000)
"""Choosing checkpoints during training."""
EVAL_SEEDS = range(1000, MAX_SEED + 1)
"""``rlsched eval`` (and ``plan --check-seeds``): nothing trains, tunes or selects checkpoints on them."""

VALIDATION_SEED_BASE = VALIDATION_SEEDS.start
EVAL_SEED_BASE = EVAL_SEEDS.start

__all__ = ["EVAL_SEEDS", "EVAL_SEED_BASE", "TRAIN_SEEDS", "VALIDATION_SEEDS", "VALIDATION_SEED_BASE"]
