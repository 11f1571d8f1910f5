"""``rlsched bench env`` runs from the command line and reports steps/s."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_env_cli_reports_steps_per_second() -> None:
    cmd = [sys.executable, "-m", "rlsched", "bench", "env", "--json", "--repeats", "1"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.CalledProcessError as exc:
        pytest.fail(exc.stderr)
    result = json.loads(out.stdout)
    assert result["env"] == "rlsched/DiTBatch-v0" and result["steps_per_s"] > 0
