"""``scripts/sim_vs_engine.py --replicas``: the simulated side (no server) on each router view, and the
comparison of the router's logged views with the replicas' own logs."""

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
    run = SVE.simulate_stage("edf@rlsched", ARGS, view="ledger")
    ids = [i for batches in run["batches"].values() for b in batches for i in b]
    assert sorted(ids) == sorted(int(i) for i in run["routed"]) and len(set(ids)) == len(ids)
    for slot, batches in run["batches"].items():  # each request ran where it was routed
        assert all(run["routed"][str(i)] == int(slot) for b in batches for i in b)
    assert set(run["attainment"]) == {"realtime", "batch", "background", "all"}


def test_the_views_differ_only_for_a_router_that_reads_the_replicas() -> None:
    # round-robin reads no state: on every view it deals out the same
    runs = {v: SVE.simulate_stage("fifo@round-robin", ARGS, view=v)["routed"] for v in SVE.VIEWS.values()}
    assert runs["engine"] == runs["ledger"] == runs["replica"]
    # the rlsched router reads the running batch's remaining time from the published state, and nothing runs on
    # the ledger alone (every routed, unfinished request waits at its full standalone time): its choices differ
    assert SVE.simulate_stage("edf@rlsched", ARGS)["routed"] != SVE.simulate_stage("edf@rlsched", ARGS,
                                                                                   view="ledger")["routed"]


def test_the_logged_views_are_compared_with_the_replicas_waves() -> None:
    calls = [{"devices": "0", "start": 1.0, "end": 3.0, "ids": ["a"]},
             {"devices": "1", "start": 2.0, "end": 4.0, "ids": ["b"]}]
    log = [{"request_id": "a", "replica": 0, "mono": 0.5, "views": {"0": {"from": "missing", "waiting": [],
                                                                          "running": []}}},
           {"request_id": "b", "replica": 1, "mono": 1.5, "views": {
               "0": {"from": "state", "waiting": [], "running": ["a"]},
               "1": {"from": "state", "waiting": [], "running": []}}},
           {"request_id": "c", "replica": 1, "mono": 1.8, "views": {  # b is truly waiting on 1: the view misses it
               "0": {"from": "state", "waiting": [], "running": ["a"]},
               "1": {"from": "state", "waiting": [], "running": []}}},
           {"request_id": "d", "replica": 0, "mono": 2.5, "views": {  # b runs on 1 (truly), the view has it waiting
               "0": {"from": "state", "waiting": [], "running": ["a"]},
               "1": {"from": "stale", "waiting": ["b", "c"], "running": []}}}]
    out = SVE.compare_views(log, calls)
    assert out == {"decisions": 4, "running_differs": 1, "waiting_differs": 2, "from_state": 5, "from_ledger": 2}


def test_spread_keeps_arrivals_apart_and_moves_them_as_little_as_that_takes() -> None:
    from rlsched.sim.request import Request

    reqs = [Request(i, t, "qwen-image", "image", 512, 512, 1, 20, True, "batch", 10.0)
            for i, t in enumerate([0.0, 0.1, 0.2, 5.0, 5.3])]
    out = SVE.spread(reqs, 20, 25)  # 20 ms wall x 25 = 0.5 profile s
    assert [r.arrival_s for r in out] == [0.0, 0.5, 1.0, 5.0, 5.5]
    assert [r.id for r in out] == [0, 1, 2, 3, 4] and out[3] is reqs[3]  # order kept; unmoved ones untouched
    assert SVE.spread(reqs, 0, 25) is reqs


def test_a_waves_state_delay_is_from_its_start_to_the_first_state_listing_it() -> None:
    calls = [{"devices": "0", "start": 1.0, "end": 3.0, "ids": ["a", "b"]},
             {"devices": "1", "start": 2.0, "end": 4.0, "ids": ["c"]}]
    states = [{"replica": 0, "mono": 1.004, "state": {"running": [["a", 0]]}},  # not the whole wave
              {"replica": 0, "mono": 1.010, "state": {"running": [["b", 0], ["a", 0]]}},
              {"replica": 0, "mono": 1.020, "state": {"running": [["a", 0], ["b", 0]]}},
              {"replica": 0, "mono": 2.5, "state": {"running": [["c", 0]]}}]  # c ran on replica 1
    out = SVE.state_delays_ms(states, calls)
    assert out["waves"] == 1 and abs(out["median"] - 10.0) < 1e-6
    assert SVE.state_delays_ms([], calls)["waves"] == 0
