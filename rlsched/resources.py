"""Where the shipped data lives: scenario files, cost profiles, traces, checkpoints, agent
presets and tuned actions.

A wheel carries them inside the package (``rlsched/_data/envs``, ``…/checkpoints``,
``…/agents``; ``setup.py`` copies the repository's top-level folders there at build
time). A source checkout or an
editable install reads the top-level folders themselves, which stay the single
source of truth.
"""

from __future__ import annotations

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
