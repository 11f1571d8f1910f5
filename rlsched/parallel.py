"""Fan independent simulations out to worker processes or a Ray cluster, results in task order.

Every command that runs many independent simulations (evaluation grids, tuning trials,
teacher labels) goes through ``run_tasks`` so that one switch moves them all elsewhere:
``--workers N`` for local processes, ``--ray [ADDRESS]`` for a Ray cluster. ``fn`` must be a
module-level function and each task picklable; each task carries its own seed, so results do
not depend on which worker (or which machine) ran it: the same tasks give bit-identical
results locally and on Ray.

Ray is an optional extra (``pip install 'rlsched[ray]'``) and is imported only when asked for.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rlsched import bounds
from rlsched.argtypes import flag
from rlsched.errors import ConfigError, MissingExtra

if TYPE_CHECKING:
    from concurrent.futures import Future

T = TypeVar("T")
R = TypeVar("R")

LOCAL_RAY = "local"
"""``--ray local``: start a private Ray instance on this machine (no dashboard), for trying Ray out."""


def progress_bar(disable: bool = False, **kwargs: Any) -> Any:
    """A ``rich`` progress bar on stderr (``rich.progress.Progress(**kwargs)``), drawn only on a terminal:
    stdout holds only a command's report, so ``--json`` prints one JSON object there and nothing else (a
    bar on stdout came before ``label --json``'s object), and a log or a pipe gets no bar's leftovers."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    return Progress(console=console, disable=disable or not console.is_terminal, **kwargs)


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], workers: int = 1, ray: str | None = None) -> Iterator[R]:
    """``map(fn, tasks)``, in task order, so callers can advance a progress bar per result.

    ``ray=None``: on ``workers`` local processes (1: in this process). ``ray="auto"`` or an
    address (``HOST:PORT``, ``ray://HOST:10001``): as Ray tasks on that cluster (``auto``: the
    one this process is attached to, e.g. under ``ray job submit``); ``ray="local"``: on a private
    local instance of ``workers`` CPUs. On Ray the cluster's size sets the pace (twice its CPUs
    in flight), not ``workers``.
    """
    if ray is not None:
        yield from _on_ray(fn, tasks, workers, ray)
        return
    workers = local_workers(workers, len(tasks))
    if workers <= 1:
        yield from map(fn, tasks)
    else:
        yield from _on_processes(fn, tasks, workers)


def _on_processes(fn: Callable[[T], R], tasks: Sequence[T], workers: int) -> Iterator[R]:
    """``map`` on ``workers`` local processes, twice as many tasks in flight. The workers ignore
    Ctrl-C: the caller takes it and ends them (a terminal's SIGINT to the whole process group made
    each print a traceback, and the exit waited for their tasks). No future is cancelled before
    they are ended: Python 3.11's pool then failed a cancelled future in its own thread (a
    traceback, InvalidStateError), as ``Executor.map`` cancels its futures when stopped."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(workers, initializer=_worker_signals)
    todo = iter(tasks)
    flight: deque[Future[R]] = deque()
    try:
        for task in itertools.islice(todo, 2 * workers):
            flight.append(pool.submit(fn, task))
        while flight:
            result = flight.popleft().result()
            for task in itertools.islice(todo, 1):
                flight.append(pool.submit(fn, task))
            yield result
    except BaseException:
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for proc in procs:  # not awaited: a task may run minutes
            proc.terminate()
        for proc in procs:  # SIGTERM ends a worker at once (its default action, ``_worker_signals``)
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        # Wait (briefly) for the pool's manager thread to close its wakeup pipe: Python 3.11's exit hook
        # writes to that pipe unlocked, and when the thread closed it meanwhile the exit printed an
        # "OSError: Bad file descriptor" traceback after eval's one line (seen once in CI). Taken before
        # shutdown, which forgets it.
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False)
        if manager is not None:
            manager.join(timeout=10)
        raise
    pool.shutdown()


def _worker_signals() -> None:
    """A worker ignores Ctrl-C (its caller takes it) and dies of SIGTERM. A forked worker inherits its
    parent's Python handlers: one that raises on SIGTERM (a server's graceful stop, pytest's e2e tier)
    made ``terminate`` raise KeyboardInterrupt inside the task, which the pool's worker loop sends back
    as the task's result, and the worker ran the tasks left (CI once waited 80 minutes at exit)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, e.g. under taskset
    or a container's cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def local_workers(workers: int, tasks: int) -> int:
    """Local processes worth starting: ``workers``, at most one per CPU and one per task.

    Each simulation is single-threaded and CPU-bound, so processes beyond the CPUs only add
    start-up and contention (1000 asked on 2 cores started 48 and ran 5x slower than 1)."""
    return max(1, min(workers, cpu_count(), tasks))


