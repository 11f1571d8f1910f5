"""Issue 50: what the deployed router believes of a replica includes what it sent there that no published
state reflects yet, so arrivals inside one publication delay do not herd onto one replica."""

from __future__ import annotations

from rlsched.policies import make_policy
from rlsched.routing.routers import make_router
from rlsched.routing.views import Ledger, replica_state
from rlsched.sim import Request, ServingConfig
from rlsched.sim.stage import Stage
from tests.sim.test_stage import COST, replicas

STATIC = "static:agents/tuned/default.json"


def image(i: int, arrival_s: float, slo_s: float) -> Request:
    return Request(i, arrival_s, "qwen-image", "image", 1024, 1024, 1, 20, True, "batch", slo_s)


def burst(n: int, gap_s: float = 0.001) -> list[Request]:
    """``n`` arrivals inside one publication delay (10 ms), each due before the one before it."""
    return [image(i, i * gap_s, 60.0 - i) for i in range(n)]


def routes(spec: str, n: int = 8) -> list[int]:
    stage = Stage(burst(n), replicas(n), seed=0)
    stage.run([make_policy(STATIC) for _ in range(n)], make_router(spec, STATIC))
    return [stage.routed[i] for i in range(n)]


def test_arrivals_inside_one_delay_spread_over_idle_replicas_as_on_the_true_state() -> None:
    """Each idle replica started its request at once, but no state had said so: the next arrival, due
    earlier, saw that request as waiting behind it and the replica as free, and joined it (the lowest index
    among equals) — all eight onto replica 0, where the true state spreads them over all eight."""
    true = routes("rlsched;view=replica")
    assert sorted(true) == list(range(8))
    assert routes("rlsched") == true  # the deployed view, states heard 10 ms late


def ledger() -> Ledger:
    led = Ledger(lambda slot: COST, ServingConfig("request", 4))
    led.follow([0])
    for i, name in enumerate("abcd"):
        led.add(name, 0, image(i, 0.0, 60.0))
    return led


def unacknowledged(led: Ledger) -> list[int]:
    return list(led.views[0].unacknowledged)


def test_a_state_acknowledges_what_it_lists_and_every_send_before_it() -> None:
    led = ledger()
    assert unacknowledged(led) == [0, 1, 2, 3]  # nothing heard: every send may have started
    led.publish(0, replica_state(1, 5.0, [("b", 0)]), now=1.0)
    assert unacknowledged(led) == [2, 3]  # b runs: a, sent before it, waits there
    led.publish(0, replica_state(2, 5.0, [("b", 3)]), now=2.0)
    assert unacknowledged(led) == [2, 3]  # a state listing nothing newer acknowledges nothing newer
    led.remove("d")
    assert unacknowledged(led) == [2]
    led.publish(0, replica_state(3, 0.0, [], finished=["c"]), now=3.0)
    assert unacknowledged(led) == []


def test_unacknowledged_work_counts_only_while_the_view_sees_the_replica_free() -> None:
    """Sent to a replica seen busy, a request waits for that batch's end and runs in deadline order like
    the rest: a new request due earlier is not put behind it."""
    from rlsched.routing.routers import RlschedRouter

    led = ledger()
    view, router = led.views[0], RlschedRouter()
    view.now = 0.0
    early = 10.0  # due before every request in the ledger (60 s)
    oldest = view.waiting[0].remaining_s  # sent to a replica seen idle: it may run already
    assert view.started_unseen is view.waiting[0] and router._unseen(view, early, 0.0) == oldest
    led.publish(0, replica_state(1, 50.0, [("a", 0)]), now=0.0)  # a runs for 50 s; b, c, d sent after it
    assert unacknowledged(led) == [1, 2, 3] and view.started_unseen is None and router._unseen(view, early, 0.0) == 0.0


def test_the_simulators_state_is_what_the_router_reads_of_the_wire(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``ViewRouter`` hands the ledger the state ``ReplicaState.read`` gives of ``replica_state``'s wire dict
    (the round trip skipped for speed), calibration and preemptions included."""
    import dataclasses

    from rlsched.evaluation import RunSpec, prepare_stage
    from rlsched.routing.routers import run_spec
    from rlsched.routing.views import ReplicaState
    from rlsched.sim import load_scenario
    from rlsched.sim.truth import Truth

    seen: list[ReplicaState] = []
    take = Ledger.take

    def spy(self, slot, state, now):  # type: ignore[no-untyped-def]
        seen.append(state)
        return take(self, slot, state, now)

    monkeypatch.setattr(Ledger, "take", spy)
    sc = dataclasses.replace(load_scenario("default"), truth=Truth.parse("time_scale=1.3", "--truth"))
    run_spec(prepare_stage(RunSpec("default", "edf", 0, 1.5, 200.0, mode="step", replicas=3), sc), "edf@rlsched")
    assert any(s.calibration for s in seen) and any(s.preempted for s in seen) and any(s.finished for s in seen)
    for s in seen:
        wire = replica_state(s.seq, s.remaining_s, s.running, s.finished, s.preempted, s.calibration)
        assert ReplicaState.read(wire) == s
