"""Memory safety that does not depend on the clock (issue 47), in a real ``vllm serve MODEL_DIR --omni`` over HTTP.

The executor's activations take 4x the profile's memory (``RLSCHED_EXECUTOR_TRUTH=memory_scale=4``: four
1536² images fit the profile together, 66 + 4 x 7.9 GB of 141, but not the GPU, 66 + 4 x 31.5), and every
decision is slower than its budget (a budget of 1 µs: each call falls back, then backs off), so every batch
comes from a fallback: vLLM-Omni's FIFO with the memory check. A burst of large images, on one replica and on
two behind the central queue: no request fails by OOM, and each is answered and run exactly once. Before the
fix the fallback was memory-blind FIFO: the batch that ran out of memory was packed again from the head of
the queue and failed ("4 queued again, 0 failed", then "0 queued again, 4 failed").
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from rlsched import loadgen
from tests.e2e.harness import loop_params
from tests.e2e.test_replicas import executed
from tests.e2e.test_serve import TIME_SCALE, TRUTH_ENV, _planned, total

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

N_REQUESTS = 10
SLOW = "0.001"
"""A decision budget (ms) no decision meets: every call falls back."""
COMMON = ("--policy", "edf", "--profile", "qwen-image-h200-vllm-omni", "--max-num-seqs", "4", "--metrics-port", "9400",
          "--request-batch-max-wait-ms", "200", "--time-scale", str(TIME_SCALE), "--decision-budget-ms", SLOW)
DEPLOYS = {
    "one-replica": COMMON,
    "central": (*COMMON, "--replicas", "2", "--devices", "0,1", "--sp", "1", "--router", "central",
                "--router-budget-ms", SLOW),
}


LAYOUTS = [pytest.param("one-replica", "legacy", id="one-replica"),
           *[pytest.param("central", p.values[0], marks=p.marks, id=f"central-{p.values[0]}")
             for p in loop_params("event-driven")]]
"""The central layout (two replicas) under both of vLLM-Omni's orchestration loops (``make test-e2e``: the
event-driven one; test_replicas runs the central pool under the legacy one)."""


@pytest.mark.parametrize(("layout", "loop"), LAYOUTS)
def test_slow_decisions_fall_back_to_batches_that_fit_and_no_request_fails_by_oom(
        serve: Any, monkeypatch: pytest.MonkeyPatch, layout: str, loop: str) -> None:
    monkeypatch.setenv(TRUTH_ENV, "memory_scale=4")
    server = serve(*DEPLOYS[layout], loop=loop)
    planned = [_planned(i, 0.0, "batch", 1e5, 1536, steps=4) for i in range(N_REQUESTS)]
    results = loadgen.run(server.url, planned, timeout_s=240, workers=N_REQUESTS)
    assert [r.error for r in results if not r.ok] == []  # none failed (by OOM or otherwise), each answered

    ran = executed(server)  # a batch that ran out of memory ran nothing: the executor logs none of it
    assert Counter(i for batches in ran.values() for _, idx in batches for i in idx) == \
        Counter(p.index for p in planned)  # each run exactly once
    replicas = list(server.replica_metrics().values()) if server.replicas > 1 else [server.metrics()]
    assert sum(total(m, "rlsched_oom_requests_total", outcome="failed") for m in replicas) == 0
    assert sum(total(m, "rlsched_oom_requests_total", outcome="retried") for m in replicas) >= 1  # memory-tight
    assert sum(total(m, "rlsched_fallbacks_total") for m in replicas) >= 1  # every batch from a fallback
    if layout == "central":
        assert total(server.api_metrics(), "rlsched_router_fallbacks_total") >= 1