def import_ray() -> Any:
    """The ``ray`` module, or a ``MissingExtra`` saying how to install it (Ray is not a core dependency)."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise MissingExtra("--ray", "ray", "ray") from exc


def connect(address: str, workers: int = 1) -> Any:
    """Attach to the Ray cluster at ``address`` (or start a local one for ``"local"``); returns ``ray``.

    A process already attached (``ray.init`` called before, e.g. by a test or a notebook)
    keeps its connection, whatever the address.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    _probe(address)
    try:
        if address == LOCAL_RAY:
            ray.init(num_cpus=max(workers, 1), include_dashboard=False, ignore_reinit_error=True,
                     log_to_driver=False)
        else:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    except ConnectionError as exc:
        raise ConfigError("--ray", f"no Ray cluster at {address!r} ({exc}); start one with `ray start --head`, "
                          f"give its address, or use `--ray {LOCAL_RAY}` for a private local instance") from exc
    return ray


def _probe(address: str, timeout_s: float = 10.0) -> None:
    """Fail fast on a ``HOST:PORT`` nobody listens on: Ray itself retries such an address for minutes."""
    import socket

    host, sep, port = address.rpartition(":")
    if address == LOCAL_RAY or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError("--ray", f"cannot reach a Ray head at {address!r} ({exc}); give the address "
                          "`ray start --head` printed (HOST:6379 by default)") from exc


def _on_ray(fn: Callable[[T], R], tasks: Sequence[T], workers: int, address: str) -> Iterator[R]:
    """Submit a sliding window of tasks (so millions of them do not all sit in the object store)
    and yield their results in task order; unfinished tasks are cancelled if the caller stops early."""
    ray = connect(address, workers)
    remote = ray.remote(num_cpus=1)(fn)
    window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    pending: deque[Any] = deque()
    queue = iter(tasks)
    try:
        for task in queue:
            pending.append(remote.remote(task))
            if len(pending) >= window:
                break
        while pending:
            result = _get(ray, pending.popleft())
            task = next(queue, _END)
            if task is not _END:
                pending.append(remote.remote(task))
            yield result
    finally:
        for ref in pending:
            ray.cancel(ref)


_END: Any = object()


def _get(ray: Any, ref: Any) -> Any:
    """A task's result; a task's own exception is raised as itself (e.g. ``ConfigError``), as it is
    locally, so the CLI reports it the same way; Ray's wrapper with the remote traceback is its cause."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from exc
        raise


_workers_arg = flag(bounds.WORKERS)


def add_parallel_args(p: argparse.ArgumentParser, workers: int | None = 1) -> None:
    """``--workers N`` and ``--ray [ADDRESS]``: the same two flags on every command that fans out."""
    p.add_argument("--workers", type=_workers_arg, default=workers,
                   help="local processes, each runs one simulation at a time; capped at this machine's CPUs "
                        f"({cpu_count()} here) and at the number of simulations (with --ray: only the CPUs of "
                        "--ray local; a cluster runs as many tasks as it has CPUs)"
                        + ("; None: the preset's" if workers is None else ""))
    p.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="run the simulations as tasks on a Ray cluster (needs `pip install 'rlsched[ray]'`): "
                        "bare --ray or 'auto' = the cluster this process is attached to (RAY_ADDRESS, "
                        "`ray start`, `ray job submit`), HOST:PORT or ray://HOST:10001 = that cluster, "
                        f"'{LOCAL_RAY}' = a private instance on this machine with --workers CPUs")


__all__ = ["LOCAL_RAY", "add_parallel_args", "connect", "cpu_count", "import_ray", "local_workers", "progress_bar",
           "run_tasks"]
