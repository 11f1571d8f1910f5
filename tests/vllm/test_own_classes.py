"""The plugin serves requests tagged with a deployment's own classes (issue 48): ``extras.rlsched.classes``
names them, ``extra_args.priority`` picks one by name (else ``default_priority``), SLOs follow each class's
``slo_scale``, the strict-priority heuristic serves the heaviest first, a learned policy reads each class as
its tier, and the metrics label every class by its name; against vLLM-Omni's real schedulers."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.vllm

if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from tests.vllm.fakes import check_invariants, finish_wave, mk_req, new_ids, plugin  # noqa: E402

CLASSES = {"paid": {"slo_scale": 2.0, "weight": 4}, "team": {"slo_scale": 3.0, "weight": 2},
           "free": {"slo_scale": 5.0, "weight": 1}, "bulk": {"slo_scale": 20.0, "weight": 0.5, "tier": "background"}}


def _serve(policy: str, step: bool = False) -> tuple[object, list[list[str]]]:
    sched = plugin(policy, step=step, max_num_seqs=1, classes=CLASSES, default_priority="free")
    for rid, cls in (("B", "bulk"), ("F", "free"), ("P", " Paid "), ("T", "team"), ("X", "gold")):
        sched.add_request(mk_req(rid, priority=cls))
    waves = []
    while sched.has_requests():
        out = sched.schedule()
        waves.append(new_ids(out))
        check_invariants(sched)
        finish_wave(sched, out)
    return sched, waves


def test_requests_take_their_class_by_name_with_the_configured_default() -> None:
    sched = plugin("fifo", classes=CLASSES, default_priority="free")
    for rid, cls in (("P", "paid"), ("U", None), ("X", "gold")):
        sched.add_request(mk_req(rid, priority=cls))
    recs = {n: sched.rl_state.records[sched.rl_state.int_id(n)] for n in ("P", "U", "X")}
    assert {k: (r.request.priority, r.request.tier, r.request.weight) for k, r in recs.items()} == {
        "P": ("paid", "realtime", 4.0), "U": ("free", "batch", 1.0), "X": ("free", "batch", 1.0)}
    assert recs["P"].request.slo_s == pytest.approx(2.0 * recs["P"].work_s)
    assert recs["U"].request.slo_s == pytest.approx(5.0 * recs["U"].work_s)
    assert sched.rl_state.invalid == {"priority": 1}


@pytest.mark.parametrize("step", [False, True])
def test_strict_priority_serves_the_heaviest_class_first(step: bool) -> None:
    _, waves = _serve("priority", step)
    firsts = list(dict.fromkeys(r for w in waves for r in w))
    assert firsts[:2] == ["P", "T"] and firsts[-1] == "B"


def test_learned_policy_reads_the_classes_as_their_tiers() -> None:
    sched, waves = _serve("rl:checkpoints/default")
    assert sorted(r for w in waves for r in w) == ["B", "F", "P", "T", "X"]


def test_metrics_label_each_class_by_name() -> None:
    sched, _ = _serve("edf")
    for cls in ("paid", "team", "free", "bulk"):
        assert sched.metrics.sample("rlsched_requests_finished_total", {"priority": cls, "outcome": "slo_met"}) \
            or sched.metrics.sample("rlsched_requests_finished_total", {"priority": cls, "outcome": "slo_missed"})
        assert sched.metrics.sample("rlsched_slo_attainment_ratio", {"priority": cls}) is not None
        assert sched.metrics.sample("rlsched_queue_depth", {"priority": cls}) == 0
    for cls in ("realtime", "batch", "background"):  # the shipped classes are no class of this deployment
        assert sched.metrics.sample("rlsched_queue_depth", {"priority": cls}) is None


def test_a_default_outside_the_classes_is_refused() -> None:
    from rlsched.errors import ConfigError

    with pytest.raises(ConfigError, match="extras.rlsched.default_priority: must be one of"):
        PluginConfig(classes=CLASSES)


def test_the_cpu_executor_costs_requests_of_own_classes() -> None:
    """Bug: the executor standing in for the GPU (serve-cpu) built its ``Request`` from the class name alone and
    refused every class but the shipped three."""
    from types import SimpleNamespace

    from rlsched.integrations.vllm_omni.harness.cost_executor import CostProfileExecutor
    from tests.vllm.fakes import od

    ex = CostProfileExecutor.__new__(CostProfileExecutor)
    ex.od_config = od(extras={"rlsched": {"classes": CLASSES, "default_priority": "free"}})
    ex._init_executor()
    req = mk_req("P", priority="paid")
    rec = ex._record(SimpleNamespace(req=req, request_id="P"))
    assert rec.request.priority == "paid" and rec.work_s > 0
