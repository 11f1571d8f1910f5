"""``rlsched serve-cpu`` as a user runs it: ``rlsched deploy --cpu`` writes the config, serve-cpu serves it in the
foreground, requests get answers, Ctrl-C stops the server and its children (status 130, one line)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsched import loadgen
from rlsched.integrations.vllm_omni.cpu_server import free_port, group_members
from rlsched.sim import load_scenario
from tests.e2e.harness import LOOP_ENV, LOOPS, _scrape, leave_nothing, loop_params, uses_loop

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
RLSCHED = [sys.executable, "-m", "rlsched"]


def _serve_cpu(tmp_path: Path, *deploy_args: str, loop: str = "legacy") -> tuple[subprocess.Popen[str], Path, Path]:
    cfg = tmp_path / "deploy.yaml"
    res = subprocess.run([*RLSCHED, "deploy", "--cpu", *deploy_args, "--out", str(cfg)], capture_output=True,
                         text=True, timeout=120, check=True, cwd=tmp_path)
    assert f"rlsched serve-cpu --config {cfg}" in res.stdout, res.stdout  # deploy prints the line to run
    assert "distributed_executor_backend: rlsched.integrations.vllm_omni.cost_executor.CostProfileExecutor" \
        in res.stdout
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    # --model-dir under e2e-model: make test-e2e's orphan check (pgrep "vllm serve .*e2e-model") sees it too
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen([*RLSCHED, "serve-cpu", "--config", str(cfg), "--port", str(port := free_port()),
                                 "--model-dir", str(tmp_path / "e2e-model")], stdout=o, stderr=e, text=True,
                                cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", LOOP_ENV: LOOPS[loop]})
    proc.port = port  # type: ignore[attr-defined]
    return proc, out, err


def _wait_ready(proc: subprocess.Popen[str], out: Path, err: Path, timeout_s: float = 300) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"ready on \S+ \(process group (\d+)\)", out.read_text())
        if found:
            return int(found.group(1))
        assert proc.poll() is None, f"serve-cpu exited {proc.returncode}:\n{out.read_text()}\n{err.read_text()[-3000:]}"
        time.sleep(1)
    raise AssertionError(f"serve-cpu not ready in {timeout_s} s:\n{err.read_text()[-3000:]}")


def _ctrl_c(proc: subprocess.Popen[str], pgid: int, err: Path) -> None:
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130, err.read_text()[-3000:]
    assert group_members(pgid) == [], "vllm serve or a stage process outlived serve-cpu"
    last = err.read_text().rstrip("\n").splitlines()[-1]
    assert last == f"rlsched: interrupted: serve-cpu stopped vllm serve (process group {pgid}, no process left)"


def test_serve_cpu_answers_a_request_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    metrics_port = free_port()
    proc, out, err = _serve_cpu(tmp_path, "--policy", "edf", "--max-num-seqs", "4", "--time-scale", "50",
                                "--metrics-port", str(metrics_port))
    pgid = -1
    try:
        pgid = _wait_ready(proc, out, err)
        text = out.read_text()
        url = f"http://127.0.0.1:{proc.port}"  # type: ignore[attr-defined]
        assert f"curl -s {url}/v1/images/generations" in text
        assert f"rlsched loadgen {url} --scenario default --duration 600 --max-requests 50 --time-scale 50" in text
        body = {"prompt": "a lighthouse at dusk", "size": "512x512", "num_inference_steps": 20,
                "extra_params": {"priority": "realtime", "slo_ms": 60000}}  # the curl line's request
        status, reply = loadgen.post_json(f"{url}/v1/images/generations", body, 120)
        assert status == 200 and loadgen.count_images(reply, 512, 512) == 1, str(reply)[:300]
        # the label is the served model's name: the model folder's basename, not its path
        m = _scrape(f"http://127.0.0.1:{metrics_port}/metrics", "e2e-model")
        assert m['rlsched_requests_finished_total{outcome="slo_met",priority="realtime"}'] == 1
        _ctrl_c(proc, pgid, err)
    finally:
        leave_nothing(proc, pgid)


@pytest.mark.parametrize("loop", loop_params("event-driven"))  # the router pool: test_replicas runs it legacy
def test_serve_cpu_serves_two_replicas_behind_the_router(tmp_path: Path, loop: str) -> None:
    proc, out, err = _serve_cpu(tmp_path, "--replicas", "2", "--devices", "0,1", "--policy", "edf@rlsched",
                                "--time-scale", "50", loop=loop)
    pgid = -1
    try:
        pgid = _wait_ready(proc, out, err)
        uses_loop(err.read_text(errors="replace"), loop)
        url = f"http://127.0.0.1:{proc.port}"  # type: ignore[attr-defined]
        reqs = load_scenario("default").requests(0, 16.0, 600)
        planned = loadgen.plan(reqs, 50, max_requests=8)
        results = loadgen.run(url, planned, timeout_s=120)
        assert [r.error for r in results if not r.ok] == []
        _ctrl_c(proc, pgid, err)
    finally:
        leave_nothing(proc, pgid)
