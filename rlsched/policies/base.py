"""The ``SchedulingPolicy`` protocol, a registry keyed by short names, and a factory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from rlsched.errors import ConfigError
from rlsched.sim.simulator import Decision, Simulator


@runtime_checkable
class SchedulingPolicy(Protocol):
    """Owns the whole decision: admission, order, batch size, waiting, preemption.

    ``decide`` is called at every decision point with a read-only view of the queue
    (the simulator, or the plugin's adapter with the same attributes: ``now``,
    ``waiting``, ``running``, ``config``, ``cost``, ``memory_used_gb``).
    """

    name: str

    def reset(self, state: Simulator) -> None: ...

    def decide(self, state: Simulator) -> Decision: ...


_REGISTRY: dict[str, Callable[[str], SchedulingPolicy]] = {}


def register(name: str) -> Callable[[Callable[[str], SchedulingPolicy]], Callable[[str], SchedulingPolicy]]:
    """Register a factory ``f(arg) -> policy`` under ``name`` (``name:arg`` on the CLI)."""
    def deco(factory: Callable[[str], SchedulingPolicy]) -> Callable[[str], SchedulingPolicy]:
        _REGISTRY[name] = factory
        return factory
    return deco


def policy_names() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def make_policy(spec: str) -> SchedulingPolicy:
    """Build a policy from ``name`` or ``name:arg`` (e.g. ``fifo``, ``rl:checkpoints/default``)."""
    _load_builtin()
    name, _, arg = spec.partition(":")
    if name not in _REGISTRY:
        raise ConfigError("policy", f"unknown policy {spec!r} (known: {', '.join(sorted(_REGISTRY))})")
    return _REGISTRY[name](arg)


def _load_builtin() -> None:
    import rlsched.policies.baselines  # noqa: F401  (registers on import)
    import rlsched.policies.learned  # noqa: F401
    import rlsched.policies.lookahead  # noqa: F401
    import rlsched.policies.pick  # noqa: F401
    import rlsched.policies.seed  # noqa: F401
