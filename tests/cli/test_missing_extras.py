"""A serving-only install (``pip install rlsched``, no extras): the learning verbs say which extra to
install, one line and status 2, not an import traceback; ``eval`` writes its tables without plots."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlsched.cli import EXTRA_OF

ROOT = Path(__file__).resolve().parents[2]
# every optional module made unimportable, as on an install without extras
BLOCKED = f"""import sys
for m in {sorted(EXTRA_OF)!r}:
    sys.modules[m] = None
from rlsched.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", BLOCKED, *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def test_train_without_the_rl_extra_names_it(tmp_path: Path) -> None:
    done = _run("train", "--agent", "agents/ppo.yaml", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2, done.stderr
    assert "rlsched train needs the optional package" in done.stderr and "pip install 'rlsched[rl]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_eval_without_matplotlib_writes_its_tables(tmp_path: Path) -> None:
    done = _run("eval", "--scenarios", "default", "--policies", "fifo,edf", "--seeds", "1000", "--duration", "300",
                "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "no plots: matplotlib is not installed (pip install 'rlsched[rl]')" in done.stderr
    assert (tmp_path / "results.md").is_file() and not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("extra", sorted(set(EXTRA_OF.values())))
def test_every_named_extra_is_declared(extra: str) -> None:
    import tomllib

    assert extra in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
