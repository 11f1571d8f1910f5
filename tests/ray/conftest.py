"""The Ray tier: one local Ray instance (2 CPUs, no dashboard) for the whole session, always shut down.

Ray is imported inside the fixtures only: a conftest that skips at import time would stop
the whole `make test` run on a core install (no Ray), not just this folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A private local cluster; ``run_tasks(..., ray="auto")`` in this process attaches to it."""
    import ray

    os.environ.pop("RAY_ADDRESS", None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def ray_address(ray_cluster: Any) -> str:
    """Where another process (the CLI in a subprocess) finds the same cluster."""
    return ray_cluster.get_runtime_context().gcs_address
