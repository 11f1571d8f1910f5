"""``rlsched deploy --cpu`` and ``rlsched serve-cpu``'s checks, without vLLM (the server itself: tests/e2e/
test_serve_cpu.py, ``make test-e2e``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlsched.cli import main
from rlsched.commands import serve_cpu
from rlsched.integrations.vllm_omni import cpu_server
from rlsched.integrations.vllm_omni.cpu_server import EXECUTOR, STUBS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cpu_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "deploy.yaml"
    assert main(["deploy", "--cpu", "--policy", "edf", "--metrics-port", "9400", "--time-scale", "20",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err


def test_deploy_cpu_writes_the_executor_and_prints_the_serve_cpu_line(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d.yaml"
    assert main(["deploy", "--cpu", "--policy", "edf", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"distributed_executor_backend: {EXECUTOR}" in text
    assert f"rlsched serve-cpu --config {out.resolve()}" in text
    (stage,) = yaml.safe_load(out.read_text())["stages"]
    assert stage["distributed_executor_backend"] == EXECUTOR
    overrides = json.loads(text.split("--stage-overrides '")[1].split("'")[0])
    assert overrides["0"]["distributed_executor_backend"] == EXECUTOR
    assert cpu_server.read_cpu_stage(out) == ("0", {k: v for k, v in stage.items() if k != "stage_id"})


def test_deploy_without_cpu_says_how_to_try_it_without_a_gpu(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--policy", "edf", "--out", str(tmp_path / "d.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["executor"] is None
    assert main(["deploy", "--policy", "edf", "--out", str(tmp_path / "d.yaml")]) == 0
    text = capsys.readouterr().out
    assert "no GPU here? add --cpu, then `rlsched serve-cpu --config OUT`" in text
    assert "distributed_executor_backend" not in yaml.safe_load((tmp_path / "d.yaml").read_text())["stages"][0]


def test_a_missing_config_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _error(["serve-cpu", "--config", str(tmp_path / "nope.yaml")], capsys)
    assert "--config:" in err
    assert "nope.yaml: no such file; write one with `rlsched deploy --cpu --policy edf --out nope.yaml`" in err


def test_a_config_not_written_for_cpu_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--policy", "edf", "--out", str(tmp_path / "gpu.yaml")]) == 0
    capsys.readouterr()
    err = _error(["serve-cpu", "--config", str(tmp_path / "gpu.yaml")], capsys)
    assert "gpu.yaml: distributed_executor_backend:" in err
    assert "the config was not written for CPU; write it with `rlsched deploy --cpu ...` (sets" in err


@pytest.mark.parametrize(("text", "message"), [
    ("stages: [\n", "cannot read it as YAML"),
    ("stages: []\n", "stages: expected the one stage `rlsched deploy` writes (a list of one mapping)"),
    ("stages:\n- stage_id: 0\n  engine_backend: my.Engine\n", "engine_backend: is 'my.Engine', not the plugin's "
     "rlsched.integrations.vllm_omni.RLDiffusionEngine: not a config `rlsched deploy` wrote"),
    (f"stages:\n- stage_id: 0\n  engine_backend: {cpu_server.ENGINE_BACKEND}\n"
     f"  distributed_executor_backend: {EXECUTOR}\n",
     "extras.rlsched: missing: the plugin's settings are not in the config"),
])
def test_a_malformed_config_is_named_with_its_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                    message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    err = _error(["serve-cpu", "--config", str(bad)], capsys)
    assert str(bad) in err and message in err


def test_a_port_in_use_is_named(cpu_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        err = _error(["serve-cpu", "--config", str(cpu_config), "--port", str(port)], capsys)
        assert f"--port: port {port} on 127.0.0.1 is in use or not permitted" in err and "choose another" in err
        doc = yaml.safe_load(cpu_config.read_text())
        doc["stages"][0]["extras"]["rlsched"]["metrics_port"] = port
        cpu_config.write_text(yaml.safe_dump(doc))
        err = _error(["serve-cpu", "--config", str(cpu_config), "--port", str(cpu_server.free_port())], capsys)
        assert f"deploy.yaml: extras.rlsched.metrics_port: port {port} on 127.0.0.1 is in use" in err


def test_no_vllm_here_says_where_to_get_it(cpu_config: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    err = _error(["serve-cpu", "--config", str(cpu_config), "--port", str(cpu_server.free_port())], capsys)
    assert "vllm: no `vllm` command beside" in err
    assert ("serve-cpu runs vLLM-Omni 0.30 installed in this environment (from a checkout: make "
            ".venv-vllm/.e2e-installed, then .venv-vllm/bin/rlsched serve-cpu; docs/deploy.md") in err


def test_a_server_that_exits_or_never_answers_is_a_typed_error(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    with pytest.raises(cpu_server.ServerError, match=r"vllm serve exited \(0\) before it was healthy\nthe log"):
        cpu_server.wait_healthy(gone, f"http://127.0.0.1:{cpu_server.free_port()}", 30, lambda: "the log")
    stuck = cpu_server.start([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ), tmp_path, None)
    try:
        with pytest.raises(cpu_server.ServerError, match="vllm serve not healthy after 1 s"):
            cpu_server.wait_healthy(stuck, f"http://127.0.0.1:{cpu_server.free_port()}", 1.0)
    finally:
        cpu_server.stop_group(stuck, grace_s=5)
    assert cpu_server.group_members(stuck.pid) == []


def test_the_ready_lines_are_the_request_the_metrics_and_loadgen(cpu_config: Path) -> None:
    _, stage = cpu_server.read_cpu_stage(cpu_config)
    text = serve_cpu.ready_lines("http://127.0.0.1:8000", stage, 123)
    assert "curl -s http://127.0.0.1:8000/v1/images/generations -H 'Content-Type: application/json' -d '" in text
    assert "curl -s http://127.0.0.1:9400/metrics | grep '^rlsched_'" in text
    assert "rlsched loadgen http://127.0.0.1:8000 --scenario default --duration 600 --max-requests 50 " \
           "--time-scale 20" in text
    body = json.loads(text.split("-d '")[1].split("'")[0])
    assert body["extra_params"] == {"priority": "realtime", "slo_ms": 60000}


def test_the_tiny_model_is_built_once(tmp_path: Path) -> None:
    root = cpu_server.build_tiny_model(tmp_path / "m")
    assert json.loads((root / "model_index.json").read_text())["_class_name"] == "QwenImagePipeline"
    (root / "vae" / "config.json").write_text("{}")  # kept while the version stamp matches
    assert cpu_server.build_tiny_model(root) == root and (root / "vae" / "config.json").read_text() == "{}"


def test_the_stand_ins_import_any_submodule_and_refuse_calls(tmp_path: Path) -> None:
    code = ("import torchvision, torchaudio; from torchvision.transforms import functional as F; "
            "import torchaudio.functional; print(torchvision.__version__, torchvision.__file__)\n"
            "try:\n    F.resize(1)(2)\nexcept RuntimeError as e:\n    print('refused', e)")
    env = cpu_server.server_env({"PYTHONPATH": str(ROOT)}, base={k: v for k, v in os.environ.items()
                                                                 if k != "PYTHONPATH"})
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"0.0.0+stub {STUBS / 'torchvision' / '__init__.py'}") and "refused" in res.stdout


def test_the_stand_ins_ship_in_the_package() -> None:
    """Packages of the wheel (setuptools' own finder, as pyproject.toml configures it): the stand-ins travel
    with rlsched, not with the test tree."""
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["rlsched*"]))
    assert {"rlsched.integrations.vllm_omni.cpu_stubs", "rlsched.integrations.vllm_omni.cpu_stubs.torchvision",
            "rlsched.integrations.vllm_omni.cpu_stubs.torchaudio"} <= found
    assert not (ROOT / "tests" / "e2e" / "stubs").exists() and not (ROOT / "tests" / "e2e" / "tiny_model.py").exists()
