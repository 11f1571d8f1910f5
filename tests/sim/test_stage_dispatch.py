"""Issue 50: a late-binding dispatch visits the replicas that may be free (``central._Candidates``), not the whole
fleet, and hands out exactly what a scan of every replica, lowest first, would."""

from __future__ import annotations

import pytest

from rlsched.policies import make_policy
from rlsched.sim import central as central_module
from rlsched.sim.central import _Candidates
from rlsched.sim.stage import Stage
from tests.sim.test_stage import outcome, replicas, workload


class _EveryReplica(_Candidates):
    """The scan it replaces: every replica is a candidate at every dispatch."""

    def __init__(self, replicas: range) -> None:
        super().__init__(replicas)
        self.all = list(replicas)

    def due(self, now: float) -> None:
        for r in self.all:
            self.mark(r)


def _run(monkeypatch: pytest.MonkeyPatch, candidates: type, mode: str, central: str, n: int, rate: float) -> dict:
    monkeypatch.setattr(central_module, "_Candidates", candidates)
    stage = Stage(workload(400, seed=3, rate=rate), replicas(n, mode), seed=0)
    stage.run([make_policy("fifo") for _ in range(n)], central=lambda: make_policy(central))
    return outcome(stage.records)


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("central", ["edf", "static:agents/tuned/default.json"])
@pytest.mark.parametrize("rate", [0.3, 3.0])  # underload, overload
def test_the_candidates_hand_out_what_a_scan_of_every_replica_does(monkeypatch: pytest.MonkeyPatch, mode: str,
                                                                     central: str, rate: float) -> None:
    fast = _run(monkeypatch, _Candidates, mode, central, 12, rate)
    scan = _run(monkeypatch, _EveryReplica, mode, central, 12, rate)
    assert fast == scan


def test_an_overloaded_fleet_dispatch_reads_few_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    visits, dispatches = [0], [0]

    class Counting(_Candidates):
        def pop(self) -> int | None:
            visits[0] += 1
            return super().pop()

        def due(self, now: float) -> None:
            dispatches[0] += 1
            super().due(now)

    monkeypatch.setattr(central_module, "_Candidates", Counting)
    n = 64
    stage = Stage(workload(2000, seed=1, rate=8.0), replicas(n), seed=0)
    stage.run([make_policy("fifo") for _ in range(n)], central=lambda: make_policy("edf"))
    assert dispatches[0] > 1000
    assert visits[0] / dispatches[0] < 2  # 0.67; a scan of every replica, lowest first: 7.9 (up to 64 a dispatch)
