"""Start a real ``vllm serve MODEL_DIR --omni`` with the stage ``rlsched deploy`` writes; stop it for sure.

Only 127.0.0.1. The stand-ins, the server's environment and its process group (``Server.stop`` kills the
whole group) are ``rlsched serve-cpu``'s own (``rlsched.integrations.vllm_omni.cpu_server``): one copy.
Imports no vLLM: the server runs in ``.venv-vllm`` as a subprocess.

Used by ``tests/e2e`` and ``scripts/sim_vs_engine.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsched.integrations.vllm_omni import cpu_server
from rlsched.integrations.vllm_omni.cpu_server import EXECUTOR, free_port, group_members

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240.0
LOOP_ENV = "VLLM_OMNI_EVENT_DRIVEN_ORCH"
LOOPS = {"legacy": "0", "event-driven": "1"}
"""vLLM-Omni 0.30's two orchestration loops, by the value of ``LOOP_ENV`` that picks each: the legacy 1 ms poll
(the default for a diffusion pipeline) and the event-driven one (a diffusion poller task per pool feeding a
dispatch queue). The replica tests run under both (issue 47)."""
EVENT_LOOP_LINE = "Event-driven orchestration loop enabled"
"""What vLLM-Omni's orchestrator logs when it runs the event-driven loop (``_orchestration_loop_event_driven``)."""
BOTH_LOOPS_ENV = "RLSCHED_E2E_BOTH_LOOPS"
"""Set (``make test-e2e-loops``): every replica test runs under both loops. Unset (``make test-e2e``, within its
900 s): each runs under the one it names, so that each pool (router, central) runs under each loop once."""
__all__ = ["BOTH_LOOPS_ENV", "EVENT_LOOP_LINE", "EXECUTOR", "LOOPS", "LOOP_ENV", "REPO", "Server", "deploy_stage",
           "free_port", "free_ports", "group_members", "leave_nothing", "loop_params", "uses_loop"]


def loop_params(tier: str) -> list[Any]:
    """``LOOPS`` as pytest parameters: ``tier`` always; the other loop only with ``BOTH_LOOPS_ENV`` set (skipped
    otherwise: doubling every replica test would not fit ``make test-e2e``'s 900 s)."""
    import pytest

    both = bool(os.environ.get(BOTH_LOOPS_ENV))
    return [pytest.param(loop, marks=() if loop == tier or both else pytest.mark.skip(
        reason=f"the {loop} loop runs this test with {BOTH_LOOPS_ENV}=1 (make test-e2e-loops)")) for loop in LOOPS]


