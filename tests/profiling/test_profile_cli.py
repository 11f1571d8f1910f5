"""``rlsched profile`` as a subprocess: fit writes the shipped profile and reports residuals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlsched.sim.cost import PROFILE_DIR

ROOT = Path(__file__).resolve().parents[2]


def rlsched(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlsched", *args], capture_output=True, text=True,
                          check=check, timeout=300, cwd=ROOT)


def test_fit_out_reproduces_the_shipped_file_and_reports_residuals(tmp_path: Path) -> None:
    out = tmp_path / "wan.yaml"
    res = rlsched("profile", "fit", "envs/profiles/measurements/wan21-t2v-14b-h100", "--out", str(out), "--json")
    assert out.read_text() == (PROFILE_DIR / "wan21-t2v-14b-h100.yaml").read_text()
    rows = json.loads(res.stdout)
    assert {r["use"] for r in rows} == {"fit", "check"}
    assert all(abs(r["error"]) < 0.01 for r in rows if r["use"] == "fit")


def test_fit_table_goes_to_stderr_profile_to_stdout() -> None:
    res = rlsched("profile", "fit", "envs/profiles/measurements/flux1-dev-h100")
    assert res.stdout.startswith("# FLUX.1-dev") and "residuals" in res.stderr


def test_missing_set_is_a_clean_error(tmp_path: Path) -> None:
    res = rlsched("profile", "fit", str(tmp_path), check=False)
    assert res.returncode == 2 and "measurements.csv" in res.stderr and "Traceback" not in res.stderr
