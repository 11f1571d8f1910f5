"""The Gymnasium environment ``rlsched/DiTBatch-v0`` and its observation encoder.

Importing this package registers the environment when gymnasium is installed; the
observation encoder (``rlsched.learned.observation``) needs numpy only, so the serving
side can import it without the ``rl`` extra.
"""

from __future__ import annotations

from typing import Any

ENV_ID = "rlsched/DiTBatch-v0"
PICK_ENV_ID = "rlsched/DiTPick-v0"
"""Choose one of K feasible candidate batches (``rlsched.envs.pick``)."""
ROUTE_ENV_ID = "rlsched/DiTRoute-v0"
"""Choose the replica of each arriving request on a multi-replica pool (``rlsched.envs.route``)."""
MAX_EPISODE_STEPS = 2048

try:
    from gymnasium.envs.registration import register, registry
except ImportError:  # numpy-only install: the encoder still works
    pass
else:
    if ENV_ID not in registry:
        register(id=ENV_ID, entry_point="rlsched.envs.dit_batch:DiTBatchEnv", max_episode_steps=MAX_EPISODE_STEPS)
    if PICK_ENV_ID not in registry:
        register(id=PICK_ENV_ID, entry_point="rlsched.envs.pick:DiTPickEnv")
    if ROUTE_ENV_ID not in registry:
        register(id=ROUTE_ENV_ID, entry_point="rlsched.envs.route:DiTRouteEnv")


def __getattr__(name: str) -> Any:
    if name == "DiTBatchEnv":  # imported on use, so that importing the package needs no gymnasium
        from rlsched.envs.dit_batch import DiTBatchEnv
        return DiTBatchEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENV_ID", "MAX_EPISODE_STEPS", "PICK_ENV_ID", "ROUTE_ENV_ID", "DiTBatchEnv"]
