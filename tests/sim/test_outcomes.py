"""Every request ends exactly once: ``on_finish`` per request id, over whole runs.

Catches a simulator that reports a finish twice (``Simulator._finish`` firing the
``on_finish`` callbacks twice, or a second ``_finish`` path for the same record): the
environments' rewards, the learned policies' SLO history and the plugin's metrics all count
finishes through these callbacks, while ``summarize()`` counts statuses and does not notice.
"""

from __future__ import annotations

import math

import pytest

from rlsched.evaluation import RunSpec, prepare
from rlsched.policies import make_policy
from rlsched.sim.request import RUNNING, WAITING
from tests.conftest import make_request
from tests.outcomes import FinishLog, check_outcomes

SHED = "static:agents/tuned/default.json;shed_lost=true"
PICK = "pick:checkpoints/pick;static=agents/tuned/default.json"


def _run(spec: RunSpec, policy: str, horizon_s: float = math.inf):  # type: ignore[no-untyped-def]
    sim = prepare(spec)
    sim.horizon_s = horizon_s
    log = FinishLog(sim)
    sim.run(make_policy(policy))
    return sim, log, check_outcomes(sim, log)


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("policy", ["fifo", "sjf", "edf", "priority", "drr", "seed-composite"])
def test_each_request_is_reported_finished_once(policy: str, mode: str) -> None:
    """Caught: ``on_finish`` fired twice per finish (simulator.py ``_finish``). omni-mix ×1.5 has
    out-of-memory batches under some of these policies, so failures are counted too."""
    sim, log, m = _run(RunSpec("omni-mix", policy, 1, 1.5, 1800.0, mode=mode), policy)
    assert m["requests_unfinished"] == 0 and len(log.calls) == m["requests_total"] > 50


def test_the_runs_above_include_out_of_memory_failures() -> None:
    """The parametrized runs are not all-completed: some fail with OOM (else a double report
    of a failure would go unseen)."""
    _, log, m = _run(RunSpec("omni-mix", "sjf", 1, 1.5, 1800.0, mode="step"), "sjf")
    assert m["requests_failed"] > 0 and m["failures"]["oom_batches"] > 0


@pytest.mark.parametrize("mode", ["request", "step"])
def test_rejected_requests_are_reported_once(mode: str) -> None:
    """Caught: a rejection reported twice (``_reject`` → ``_finish``), or not at all."""
    _, log, m = _run(RunSpec("default", SHED, 1, 1.5, 1800.0, mode=mode), SHED)
    assert m["requests_rejected"] > 0 and m["requests_completed"] > 0
    assert m["requests_unfinished"] == 0


def test_an_out_of_memory_batch_reports_each_member_once(make_sim) -> None:
    """Caught: a failed batch's members reported twice (``Simulator._out_of_memory`` → ``_finish``)."""
    sim = make_sim([make_request(i, 0.0, size=2048) for i in range(8)] + [make_request(8, 1.0)], max_num_seqs=8)
    log = FinishLog(sim)
    sim.run(make_policy("fifo"))
    m = check_outcomes(sim, log)
    assert m["requests_failed"] == 8 and m["requests_completed"] == 1


def test_the_candidate_policy_run_reports_each_finish_once() -> None:
    """The pick policy registers its own ``on_finish`` hook (its SLO history): still one report per request."""
    _, log, m = _run(RunSpec("default", PICK, 2, 1.25, 1200.0), PICK)
    assert m["requests_unfinished"] == 0 and len(log.calls) == m["requests_total"]


@pytest.mark.parametrize(("policy", "mode"), [("fifo", "request"), (SHED, "request"), ("sjf", "step")])
def test_a_horizon_leaves_requests_waiting_or_running_and_only_then(policy: str, mode: str) -> None:
    """A horizon-cut run: the left-over records are waiting or running, never reported finished,
    and ``summarize()``'s unfinished count is the requests that no callback reported."""
    sim, log, m = _run(RunSpec("default", policy, 0, 1.5, mode=mode), policy, horizon_s=900.0)
    left = [r for r in sim.records.values() if r.status in (WAITING, RUNNING)]
    assert left and m["requests_unfinished"] == len(left) + sim.arrivals_left
    assert not set(log.calls) & {r.request.id for r in left}
