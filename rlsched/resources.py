"""Where the shipped data lives: scenario files, cost profiles, traces, checkpoints, agent
presets and tuned actions.

A wheel carries them inside the package (``rlsched/_data/envs``, ``…/checkpoints``,
``…/agents``; ``setup.py`` copies the repository's top-level folders there at build
time). A source checkout or an
editable install reads the top-level folders themselves, which stay the single
source of truth.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

SHIPPED = ("envs", "checkpoints", "agents")


def data_dir(name: str) -> Path:
    """The folder of shipped data ``name`` (one of ``SHIPPED``)."""
    if name not in SHIPPED:
        raise ValueError(f"no shipped data folder {name!r} (one of {SHIPPED})")
    packaged = resources.files("rlsched") / "_data" / name
    if packaged.is_dir():  # an installed wheel; installs are unpacked, so this is a real path
        return Path(str(packaged))
    return Path(__file__).resolve().parents[1] / name


def shipped_path(path: str | Path) -> Path:
    """``path`` as given when it exists (or is absolute), else a relative ``envs/…``,
    ``checkpoints/…`` or ``agents/…`` path among the shipped data: a server started in
    another folder still finds ``checkpoints/pick`` and ``agents/tuned/default.json``."""
    p = Path(path)
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] not in SHIPPED:
        return p
    return data_dir(p.parts[0]).joinpath(*p.parts[1:])


def beside(path: str, folder: str | Path | None) -> str:
    """``path``, named inside a file in ``folder``, tried beside that file first: the absolute path
    there when a file or folder of that name exists there, else ``path`` as written (then read from
    the working folder, then among the shipped data). An absolute path, an empty one, or no
    ``folder`` leaves it as written."""
    if not path or folder is None or Path(path).is_absolute():
        return path
    there = Path(folder) / path
    return os.path.abspath(there) if there.exists() else path


def portable(path: str) -> str:
    """``path`` as a process started in any folder reads it: absolute when it names a file or folder
    here that is not shipped data (``shipped_path`` finds ``agents/…``, ``checkpoints/…`` and
    ``envs/…`` from anywhere); as written otherwise (a shipped name, or nothing here)."""
    p = Path(path)
    if not path or p.is_absolute() or not p.exists():
        return path
    if p.parts[0] in SHIPPED and data_dir(p.parts[0]).joinpath(*p.parts[1:]).resolve() == p.resolve():
        return path
    return os.path.abspath(p)
