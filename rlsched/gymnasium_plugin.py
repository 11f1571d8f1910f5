"""``gym.make("rlsched/DiTBatch-v0")`` in a fresh interpreter, without importing rlsched first.

Gymnasium 1.x reads no entry points (0.x loaded a ``gymnasium.envs`` group; 1.0 removed it and
asks for ``import PACKAGE`` or ``gym.make("module:ID")``), so an installed package's environments
are unknown to a bare ``gym.make`` (``NamespaceNotFound: Namespace rlsched not found``). The
installed ``rlsched-gymnasium.pth`` (``setup.py`` puts it in site-packages) calls ``install`` at
interpreter start: a meta-path finder that imports nothing until ``gymnasium.envs`` loads, then
imports ``rlsched.envs``, whose import registers the environments. ``gym.make("rlsched.envs:
rlsched/DiTBatch-v0")`` works without it.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # not even typing is imported at interpreter start (every start, in every program)
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

WATCHED = "gymnasium.envs"
"""The module after whose import rlsched registers its environments (it defines ``register``)."""


class _AfterGymnasiumEnvs:
    """Finds nothing itself: hands ``gymnasium.envs`` to the other finders and registers once it ran."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name != WATCHED:
            return None
        sys.meta_path.remove(self)  # once: gymnasium.envs loads once
        spec = next((s for f in sys.meta_path if (s := _find(f, name, path, target)) is not None), None)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_then_register(module: ModuleType) -> None:
            run(module)
            register()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def _find(finder: object, name: str, path: Sequence[str] | None, target: ModuleType | None) -> ModuleSpec | None:
    find = getattr(finder, "find_spec", None)
    return find(name, path, target) if find is not None else None


def register() -> None:
    """Register rlsched's environments (importing ``rlsched.envs`` does); a failure never breaks the
    importing of gymnasium."""
    try:
        import rlsched.envs  # noqa: F401
    except Exception:  # gymnasium must import whatever state rlsched is in
        pass


def install() -> None:
    """Register now when gymnasium's registry is loaded, else once it loads (the ``.pth`` file's call)."""
    if WATCHED in sys.modules:
        register()
    elif not any(isinstance(f, _AfterGymnasiumEnvs) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterGymnasiumEnvs())
