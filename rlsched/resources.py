"""Where the shipped data lives: scenario files, cost profiles, traces, the default checkpoint.

A wheel carries them inside the package (``rlsched/_data/envs``,
``rlsched/_data/checkpoints``; ``setup.py`` copies the repository's top-level
``envs/`` and ``checkpoints/`` there at build time). A source checkout or an
editable install reads the top-level folders themselves, which stay the single
source of truth.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHIPPED = ("envs", "checkpoints")


def data_dir(name: str) -> Path:
    """The folder of shipped data ``name`` (``envs`` or ``checkpoints``)."""
    if name not in SHIPPED:
        raise ValueError(f"no shipped data folder {name!r} (one of {SHIPPED})")
    packaged = resources.files("rlsched") / "_data" / name
    if packaged.is_dir():  # an installed wheel; installs are unpacked, so this is a real path
        return Path(str(packaged))
    return Path(__file__).resolve().parents[1] / name
