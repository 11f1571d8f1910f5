"""Run policies on seeded scenario workloads and collect their metrics side by side.

``runs``: the grid runner (``run_grid``); ``stats``: cells over seeds; ``report``: the headline, paired
tables, labels, results.md and results.json; ``plots``: the figures. One run (``RunSpec``, ``simulate``)
and the seed ranges are ``rlsched.run``, the stage spec ``rlsched.routing.spec.StageSpec``: re-exported
here for scripts and tests.
"""

from rlsched.evaluation.report import (
    BASELINE_STAGED,
    HEADLINE_KINDS,
    PLAIN_HEURISTICS,
    PLAIN_ROUTERS,
    REPORT_FILES,
    headline,
    headline_target,
    is_ceiling,
    label,
    labels,
    paired,
    plain_combinations,
    worst_vs_any,
    write_report,
)
from rlsched.evaluation.runs import (
    RECORD_FIELDS,
    Grid,
    RunSpec,
    check_grid,
    prepare,
    prepare_stage,
    run_grid,
    simulate,
    sp_cost,
    spec_for,
    write_records,
)
from rlsched.evaluation.stats import SUMMARY_KEYS, Cell, aggregate, ci95_half_width, flat
from rlsched.routing.spec import StageSpec
from rlsched.run.seeds import EVAL_SEED_BASE, EVAL_SEEDS, TRAIN_SEEDS, VALIDATION_SEED_BASE, VALIDATION_SEEDS

__all__ = ["BASELINE_STAGED", "EVAL_SEEDS", "EVAL_SEED_BASE", "HEADLINE_KINDS", "PLAIN_HEURISTICS", "PLAIN_ROUTERS",
           "RECORD_FIELDS", "REPORT_FILES", "SUMMARY_KEYS", "TRAIN_SEEDS", "VALIDATION_SEEDS", "VALIDATION_SEED_BASE",
           "Cell", "Grid", "RunSpec", "StageSpec", "aggregate", "check_grid", "ci95_half_width", "flat", "headline",
           "headline_target", "is_ceiling", "label", "labels", "paired", "plain_combinations", "prepare",
           "prepare_stage", "run_grid", "simulate", "sp_cost", "spec_for", "worst_vs_any", "write_records",
           "write_report"]
