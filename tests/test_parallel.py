"""``rlsched.parallel``: local fan-out in task order, the shared flags, Ray only when asked for.

The Ray side itself runs in the Ray tier (tests/ray, ``make test-ray``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlsched.errors import ConfigError, MissingExtra
from rlsched.parallel import add_parallel_args, run_tasks


def _slow_square(x: int) -> int:
    import time

    time.sleep(0.05 * (3 - x % 3))  # later tasks finish first: order must come from the caller's tasks
    return x * x


def test_local_processes_keep_task_order() -> None:
    assert list(run_tasks(_slow_square, list(range(6)), workers=2)) == [x * x for x in range(6)]
    assert list(run_tasks(_slow_square, [4], workers=2)) == [16]


def test_flags_default_to_local_and_bare_ray_means_the_attached_cluster() -> None:
    p = argparse.ArgumentParser()
    add_parallel_args(p)
    assert (p.parse_args([]).ray, p.parse_args([]).workers) == (None, 1)
    assert p.parse_args(["--ray"]).ray == "auto"
    assert p.parse_args(["--ray", "10.0.0.1:6379", "--workers", "8"]).ray == "10.0.0.1:6379"


def test_missing_ray_is_a_typed_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError, as on a core install
    with pytest.raises(MissingExtra, match=r"rlsched\[ray\]") as err:
        list(run_tasks(abs, [-1, -2], ray="auto"))
    assert err.value.option == "--ray"


def test_no_cluster_to_attach_to_is_a_config_error_naming_the_flag() -> None:
    pytest.importorskip("ray")
    if Path("/tmp/ray/ray_current_cluster").exists():
        pytest.skip("a Ray cluster is running on this machine: `auto` would attach to it")
    code = ("from rlsched.parallel import connect\n"
            "try:\n    connect('auto')\nexcept Exception as e:\n    print(type(e).__name__, e)")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.stdout.startswith("ConfigError --ray: no Ray cluster at 'auto'"), res.stdout + res.stderr[-2000:]


def test_an_address_nobody_listens_on_fails_fast_naming_the_flag() -> None:
    pytest.importorskip("ray")
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigError, match=f"--ray: cannot reach a Ray head at '127.0.0.1:{port}'"):
        list(run_tasks(abs, [-1], ray=f"127.0.0.1:{port}"))


def test_eval_without_ray_never_imports_it(tmp_path: Path) -> None:
    """The core install has no Ray: the local path must not touch it."""
    code = ("import sys; from rlsched.cli import main; "
            f"main(['eval', '--scenarios', 'default', '--policies', 'fifo', '--seeds', '1000', '--loads', '1',"
            f" '--duration', '300', '--workers', '2', '--out', r'{tmp_path}', '--json']); "
            "assert 'ray' not in sys.modules and 'optuna' not in sys.modules, 'imported'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_a_typed_error_in_a_worker_comes_back_typed() -> None:
    """Not a BrokenProcessPool: the CLI reports a worker's ConfigError like an in-process one."""
    from rlsched.errors import ConfigError
    from rlsched.evaluation import run_grid

    with pytest.raises(ConfigError, match="nowhere.json"):
        run_grid(["default"], ["fifo", "static:nowhere.json"], [1000], [1.0], 300.0, workers=2, progress=False)


def test_typed_errors_pickle_through_their_own_arguments() -> None:
    import pickle

    from rlsched.errors import CheckpointError, ConfigError, InvalidRequest, TraceFormatError

    for err in (ConfigError("f", "why"), TraceFormatError("t.csv", 3, "bad"), InvalidRequest("height", 5, why="x"),
                MissingExtra("--ray", "ray", "ray"), CheckpointError("tampered")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)


def test_a_stopped_fan_out_leaves_no_pool_thread_running() -> None:
    """Bug (seen once in CI): after Ctrl-C, eval's one line was followed by an 'OSError: Bad file
    descriptor' traceback: Python 3.11's exit hook wrote to the pool's wakeup pipe while the pool's
    manager thread was closing it. The fan-out now waits for that thread before the error goes on."""
    import threading

    before = set(threading.enumerate())
    results = run_tasks(_slow_square, list(range(8)), workers=2)
    assert next(results) == 0
    with pytest.raises(KeyboardInterrupt):
        results.throw(KeyboardInterrupt)
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []




def _first_fast(task: tuple[int, str]) -> int:
    import time

    x, folder = task
    time.sleep(0.0 if x == 0 else 2.0)
    Path(folder, f"finished-{x}").touch()
    return x


def test_a_stopped_fan_out_ends_its_workers_even_when_sigterm_has_a_python_handler(tmp_path: Path) -> None:
    """Bug (CI ran out its 90 minutes after "2784 passed"): a process whose SIGTERM handler raises
    (the e2e conftest's, a server's graceful shutdown) forked workers with that handler, so ending them
    with SIGTERM raised KeyboardInterrupt inside the task (possibly half-way through sending a result),
    which the pool's worker loop catches and sends back: the worker lived on and ran the tasks left."""
    import multiprocessing
    import signal

    def _raise(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    before = {p.pid for p in multiprocessing.active_children()}
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        results = run_tasks(_first_fast, [(x, str(tmp_path)) for x in range(4)], workers=2)
        assert next(results) == 0  # the workers are inside 2 s tasks now
        with pytest.raises(KeyboardInterrupt):
            results.throw(KeyboardInterrupt)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for proc in multiprocessing.active_children():
        if proc.pid not in before:
            proc.join(timeout=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["finished-0"]
