"""A request no GPU of the profile can hold: projection policies never start it ahead of one that fits."""

from __future__ import annotations

import pytest

from rlsched.policies import make_policy
from rlsched.sim import Request, ServingConfig, Simulator, load_profile


@pytest.mark.parametrize("spec", ["static", "static:agents/tuned/default.json", "rl", "pick"])
def test_a_request_that_cannot_fit_is_rejected_not_started(spec: str) -> None:
    """Caught: alone in the queue at first, a 100000x100000 request was started (and failed as
    OOM) by the projection's fallback; it must be rejected (``cannot_fit``) and the rest served."""
    cost = load_profile("qwen-image-h200")
    reqs = [Request(0, 0.0, "qwen-image", "image", 100_000, 100_000, 1, 4, True, "batch", 1e9)]
    reqs += [Request(i, 0.01 * i, "qwen-image", "image", 512, 512, 1, 4, True, "batch", 1e9) for i in (1, 2, 3)]
    sim = Simulator(reqs, cost, ServingConfig("request", 4)).run(make_policy(spec))
    assert sim.oom_batches == 0
    assert {i: (r.status, r.reject_reason) for i, r in sim.records.items()} == {
        0: ("rejected", "cannot_fit"), 1: ("completed", ""), 2: ("completed", ""), 3: ("completed", "")}
