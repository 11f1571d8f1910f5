"""``static``: the projection policy with one fixed action, tuned per scenario by ``rlsched tune``.

A tuned action file is JSON with an ``"action"`` of ``ACTION_DIM`` numbers (see
``rlsched.policies.projected``). Its spec is ``static[:PATH][;KEY=VALUE]...``: the
options override shared ``ProjectionConfig`` settings (e.g. ``shed_lost=true``). A
relative ``agents/tuned/…`` path is also found among the shipped data, so a server
started in another folder serves the same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import numpy as np

from rlsched.atomic import input_file
from rlsched.errors import ConfigError
from rlsched.policies.base import PolicySpec, split_options
from rlsched.policies.projected import ACTION_DIM, ProjectedPolicy, ProjectionConfig, decode_action, with_overrides
from rlsched.resources import shipped_path
from rlsched.sim.yamlio import read_json


def load_static(path: str, options: Mapping[str, str] | None = None) -> ProjectedPolicy:
    """``ProjectedPolicy`` with default ``ActionParams`` (``path`` empty), or the action saved by
    ``rlsched tune``; ``options`` override shared projection settings (``with_overrides``).
    ``path`` may itself carry them: ``t.json;shed_lost=true``."""
    path, inline = split_options(path, "static")
    config = with_overrides({**inline, **(options or {})})
    if not path:
        policy = ProjectedPolicy(config=config)
    else:
        data = read_tuned(path)
        action = np.asarray(data.get("action", []), dtype=np.float64)
        if action.shape != (ACTION_DIM,):
            raise ConfigError(path, f"'action' must hold {ACTION_DIM} numbers, not {action.shape}")
        # the projection's knobs are shared by every projection policy (ProjectionConfig
        # defaults), so static and rl differ only by their actions
        stray = sorted(set(data) & {f.name for f in fields(ProjectionConfig)})
        if stray:
            raise ConfigError(path, f"{', '.join(stray)}: projection settings are shared by every projection "
                                    "policy and cannot be set per action file")
        policy = ProjectedPolicy(decode_action(action), config)
    policy.name = "static"
    return policy


def static_policy(spec: PolicySpec) -> ProjectedPolicy:
    return load_static(spec.arg, spec.options)


def read_tuned(path: str) -> dict[str, Any]:
    """A tuned action file as a JSON object (``path`` as given, else among the shipped data)."""
    p = input_file(shipped_path(path), "tuned action file", path, " (write one with `rlsched tune`)")
    data = read_json(p)  # bounded size and nesting: a tuned file may come from anywhere
    if not isinstance(data, dict):
        raise ConfigError(path, "expected a JSON object")
    return data


__all__ = ["load_static", "read_tuned", "static_policy"]
