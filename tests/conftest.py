"""Shared fixtures: build requests, scenarios and simulators in one line."""

from __future__ import annotations

import os
import signal

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from rlsched.sim import Request, ServingConfig, Simulator, load_profile  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """Every tier (main, vllm, ray, e2e) runs under a per-test limit: without pytest-timeout a watchdog
    that never fires hangs the tier until CI's own limit, so its absence stops the run here."""
    if not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("pytest-timeout is not installed: every test tier runs with a per-test limit "
                                "(pyproject.toml [tool.pytest.ini_options] timeout)")


def take_ctrl_c() -> None:
    """``preexec_fn`` for a child a test sends SIGINT: it takes Ctrl-C even when pytest was started as a
    background job (``cmd &`` in a script ignores SIGINT, an ignored signal stays ignored across exec,
    and Python then installs no KeyboardInterrupt handler: the child ran to the end, status 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def make_request(rid: int = 0, t: float = 0.0, size: int = 512, priority: str = "batch",
                 steps: int = 50, slo: float = 1e9, model: str = "qwen-image", **kw) -> Request:
    """A Qwen-Image request; ``size`` sets height = width."""
    fields = dict(modality="image", height=size, width=size, num_frames=1, cfg=True)
    fields.update(kw)
    return Request(rid, t, model, num_inference_steps=steps, priority=priority, slo_s=slo, **fields)


@pytest.fixture
def qwen_cost():
    return load_profile("qwen-image-h200")


@pytest.fixture
def make_sim(qwen_cost):
    def build(requests, mode: str = "request", max_num_seqs: int = 4, wait_ms: float = 0.0) -> Simulator:
        return Simulator(requests, qwen_cost, ServingConfig(mode, max_num_seqs, wait_ms))
    return build


@pytest.fixture(autouse=True)
def _no_process_pool_outlives_its_test():
    """A local fan-out's process pool that outlives its test hangs pytest's exit: Python joins every
    pool's manager thread then, for ever if its workers are stuck (CI once ran out its 90 minutes after
    "2784 passed"). The test that leaves one fails here instead, by name."""
    import concurrent.futures.process as pool_module
    import time

    before = set(pool_module._threads_wakeups)
    yield
    deadline = time.monotonic() + 15.0
    while True:
        left = [t for t in pool_module._threads_wakeups if t not in before and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"a process pool still runs after the test: {[t.name for t in left]}"


def pytest_unconfigure(config: pytest.Config) -> None:
    """The last guard against a hang at exit: Python joins every process pool's manager thread after
    the tests, for ever if one is stuck. Name them and fail now instead of at CI's 90-minute limit."""
    import concurrent.futures.process as pool_module
    import sys

    left = [t.name for t in pool_module._threads_wakeups if t.is_alive()]
    if left:
        print(f"\nprocess pools still running after the tests: {left}", file=sys.stderr, flush=True)
        os._exit(3)
