"""What makes a recipe's output a function of its config and seed, and where that output came from.

``seed_everything`` is called first by every recipe (``rlsched learn``, ``train``, ``tune``):
Python's, numpy's and torch's global generators seeded, one torch thread, and torch's
deterministic algorithms. The global seeding matters even where the code passes its own
generators down: torch seeds its default generator from the OS at start-up (torch 2.x), so
a network built before the first ``manual_seed`` starts from different weights in every
process — how the pick recipe's first imitation fit came to differ between runs on identical
labels. Parallel work needs no seeding of its own: ``rlsched.parallel.run_tasks`` returns
results in task order and each task carries its own workload seed.

``provenance`` is what a shipped file records about its making (commit, dirty tree, command,
library versions, machine, time). It is kept out of every content hash
(``rlsched.learned.checkpoint.content_hash``), so the same recipe at the same seed gives the
same hash on any day, from any folder, at any commit that computes the same thing.
"""

from __future__ import annotations

import os
import platform
import random
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PROVENANCE = "provenance"
"""Key of the provenance block in checkpoint metadata and tuned files (never hashed)."""
PROVENANCE_FILE = "provenance.json"
"""In the run dir: one ``provenance`` entry per ``train`` (a resume adds one); ``rlsched export`` copies
them into the checkpoint."""
RECIPE_PATHS = ("rlsched", "agents", "envs", "setup.py", "pyproject.toml")
"""What a recipe reads: a change here (tracked, uncommitted) marks the tree dirty. Outputs such as
``checkpoints/`` and ``results/`` do not (the recipe is writing them)."""
_UNKNOWN = "unknown"


def seed_everything(seed: int, torch: bool = True) -> None:
    """Seed the global generators and pin torch to one deterministic thread (``torch``: if installed;
    ``rlsched tune`` passes False: it runs no torch, and importing it costs a second and a half)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # for processes started from here; BLAS already loaded keeps its own
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002  (libraries such as SB3 draw from the legacy global)
    if torch:
        _seed_torch(seed)


def _seed_torch(seed: int) -> None:
    try:
        import torch
    except ImportError:
        return
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """Commit (``git rev-parse HEAD`` of the checkout this rlsched runs from, or "unknown"), whether
    the recipe's inputs had uncommitted changes, the exact command, versions, machine and time."""
    root = Path(__file__).resolve().parents[2]
    commit, dirty = _git_state(root)
    return {"commit": commit, "dirty": dirty, "command": command_line(argv), "python": platform.python_version(),
            "libraries": _versions(), "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
            "cpu": cpu_model(), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux: ``cpuinfo``'s "model name"; elsewhere what ``platform`` knows, or
    "unknown"): the same recipe gives the same weights bit for bit only on the same kind of CPU (torch
    and numpy choose kernels, and with them the order of float sums, by instruction set)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def command_line(argv: list[str] | None = None) -> str:
    """``argv`` (default ``sys.argv``) as a shell line; the console script and ``python -m rlsched``
    both read as ``rlsched``."""
    args = list(sys.argv if argv is None else argv)
    if args and (Path(args[0]).name == "rlsched" or args[0].endswith(os.path.join("rlsched", "__main__.py"))):
        args[0] = "rlsched"
    return shlex.join(args)


def _git_state(root: Path) -> tuple[str, bool | str]:
    """(HEAD, dirty) of the git checkout at ``root``; ("unknown", "unknown") for an installed copy."""
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if Path(top).resolve() != root:  # rlsched installed inside someone else's repository
            return _UNKNOWN, _UNKNOWN
        changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *RECIPE_PATHS)
        return _git(root, "rev-parse", "HEAD"), bool(changed)
    except (OSError, subprocess.CalledProcessError):
        return _UNKNOWN, _UNKNOWN


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          timeout=30).stdout.strip()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("numpy", "torch", "stable-baselines3", "sb3-contrib", "optuna"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


__all__ = ["PROVENANCE", "PROVENANCE_FILE", "command_line", "provenance", "seed_everything"]