def uses_loop(log: str, loop: str) -> None:
    """The server whose log is ``log`` runs vLLM-Omni's ``loop`` (it logs the event-driven one when it starts it)."""
    event = EVENT_LOOP_LINE in log
    if event != (loop == "event-driven"):
        raise AssertionError(f"asked for the {loop} orchestration loop, the server runs the "
                             f"{'event-driven' if event else 'legacy'} one\n{log[-3000:]}")


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports that are free now (a stage's replicas serve metrics on them)."""
    for _ in range(100):
        base = free_port()
        if base + n - 1 > 65535:
            continue
        try:
            with contextlib.ExitStack() as held:
                for port in range(base, base + n):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {n} consecutive free ports found")


def deploy_stage(python: str, *deploy_args: str, out: Path) -> dict[str, Any]:
    """Run ``rlsched deploy`` and return the stage of its printed ``--stage-overrides`` line."""
    res = subprocess.run([python, "-m", "rlsched", "deploy", *deploy_args, "--out", str(out)],
                         capture_output=True, text=True, timeout=120, check=True, cwd=REPO)
    found = re.search(r"--stage-overrides '(\{.*\})'", res.stdout)
    if found is None:
        raise AssertionError(f"no --stage-overrides line in rlsched deploy's output:\n{res.stdout}")
    return dict(json.loads(found.group(1)))


@dataclass
class Server:
    """One ``vllm serve`` process group; ``stage`` is exactly what ``rlsched deploy`` printed, plus the executor."""

    model_dir: Path
    stage: dict[str, Any]
    workdir: Path
    python: str = sys.executable
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    pgid: int = -1
    """The server's process group (its leader's pid), kept after ``stop`` for orphan checks."""
    loop: str = "legacy"
    """vLLM-Omni's orchestration loop (a key of ``LOOPS``); ``start`` checks the server runs it."""

    @property
    def model(self) -> str:
        """The model as the server is told it (its folder's path)."""
        return str(Path(self.model_dir).resolve())

    @property
    def model_name(self) -> str:
        """The served model's name, every ``rlsched_*`` sample's ``model_name``: the folder's basename (no
        ``--served-model-name``), not its path."""
        return Path(self.model).name

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def executor_log(self) -> Path:
        return self.workdir / "executor.jsonl"

    @property
    def router_log(self) -> Path:
        return self.workdir / "router.jsonl"

    @property
    def replicas(self) -> int:
        """How many replicas the stage runs (``num_replicas``; 1 when absent)."""
        (spec,) = self.stage.values()
        return int(spec.get("num_replicas", 1))

    @property
    def metrics_ports(self) -> list[int]:
        """The ports the replicas serve their plugin metrics on (each takes the first free one)."""
        (spec,) = self.stage.values()
        span = int(spec["extras"]["rlsched"].get("metrics_ports", 1))
        return list(range(self.metrics_port, self.metrics_port + span))

    @property
    def server_log(self) -> Path:
        return self.workdir / "server.log"

    def overrides(self) -> dict[str, Any]:
        stage = json.loads(json.dumps(self.stage))
        (sid, spec), = stage.items()
        spec["distributed_executor_backend"] = EXECUTOR  # the only addition: no GPU here
        spec["extras"]["rlsched"]["metrics_port"] = self.metrics_port
        return {sid: spec}

    def start(self) -> Server:
        self.executor_log.unlink(missing_ok=True)
        self.router_log.unlink(missing_ok=True)
        Path(f"{self.router_log}.states").unlink(missing_ok=True)
        if len(self.metrics_ports) > 1:
            self.metrics_port = free_ports(len(self.metrics_ports))
        env = cpu_server.server_env({"RLSCHED_EXECUTOR_LOG": str(self.executor_log),
                                     "RLSCHED_ROUTER_LOG": str(self.router_log), "OMP_NUM_THREADS": "1",
                                     LOOP_ENV: LOOPS[self.loop],
                                     "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
        cmd = cpu_server.serve_command(Path(self.python).with_name("vllm"), Path(self.model), self.port,
                                       self.overrides())
        with self.server_log.open("wb") as log:
            self.proc = cpu_server.start(cmd, env, self.workdir, log)
        self.pgid = self.proc.pid
        atexit.register(self.stop)  # a second guard if the caller never reaches its finally
        try:
            cpu_server.wait_healthy(self.proc, self.url, START_TIMEOUT_S, self.log_tail)
            uses_loop(self.server_log.read_text(errors="replace"), self.loop)
        except BaseException:
            self.stop()
            raise
        return self
    def stop(self) -> None:
        """Kill the process group: SIGTERM, then SIGKILL after a grace period; bounded time."""
        proc, self.proc = self.proc, None
        if proc is not None:
            cpu_server.stop_group(proc)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.server_log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # ------------------------------------------------------------- reading
    def metrics(self, port: int | None = None) -> dict[str, float]:
        """The ``rlsched_*`` samples of the plugin's Prometheus endpoint (the first replica's unless ``port``),
        by ``name{labels}``."""
        return _scrape(f"http://127.0.0.1:{port or self.metrics_port}/metrics", self.model_name)

    def replica_metrics(self) -> dict[str, dict[str, float]]:
        """Each replica's plugin metrics, by the devices it names in ``rlsched_replica_info{devices}``."""
        out = {}
        for port in self.metrics_ports:
            m = self.metrics(port)
            (info,) = [k for k in m if k.startswith("rlsched_replica_info{")]
            devices = re.search(r'devices="([^"]*)"', info)
            assert devices is not None and f'port="{port}"' in info, info
            out[devices.group(1)] = m
        return out

    def api_metrics(self) -> dict[str, float]:
        """The ``rlsched_*`` samples of the API server's ``/metrics`` (the router's live there)."""
        return _scrape(f"{self.url}/metrics", self.model_name)

    def routed(self) -> list[dict[str, Any]]:
        """The router's choices in order (``$RLSCHED_ROUTER_LOG``), one dict per routed request."""
        return _read_jsonl(self.router_log)

    def states(self) -> list[dict[str, Any]]:
        """The replicas' published states as the router pool heard them, in order (``$RLSCHED_ROUTER_LOG.states``)."""
        return _read_jsonl(Path(f"{self.router_log}.states"))

    def executed(self) -> list[dict[str, Any]]:
        """The executor's calls in order (the warm-up first), one dict each."""
        return _read_jsonl(self.executor_log)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One dict per non-empty line of ``path``; none while the server has not written it."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _scrape(url: str, model: str) -> dict[str, float]:
    """The ``rlsched_*`` samples at ``url`` by ``name{labels}``, ``model_name`` left out of the key once
    checked: every sample names ``model`` (the served model), as vLLM's own metrics do."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("rlsched_"):
            sample, _, value = line.rpartition(" ")
            name, _, labels = sample.partition("{")
            pairs = re.findall(r'\w+="[^"]*"', labels)
            assert f'model_name="{model}"' in pairs, f"{sample} does not name the model {model}"
            kept = [p for p in pairs if not p.startswith("model_name=")]
            out[name + ("{" + ",".join(kept) + "}" if kept else "")] = float(value)
    return out


def leave_nothing(proc: subprocess.Popen, pgid: int) -> None:  # type: ignore[type-arg]
    """After a test that ran ``rlsched serve-cpu`` (``proc``; ``pgid`` its server's process group, or <= 0
    before one was seen): whatever the test's outcome, no process of it is left."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)
    if pgid > 0:
        for pid in group_members(pgid):
            os.kill(pid, signal.SIGKILL)
