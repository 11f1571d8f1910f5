"""``rlsched bench calibration``: what online calibration costs (``rlsched.sim.online``), one core.

* **per batch**: ``CostCalibrator.parts`` + ``observe`` for a batch of 1 and 4 requests (what the plugin adds to
  each ``update_from_output``, off the decision);
* **per version**: re-costing the live records when a new version is adopted (``refresh``), and the first
  decision after it, whose queue index re-ranks once, beside an ordinary decision (``static`` on
  ``default``), at 256 and 4,096 waiting.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from rlsched.bench import bench, median_time
from rlsched.policies import make_policy
from rlsched.sim import Simulator, load_scenario
from rlsched.sim.cost import CostModel
from rlsched.sim.online import CostCalibrator, refresh
from rlsched.sim.request import RequestRecord
from rlsched.sim.truth import scaled

DEPTHS = (256, 4096)
CALLS = 2000


@bench("calibration")
def calibration_cost(args: argparse.Namespace) -> dict[str, Any]:
    sc = load_scenario("default")
    cost = sc.cost()
    reqs = sc.requests(0, 50.0, 3600, cost=cost)
    out: dict[str, Any] = {}
    shape = (reqs[0].height, reqs[0].width)
    for n in (1, 4):
        recs = [cost.record(r) for r in reqs if (r.height, r.width) == shape][:n]
        out[f"batch_of_{n}_us"] = round(median_time(lambda recs=recs: _observe(cost, recs), args.repeats)
                                        / CALLS * 1e6, 1)
    new = scaled(cost, 1.3)
    for depth in DEPTHS:
        sim = Simulator(reqs[:depth], cost, sc.serving)
        while sim.arrivals_left:  # every request waiting, nothing run
            sim.fire_next()
        policy = make_policy("static:agents/tuned/default.json")
        policy.reset(sim)
        policy.decide(sim)
        records = list(sim.waiting.values())
        out[f"recost_{depth}_ms"] = round(median_time(lambda records=records: refresh(records, new),
                                                      args.repeats) * 1e3, 2)
        out[f"decision_{depth}_ms"] = round(median_time(lambda policy=policy, sim=sim: policy.decide(sim),
                                                        args.repeats) * 1e3, 2)
        after = [_decide_after_a_version(policy, sim, cost, new) for _ in range(args.repeats)]
        out[f"first_decision_after_{depth}_ms"] = round(statistics.median(after) * 1e3, 2)
    return out


def _observe(cost: CostModel, recs: list[RequestRecord]) -> None:
    cal = CostCalibrator(cost, min_batches=10**9)  # never moves: the per-batch cost alone
    seconds = 1.3 * cost.batch_duration(recs)
    for _ in range(CALLS):
        cal.observe(recs[0].request.model, cal.parts(recs, False, 0.0, 0.0, [0] * len(recs)), seconds)


def _decide_after_a_version(policy: Any, sim: Simulator, cost: CostModel, new: CostModel) -> float:
    sim.adopt_cost(new if sim.cost is cost else cost)  # outside the timer: the engine's update does it
    t = time.perf_counter()
    policy.decide(sim)
    return time.perf_counter() - t
