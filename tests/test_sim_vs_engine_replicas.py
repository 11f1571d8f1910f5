"""``scripts/sim_vs_engine.py --replicas``: the simulated side (no server), and its ``LedgerRouter``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _script():  # scripts/ is not a package: load the driver the docs name
    spec = importlib.util.spec_from_file_location("sim_vs_engine", REPO / "scripts" / "sim_vs_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SVE = _script()
ARGS = SVE.parse(["--replicas", "2", "--rate-scale", "2", "--duration", "900", "--time-scale", "25"])


def test_a_stage_run_routes_and_finishes_every_request_once() -> None:
    run = SVE.simulate_stage("edf@rlsched", ARGS, ledger=True)
    ids = [i for batches in run["batches"].values() for b in batches for i in b]
    assert sorted(ids) == sorted(int(i) for i in run["routed"]) and len(set(ids)) == len(ids)
    for slot, batches in run["batches"].items():  # each request ran where it was routed
        assert all(run["routed"][str(i)] == int(slot) for b in batches for i in b)
    assert set(run["attainment"]) == {"realtime", "batch", "background", "all"}


def test_the_ledger_router_sees_what_the_engine_router_sees() -> None:
    # round-robin reads no state: on the ledger or on the replicas it deals out the same
    assert SVE.simulate_stage("fifo@round-robin", ARGS)["routed"] == \
        SVE.simulate_stage("fifo@round-robin", ARGS, ledger=True)["routed"]
    # the rlsched router reads the running batch's remaining time on replica state, and nothing runs on the
    # ledger (every routed, unfinished request waits at its full standalone time): its choices differ
    assert SVE.simulate_stage("edf@rlsched", ARGS)["routed"] != SVE.simulate_stage("edf@rlsched", ARGS, ledger=True)[
        "routed"]


def test_the_ledger_empties_as_the_replicas_finish() -> None:
    from rlsched.policies import make_policy
    from rlsched.policies.routers import make_router
    from rlsched.sim.stage import Stage

    sc, reqs = SVE.workload(ARGS)
    stage = Stage.uniform(reqs, 2, sc.cost(), sc.serving, seed=0)
    router = SVE.LedgerRouter(make_router("rlsched"))
    stage.run([make_policy("edf"), make_policy("edf")], router)
    assert router.ledger.bound == {} and all(not v.waiting for v in router.ledger.views.values())


def test_spread_keeps_arrivals_apart_and_moves_them_as_little_as_that_takes() -> None:
    from rlsched.sim.request import Request

    reqs = [Request(i, t, "qwen-image", "image", 512, 512, 1, 20, True, "batch", 10.0)
            for i, t in enumerate([0.0, 0.1, 0.2, 5.0, 5.3])]
    out = SVE.spread(reqs, 20, 25)  # 20 ms wall x 25 = 0.5 profile s
    assert [r.arrival_s for r in out] == [0.0, 0.5, 1.0, 5.0, 5.5]
    assert [r.id for r in out] == [0, 1, 2, 3, 4] and out[3] is reqs[3]  # order kept; unmoved ones untouched
    assert SVE.spread(reqs, 0, 25) is reqs
