"""scripts/router_ceiling.py as a subprocess with a tiny budget: its three outputs, paired against the rivals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "router_ceiling.py"


def ceiling(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, cwd=SCRIPT.parents[1])


@pytest.mark.slow
def test_router_ceiling_writes_table_json_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "rc"
    done = ceiling("--pools", "qwen-image-hetero", "--duration", "90", "--seeds", "2", "--loads", "1.5",
                   "--horizon", "30", "--top", "2", "--workers", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "ceiling.json").read_text())
    assert data["seeds"] == [1000, 1001] and data["windows"] == {"qwen-image-hetero": 90.0}
    assert "video-8gpu" in data["skipped"]
    (cell,) = data["cells"]
    assert cell["strongest_value"] == max(cell["rivals"].values())
    runs = {(r["spec"], r["seed"]): r["weighted"] for r in data["runs"]}
    for role in ("lookahead", "hindsight", "central"):
        spec = data["specs"]["qwen-image-hetero"][role]
        diffs = [100 * (runs[(spec, s)] - runs[(cell["strongest"], s)]) for s in (1000, 1001)]
        assert cell[role]["diff"] == pytest.approx(sum(diffs) / 2)
    assert "| qwen-image-hetero | ×1.5 |" in (out / "ceiling.md").read_text()
    assert (out / "ceiling.png").stat().st_size > 10_000


def test_router_ceiling_refuses_training_seeds(tmp_path: Path) -> None:
    done = ceiling("--seed0", "5", "--out", str(tmp_path))
    assert done.returncode != 0 and "evaluation seeds" in done.stderr
