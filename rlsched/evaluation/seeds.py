"""The three workload seed ranges live in ``rlsched.run.seeds`` (a run draws from them; training and the
envs read them without the evaluation package); re-exported here for scripts and tests."""

from rlsched.run.seeds import EVAL_SEED_BASE, EVAL_SEEDS, TRAIN_SEEDS, VALIDATION_SEED_BASE, VALIDATION_SEEDS

__all__ = ["EVAL_SEEDS", "EVAL_SEED_BASE", "TRAIN_SEEDS", "VALIDATION_SEEDS", "VALIDATION_SEED_BASE"]
