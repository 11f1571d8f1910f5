"""``gym.make("rlsched/DiTBatch-v0")`` in a fresh interpreter that never imported rlsched (issue 48):
the ``rlsched-gymnasium.pth`` an install puts in site-packages registers the environments once
gymnasium is imported (Gymnasium 1.x reads no entry points). Each check runs a subprocess with
``-S`` (no site-packages ``.pth`` processed) and this venv's packages on ``PYTHONPATH``, then
processes the repository's ``.pth`` alone (``site.addsitedir``), as an install does at start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

ROOT = Path(__file__).resolve().parents[2]
PTH = ROOT / "rlsched-gymnasium.pth"
MAKE = ("import gymnasium as gym\n"
        "env = gym.make('rlsched/DiTBatch-v0')\n"
        "print(env.reset(seed=0)[1]['scenario'])\n")


def _python(code: str, site_dir: Path | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    start = f"import site; site.addsitedir({str(site_dir)!r})\n" if site_dir else ""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-S", "-c", start + code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    """A folder holding only the ``.pth`` an install writes (what ``setup.py`` copies)."""
    folder = tmp_path / "site-packages"
    folder.mkdir()
    shutil.copy(PTH, folder / PTH.name)
    return folder


def test_gym_make_by_id_alone_after_install(site_dir: Path, tmp_path: Path) -> None:
    res = _python(MAKE, site_dir, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "default"


def test_without_the_pth_gymnasium_does_not_know_rlsched(tmp_path: Path) -> None:
    """What the ``.pth`` is for: Gymnasium 1.x loads no plugins by entry point."""
    res = _python(MAKE, None, tmp_path)
    assert res.returncode != 0 and "NamespaceNotFound" in res.stderr


def test_the_pth_imports_nothing_heavy_at_start(site_dir: Path, tmp_path: Path) -> None:
    """Every program in the environment processes the ``.pth``: it imports neither gymnasium nor
    rlsched's environments (nor ``typing``) until gymnasium itself is imported."""
    code = "import sys; print(sorted(m for m in ('gymnasium', 'rlsched.envs', 'typing', 'numpy') if m in sys.modules))"
    res = _python(code, site_dir, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"


def test_setup_installs_the_pth_in_wheel_and_editable_installs() -> None:
    text = (ROOT / "setup.py").read_text()
    assert f'PTH = "{PTH.name}"' in text and '"editable_wheel": EditableWheelWithPth' in text
    assert f"include {PTH.name}" in (ROOT / "MANIFEST.in").read_text()
