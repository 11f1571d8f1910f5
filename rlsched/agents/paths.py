"""The files a recipe preset (``agents/*.yaml``) names, looked for beside the preset first.

A preset's scenarios (and a router's pools) given as paths (``my-shop.yaml``, with a suffix: a
name without one is a shipped scenario's), and its tuned action files (``static``,
``init_action_from``), are read beside the preset when a file of that name is there, else as
written (the working folder, then the shipped data): ``rlsched learn --agent /abs/my-recipe.yaml``
finds its files from any folder. A ``static`` template (``tuned/{scenario}.json``) stays as
written. Shipped presets name shipped data (``agents/tuned/…``) that is never beside them, so
their recorded configs (and the checkpoints' content hashes) are unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsched.resources import beside


def preset_paths_beside(data: Any, folder: str | Path) -> Any:
    """``data`` (a preset's parsed YAML, not mutated) with its scenarios, pools and tuned files
    resolved beside the preset in ``folder`` where they exist there."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for key in ("scenarios", "pools"):
        if key in out:
            out[key] = _scenarios(out[key], folder)
    if isinstance(out.get("env"), dict) and "scenarios" in out["env"]:
        out["env"] = {**out["env"], "scenarios": _scenarios(out["env"]["scenarios"], folder)}
    if isinstance(out.get("ppo"), dict) and isinstance(out["ppo"].get("init_action_from"), list):
        out["ppo"] = {**out["ppo"], "init_action_from": [_file(f, folder) for f in out["ppo"]["init_action_from"]]}
    if isinstance(out.get("static"), str) and "{" not in out["static"]:
        out["static"] = _file(out["static"], folder)
    if isinstance(out.get("static"), dict):  # a router's: pool -> tuned file
        out["static"] = {_scenario(k, folder): _file(v, folder) for k, v in out["static"].items()}
    if isinstance(out.get("durations"), dict):  # a router's: pool -> window
        out["durations"] = {_scenario(k, folder): v for k, v in out["durations"].items()}
    return out


def _scenarios(value: Any, folder: str | Path) -> Any:
    return [_scenario(v, folder) for v in value] if isinstance(value, list) else value


def _scenario(name: Any, folder: str | Path) -> Any:
    """A scenario file (with a suffix) beside the preset; a shipped name (no suffix) as it is."""
    return beside(name, folder) if isinstance(name, str) and Path(name).suffix else name


def _file(path: Any, folder: str | Path) -> Any:
    return beside(path, folder) if isinstance(path, str) else path
