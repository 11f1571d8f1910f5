"""The wheel alone (non-editable, no repository beside it) serves simulate and deploy."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVE_DEPS = ("numpy", "pyyaml", "rich", "pydantic", "safetensors")
"""The core dependencies in pyproject.toml: what docs/deploy.md tells a serving install to add."""


def _uv() -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        pytest.skip("uv not installed")
    return uv


def _run(cmd: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    return res


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the built wheel (``--no-deps``) plus the core dependencies; returns its bin/."""
    tmp, uv = tmp_path_factory.mktemp("wheel"), _uv()
    _run([uv, "build", "--wheel", "--out-dir", str(tmp / "dist"), str(ROOT)], tmp)
    wheel = next((tmp / "dist").glob("rlsched-*.whl"))
    _run([uv, "venv", "-q", "--python", sys.executable, str(tmp / "venv")], tmp)
    py = tmp / "venv" / "bin" / "python"
    _run([uv, "pip", "install", "-q", "--python", str(py), "--no-deps", str(wheel)], tmp)
    _run([uv, "pip", "install", "-q", "--python", str(py), *SERVE_DEPS], tmp)
    return py.parent


@pytest.mark.slow
def test_wheel_ships_profiles_scenarios_traces_and_checkpoint(installed: Path, tmp_path: Path) -> None:
    code = ("import rlsched, rlsched.resources as r; print(rlsched.__file__); "
            "print(r.data_dir('envs')); print(r.data_dir('checkpoints'))")
    where = _run([str(installed / "python"), "-c", code], tmp_path).stdout.split()
    assert all(str(installed.parent) in w for w in where), where  # the installed copy, not the repository
    res = _run([str(installed / "rlsched"), "simulate", "--compare", "fifo,rl", "--duration", "1800", "--json"],
               tmp_path)
    rows = json.loads(res.stdout)
    assert [r["policy"] for r in rows] == ["fifo", "rl"] and rows[0]["requests_total"] > 0
    _run([str(installed / "rlsched"), "simulate", "--scenario", "trace-azure", "--duration", "2000"], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["edf", "rl:checkpoints/default"])
def test_wheel_deploy_from_another_folder(installed: Path, tmp_path: Path, policy: str) -> None:
    res = _run([str(installed / "rlsched"), "deploy", "--policy", policy, "--out", "d.yaml"], tmp_path)
    assert "wrote d.yaml" in res.stdout and f"policy: {policy}" in (tmp_path / "d.yaml").read_text()


def test_deploy_docs_list_every_core_dependency() -> None:
    import re

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert sorted(re.split(r"[<>=!~ ]", d)[0] for d in core) == sorted(SERVE_DEPS)
    doc = (ROOT / "docs" / "deploy.md").read_text()
    install = next(line for line in doc.splitlines() if "pip install --no-deps" in line)
    assert all(dep in install for dep in SERVE_DEPS), install


def test_every_test_runs_under_a_per_test_limit(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.hasplugin("timeout")
    assert 0 < float(pytestconfig.getini("timeout")) <= 300


@pytest.mark.slow
def test_wheel_registers_its_envs_with_gymnasium(installed: Path, tmp_path: Path) -> None:
    """``gym.make("rlsched/DiTBatch-v0")`` without importing rlsched: the wheel's ``rlsched-gymnasium.pth``
    (Gymnasium 1.x reads no entry points; issue 48)."""
    _run([_uv(), "pip", "install", "-q", "--python", str(installed / "python"), "gymnasium>=1.0"], tmp_path)
    code = "import gymnasium as gym; print(gym.make('rlsched/DiTBatch-v0').reset(seed=0)[1]['scenario'])"
    assert _run([str(installed / "python"), "-c", code], tmp_path).stdout.strip() == "default"
