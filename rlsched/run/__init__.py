"""One run of a policy on a seeded scenario workload: the engine every driver shares.

``engine``: ``RunSpec`` (scenario × ``POLICY[@ROUTER]`` × seed × load, the spec parsed once as a
``rlsched.routing.spec.StageSpec``), ``prepare``/``prepare_stage`` (the seeded simulator or stage, not yet
run), ``simulate`` (what ``rlsched simulate`` runs) and ``write_records``; ``seeds``: the training,
validation and evaluation seed ranges; ``interval``: the 95 % t-interval over seeds. ``rlsched.evaluation``
(the grid and its report), ``agents`` (training, tuning, labels) and ``envs`` all run through it.
"""

from rlsched.run.engine import RECORD_FIELDS, RunSpec, prepare, prepare_stage, simulate, sp_cost, write_records
from rlsched.run.interval import ci95_half_width
from rlsched.run.seeds import EVAL_SEED_BASE, EVAL_SEEDS, TRAIN_SEEDS, VALIDATION_SEED_BASE, VALIDATION_SEEDS

__all__ = ["EVAL_SEEDS", "EVAL_SEED_BASE", "RECORD_FIELDS", "TRAIN_SEEDS", "VALIDATION_SEEDS", "VALIDATION_SEED_BASE",
           "RunSpec", "ci95_half_width", "prepare", "prepare_stage", "simulate", "sp_cost", "write_records"]
