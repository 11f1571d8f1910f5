"""``rlsched bench stage``'s fleet figures (issue 50): one run per replica count, what each reports."""

from __future__ import annotations

from rlsched.bench.sim import fleet_speed


def test_a_fleet_figure_runs_the_deployed_router_and_times_every_decision() -> None:
    out = fleet_speed(8)
    assert out["requests"] == 215  # default, seed 0, 600 s, eight replicas at its load
    assert out["requests_per_s"] > 0 and out["requests_per_cpu_s"] > 0
    for key in ("decision_ms", "decision_cpu_ms"):
        assert 0 < out[key]["p50"] <= out[key]["p99"]
