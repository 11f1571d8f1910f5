"""Fan independent simulations out to worker processes, results in task order.

Every command that runs many independent simulations (evaluation grids, tuning trials,
teacher labels) goes through ``run_tasks`` so that one switch moves them all elsewhere.
``fn`` must be a module-level function and each task picklable; each task carries its own
seed, so results do not depend on which worker ran it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], workers: int = 1) -> Iterator[R]:
    """``map(fn, tasks)`` on ``workers`` local processes (1: in this process), in task order."""
    if workers <= 1 or len(tasks) <= 1:
        yield from map(fn, tasks)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(workers, len(tasks))) as pool:
        yield from pool.map(fn, tasks, chunksize=1)


__all__ = ["run_tasks"]
