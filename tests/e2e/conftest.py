"""Fixtures of the end-to-end tier: the cached tiny model and real servers that always stop."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlsched.integrations.vllm_omni.cpu_server import build_tiny_model
from tests.e2e.harness import REPO, Server, deploy_stage, group_members

VLLM = Path(sys.executable).with_name("vllm")


_PYTEST_PID = os.getpid()


def _interrupt(signum: int, frame: object) -> None:
    if os.getpid() != _PYTEST_PID:  # a forked child (a process pool's worker) dies of it as it would without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # `timeout` (make test-e2e) sends SIGTERM: unwind like Ctrl-C so the server fixtures still stop
    signal.signal(signal.SIGTERM, _interrupt)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if VLLM.exists() or os.environ.get("RLSCHED_REQUIRE_E2E"):
        return  # under make test-e2e a missing vllm is a failure, not a skip
    skip = pytest.mark.skip(reason=f"no vllm next to {sys.executable} (make test-e2e)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return build_tiny_model(REPO / ".cache" / "e2e-model")


@pytest.fixture
def serve(model_dir: Path, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``serve(*deploy_args, loop="legacy")``: deploy with ``rlsched deploy DEPLOY_ARGS``, start under vLLM-Omni's
    orchestration ``loop`` (``harness.LOOPS``), return the server.

    Every server is stopped (process group killed) at teardown, and none may leave a process.
    """
    started: list[Server] = []

    def start(*deploy_args: str, loop: str = "legacy") -> Server:
        work = tmp_path / f"server{len(started)}"
        work.mkdir()
        stage = deploy_stage(sys.executable, *deploy_args, out=work / "deploy.yaml")
        server = Server(model_dir, stage, work, python=sys.executable, loop=loop)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()
        left = {s.pgid: group_members(s.pgid) for s in started if s.pgid > 0}
        if os.environ.get("RLSCHED_E2E_KEEP_LOGS"):
            for s in started:
                shutil.copy(s.server_log, Path(os.environ["RLSCHED_E2E_KEEP_LOGS"]) / f"{s.port}.log")
        assert not any(left.values()), f"processes left after stop: {left}"
