"""Per-class quotas (issue 48's "optional quota"): a class over its share of the GPU's time over the window
is held out of the decision while another class waits, and runs when it is alone (work-conserving)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlsched.errors import ConfigError
from rlsched.policies import make_policy
from rlsched.sim import Simulator
from rlsched.sim.quota import Quotas, QuotaView
from rlsched.sim.request import RequestRecord
from rlsched.sim.scenario import scenario_from_dict
from rlsched.sim.serving import ServingConfig

FOUR = Path(__file__).resolve().parents[1] / "data" / "four-classes.yaml"


def _scenario(quota: float | None = 0.2, paid_share: float = 0.3, **serving: Any) -> Any:
    """envs/default's GPU and shapes under overload (~5x): a paid class and a heavy bulk class (70 % of
    the requests) capped at ``quota``."""
    data = yaml.safe_load(FOUR.read_text())
    data["arrival"] = {"process": "poisson", "rate_rps": 0.5}
    bulk: dict[str, Any] = {"share": 0.7, "slo_scale": 20, "weight": 1}
    if quota is not None:
        bulk["quota"] = quota
    data["classes"] = {"paid": {"share": paid_share, "slo_scale": 3.0, "weight": 4}, "bulk": bulk}
    data["serving"].update(serving)
    return scenario_from_dict(data, "x.yaml")


def _run(sc: Any, policy: str, seed: int = 0, duration_s: float = 3600) -> Simulator:
    return Simulator(sc.requests(seed=seed, duration_s=duration_s), sc.cost(), sc.serving).run(make_policy(policy))


def _contested_share(sim: Simulator) -> float:
    """Bulk's share of the GPU-seconds of the batches that started while a paid request waited (request
    mode: a batch's seconds from its start to its end, split evenly among its requests)."""
    recs = list(sim.records.values())
    paid = [r for r in recs if r.request.priority == "paid"]
    batches: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in recs:
        batches[r.batch_id].append(r)
    seconds: dict[str, float] = defaultdict(float)
    for batch in batches.values():
        start = min(r.first_scheduled_s for r in batch)
        if any(p.request.arrival_s <= start < p.first_scheduled_s for p in paid):
            for r in batch:
                seconds[r.request.priority] += (max(b.finish_s for b in batch) - start) / len(batch)
    return seconds["bulk"] / sum(seconds.values())


@pytest.mark.parametrize("policy", ["fifo", "edf", "sjf", "seed-composite"])
def test_a_class_over_its_quota_gets_about_its_quota_while_others_wait(policy: str) -> None:
    capped = _contested_share(_run(_scenario(0.2), policy))
    free = _contested_share(_run(_scenario(None), policy))
    # 0.19-0.25 measured (seeds 0, 1): a wave started under the quota overshoots it by up to its own
    # seconds over the 600 s window (waves of 14-87 s here)
    assert capped <= 0.2 + 0.06, capped
    assert free >= 0.4, free  # without the quota the bulk class takes most of the GPU


@pytest.mark.parametrize("policy", ["fifo", "edf", "sjf"])
def test_in_step_mode_the_held_class_is_preempted_and_keeps_to_its_quota(policy: str) -> None:
    """Step mode: a held class's running requests leave the policy's view too (the step preempts them);
    steps are short, so the share keeps close to the quota (0.196-0.201 measured). A quota of 1: no cap."""
    contested = {}
    for quota in (0.2, 1.0):
        sc = _scenario(quota, mode="step")
        sim = Simulator(sc.requests(seed=0, duration_s=1800), sc.cost(), sc.serving)
        assert sim.quotas is not None
        seconds: dict[str, float] = defaultdict(float)
        started = sim.quotas.started

        def spy(batch: list[RequestRecord], s: float, now: float, started: Any = started, sim: Simulator = sim,
                seconds: dict[str, float] = seconds) -> None:
            if any(r.request.priority == "paid" for r in sim.waiting.values()):
                for r in batch:
                    seconds[r.request.priority] += s / len(batch)
            started(batch, s, now)

        sim.quotas.started = spy  # type: ignore[method-assign]
        sim.run(make_policy(policy))
        contested[quota] = seconds["bulk"] / sum(seconds.values())
    assert contested[0.2] <= 0.21 and contested[1.0] >= 0.5, contested


def test_alone_the_class_takes_the_whole_gpu() -> None:
    """Work-conserving: with no other class waiting a capped class runs exactly as uncapped."""
    capped, free = (_run(_scenario(q, paid_share=1e-12), "fifo", duration_s=900) for q in (0.2, None))
    assert capped.quotas is not None and free.quotas is None
    assert {r.request.priority for r in capped.records.values()} == {"bulk"}
    assert capped.quotas.total_s["bulk"] > 0
    assert [(r.first_scheduled_s, r.finish_s) for r in capped.records.values()] == \
           [(r.first_scheduled_s, r.finish_s) for r in free.records.values()]


def test_the_gpu_never_idles_on_a_quota() -> None:
    """Whenever the GPU is idle past FIFO's 50 ms coalescing wait, no request waits (the capped class's
    included): the bulk class drains at full speed once the paid class has nothing waiting."""
    sim = _run(_scenario(0.2), "fifo", duration_s=1800)
    recs = list(sim.records.values())
    spans = sorted({(r.first_scheduled_s, r.finish_s) for r in recs})
    gaps = [(end, start) for (_, end), (start, _) in zip(spans, spans[1:]) if start - end > 0.05 + 1e-9]
    for end, start in gaps:
        assert not [r for r in recs if r.request.arrival_s <= end and r.first_scheduled_s >= start], (end, start)
    last_paid = max(r.first_scheduled_s for r in recs if r.request.priority == "paid")
    assert sum(r.first_scheduled_s > last_paid for r in recs) > 10  # bulk alone, after the paid class


def test_held_classes_leave_the_policys_view_and_come_back_in_its_journal() -> None:
    sc = _scenario(0.2)
    sim = Simulator(sc.requests(seed=0, duration_s=120), sc.cost(), sc.serving)
    view = sim.policy_view()
    assert isinstance(view, QuotaView) and view is sim.policy_view()  # one per simulator
    policy = make_policy("fifo")
    policy.reset(view)
    while sim.advance_to_next_decision() and not view.held:
        sim.apply(policy.decide(sim.policy_view()))
    assert view.held == {"bulk"}
    assert all(r.request.priority == "paid" for r in view.waiting.values())
    assert len(view.waiting) == sum(r.request.priority == "paid" for r in sim.waiting.values()) > 0
    assert all(i not in view.waiting for i, r in sim.waiting.items() if r.request.priority == "bulk")
    fork = sim.fork()  # look-ahead's forks hold whom the original holds, on a window of their own
    assert fork.quotas is not sim.quotas and fork.quotas is not None
    assert fork.policy_view().held == {"bulk"}  # type: ignore[attr-defined]
    assert fork.quotas.shares(sim.now) == sim.quotas.shares(sim.now)  # type: ignore[union-attr]


@pytest.mark.parametrize(("policy", "mode"), [("edf", "request"), ("sjf", "request"), ("priority", "request"),
                                              ("seed-composite", "request"), ("edf", "step"), ("fifo", "step")])
def test_policies_indexing_the_view_never_pick_a_held_request(policy: str, mode: str) -> None:
    """A policy's queue index follows the view's journal (a held class leaving, coming back): every batch it
    picks is of requests the view shows."""
    sc = _scenario(0.2, mode=mode)
    sim = Simulator(sc.requests(seed=2, duration_s=900), sc.cost(), sc.serving)
    chooser = make_policy(policy)
    chooser.reset(sim.policy_view())
    held = 0
    while sim.advance_to_next_decision():
        view = sim.policy_view()
        decision = chooser.decide(view)
        shown = set(view.waiting) | {r.request.id for r in view.running}
        assert set(decision.batch) <= shown, (sim.now, view.held)  # type: ignore[attr-defined]
        held += bool(view.held)  # type: ignore[attr-defined]
        sim.apply(decision)
    assert held > 0


def test_quotas_hold_only_while_an_unheld_class_waits() -> None:
    q = Quotas({"bulk": 0.2, "free": 0.5}, window_s=100)
    assert q.held(0.0, {"bulk", "paid"}) == set()  # nothing started yet
    recs = _records(["bulk", "bulk", "paid"])
    q.started(recs, 30.0, now=0.0)  # bulk 20 s, paid 10 s
    assert q.shares(1.0) == pytest.approx({"bulk": 2 / 3, "paid": 1 / 3})
    assert q.held(1.0, {"bulk", "paid"}) == {"bulk"}
    assert q.held(1.0, {"bulk"}) == set()  # alone: it runs
    q.started(_records(["free"]), 60.0, now=50.0)
    assert q.held(51.0, {"bulk", "free"}) == set()  # both over: holding both would idle the GPU
    assert q.held(51.0, {"bulk", "free", "paid"}) == {"bulk", "free"}
    assert q.held(100.0, {"bulk", "paid"}) == set()  # the first batch left the window
    assert Quotas({"bulk": 1.0}).held(0.0, {"bulk", "paid"}) == set()


def _records(classes: list[str]) -> list[RequestRecord]:
    sc = _scenario(None)
    reqs = sc.requests(seed=0, duration_s=60)
    cost = sc.cost()
    return [cost.record(dataclasses.replace(reqs[0], id=i, priority=c, tier="batch", weight=1.0))
            for i, c in enumerate(classes)]


def test_without_quotas_the_simulator_is_its_own_view() -> None:
    sc = _scenario(None)
    sim = Simulator(sc.requests(seed=0, duration_s=60), sc.cost(), sc.serving)
    assert sim.quotas is None and sim.policy_view() is sim
    assert ServingConfig().quotas == ()


@pytest.mark.parametrize(("quota", "reason"), [
    (0, "greater than 0"), (1.5, "less than or equal to 1"), ("a lot", "valid number"), (True, "not a boolean"),
])
def test_a_bad_quota_is_refused_naming_the_key(quota: Any, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        _scenario(quota)
    assert str(err.value).startswith("x.yaml: classes.bulk.quota") and reason in str(err.value), str(err.value)


@pytest.mark.parametrize("window", [0, -1, 1e9, "x"])
def test_a_bad_window_is_refused_naming_the_key(window: Any) -> None:
    with pytest.raises(ConfigError, match="serving.quota_window_s"):
        _scenario(0.2, quota_window_s=window)


def test_the_scenario_carries_quotas_and_window_to_the_simulator() -> None:
    sc = _scenario(0.25, quota_window_s=120)
    assert sc.serving.quotas == (("bulk", 0.25),) and sc.serving.quota_window_s == 120
    assert sc.classes["bulk"].quota == 0.25 and sc.classes["paid"].quota is None
    quotas = Simulator([], sc.cost(), sc.serving).quotas
    assert quotas is not None and quotas.quotas == {"bulk": 0.25} and quotas.window_s == 120
