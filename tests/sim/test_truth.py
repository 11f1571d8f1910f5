"""A scenario's ``truth:``: batches run (time, memory, OOM) at the true cost while decisions read the profile."""

import dataclasses
import math

import pytest

from rlsched.errors import ConfigError
from rlsched.evaluation import RunSpec, prepare, prepare_stage, simulate
from rlsched.policies import make_policy
from rlsched.routing.routers import run_spec
from rlsched.sim import Decision, ServingConfig, Simulator, load_scenario
from rlsched.sim.cost import load_profile
from rlsched.sim.request import COMPLETED, FAILED_OOM, WAITING
from rlsched.sim.scenario import scenario_from_dict
from rlsched.sim.truth import Truth, scaled
from tests.conftest import make_request

COST = load_profile("qwen-image-h200")
STATIC_SPEC = "static:agents/tuned/default.json"
CONFIG = ServingConfig("request", 4, 0.0)


def _alone(truth, mode: str = "request") -> Simulator:
    sim = Simulator([make_request(0, size=1024)], COST, ServingConfig(mode, 4, 0.0), truth=truth)
    sim.advance_to_next_decision()
    sim.apply(Decision(batch=(0,)))
    return sim


def test_a_batch_runs_at_the_true_cost_and_publishes_the_believed_one() -> None:
    slow = scaled(COST, time_scale=1.3)
    sim = _alone(slow)
    rec = sim.records[0]
    believed = COST.batch_duration([rec])
    true = slow.batch_duration([slow.record(rec.request)])
    assert true == pytest.approx(1.3 * believed, rel=1e-12)
    assert sim.predicted_end_s == pytest.approx(believed) and sim.gpu_end_s == pytest.approx(true)
    assert rec.work_s == COST.record(rec.request).work_s  # what policies read is the belief
    while sim.advance_to_next_decision():
        pass
    assert rec.status == COMPLETED and rec.finish_s == pytest.approx(true)
    assert sim.predicted_end_s == math.inf


def test_no_truth_is_the_profile_itself() -> None:
    sim = _alone(None)
    assert sim.predicted_end_s == sim.gpu_end_s == pytest.approx(COST.batch_duration([sim.records[0]]))
    assert Truth().apply(COST) is None and Truth(time_scale=1.0, memory_scale=1.0).exact
    assert scaled(COST) is COST


def test_the_attention_scale_moves_only_the_quadratic_term() -> None:
    attn = scaled(COST, quadratic_scale=2.0)
    m, t = COST.model("qwen-image"), attn.model("qwen-image")
    assert (t.a_s, t.b_s_per_mtok, t.encode_s, t.decode_s_per_mpx) == (m.a_s, m.b_s_per_mtok, m.encode_s,
                                                                       m.decode_s_per_mpx)
    assert t.c_s_per_gtok2 == 2 * m.c_s_per_gtok2 and t.act_gb_per_ktok == m.act_gb_per_ktok
    big, small = make_request(0, size=2048), make_request(1, size=512)
    grow = [attn.record(r).work_s / COST.record(r).work_s for r in (big, small)]
    assert grow[0] > 1.2 and grow[0] > grow[1] >= 1.0  # shape-dependent: the large image pays for attention


def test_under_estimated_memory_fails_a_batch_the_profile_says_fits() -> None:
    free = COST.gpu_memory_gb - COST.weights_gb
    per = COST.record(make_request(0, size=2048)).mem_gb
    n = int(free // per)
    assert n >= 1 and (n * per) * 1.15 > free  # fits the belief, not the truth
    reqs = [make_request(i, size=2048) for i in range(n)]
    for calibrate in (False, True):  # on: the batch's requests are queued again (test_online_calibration)
        sim = Simulator(reqs, COST, ServingConfig("request", n, 0.0), truth=scaled(COST, memory_scale=1.15),
                        calibrate=calibrate)
        sim.advance_to_next_decision()
        assert COST.fits(list(sim.waiting.values()))
        sim.apply(Decision(batch=tuple(range(n))))
        assert sim.oom_batches == 1
        assert all(r.status == (WAITING if calibrate else FAILED_OOM) for r in sim.records.values())


def test_memory_used_is_the_true_batch_peak() -> None:
    heavy = scaled(COST, memory_scale=1.15)
    sim = _alone(heavy)
    want = heavy.batch_memory_gb([heavy.record(sim.records[0].request)])
    assert sim.memory_used_gb == pytest.approx(want) and want < COST.gpu_memory_gb
    while sim.advance_to_next_decision():
        pass
    assert sim.memory_used_gb == COST.weights_gb


@pytest.mark.parametrize("scenario,policy", [("default", "edf"), ("qwen-image-8gpu", "edf@least-work"),
                                             ("qwen-image-8gpu", "edf@central")])
def test_a_slower_gpu_costs_slo_and_the_true_belief_is_the_reference(scenario: str, policy: str) -> None:
    sc = load_scenario(scenario)
    spec = RunSpec(scenario, policy, seed=1000, duration_s=900)
    exact = simulate(spec, sc)[1]
    slow = dataclasses.replace(sc, truth=Truth(time_scale=1.3))
    deployed, informed = simulate(spec, slow)[1], simulate(dataclasses.replace(spec, belief="truth"), slow)[1]
    assert deployed["requests_total"] == informed["requests_total"] == exact["requests_total"]
    assert deployed["makespan_s"] > exact["makespan_s"]
    assert deployed["slo_attainment"] < exact["slo_attainment"]
    assert simulate(dataclasses.replace(spec, belief="truth"), sc)[1] == exact  # no truth: belief=truth is moot


def test_each_replica_runs_at_its_groups_truth() -> None:
    sc = dataclasses.replace(load_scenario("qwen-image-hetero"), truth=Truth(time_scale=1.3))
    stage = prepare_stage(RunSpec("qwen-image-hetero", "edf@least-work", seed=1000, duration_s=60), sc)
    for spec, sim in zip(stage.specs, stage.replicas):
        assert sim.truth is spec.truth is not None and sim.cost is spec.cost
        m, t = spec.cost.models["qwen-image"], spec.truth.models["qwen-image"]
        assert t.a_s == pytest.approx(1.3 * m.a_s)
        if spec.cost.name.endswith("u2"):  # an SP replica: the truth is at the same layout
            assert spec.truth.layout == spec.cost.layout and spec.truth.model("qwen-image").sp is not None
    informed = prepare_stage(RunSpec("qwen-image-hetero", "edf@least-work", seed=1000, duration_s=60,
                                     belief="truth"), sc)
    assert all(sim.truth is sim.cost and sim.cost.models["qwen-image"].a_s == pytest.approx(1.3 * s.cost.models[
        "qwen-image"].a_s) for sim, s in zip(informed.replicas, stage.specs))  # the same deployment, truth in hand


def test_one_gpu_replicas_of_a_scenario_carry_the_truth() -> None:
    sc = dataclasses.replace(load_scenario("default"), truth=Truth(time_scale=0.7))
    stage = prepare_stage(RunSpec("default", "edf", seed=1000, duration_s=60, replicas=2), sc)
    assert all(sim.truth is not None and sim.truth.models["qwen-image"].a_s == pytest.approx(
        0.7 * sim.cost.models["qwen-image"].a_s) for sim in stage.replicas)
    assert prepare(RunSpec("default", "edf", seed=1000, duration_s=60), sc).truth is not None


def _scenario(truth: dict) -> dict:
    return {"name": "t", "profile": "qwen-image-h200", "duration_s": 60, "arrival": {"rate_rps": 0.1},
            "classes": {"batch": {"share": 1, "slo_scale": 3}},
            "mix": [{"model": "qwen-image", "modality": "image", "height": 512, "width": 512}], "truth": truth}


def test_the_truth_key_is_read_and_checked() -> None:
    sc = scenario_from_dict(_scenario({"profile": "qwen-image-h200-vllm-omni", "memory_scale": 1.15}), "t.yaml")
    assert sc.truth == Truth("qwen-image-h200-vllm-omni", memory_scale=1.15)
    true = sc.true_cost()
    assert true is not None and true.gpu_memory_gb == load_profile("qwen-image-h200-vllm-omni").gpu_memory_gb
    with pytest.raises(ConfigError, match=r"truth\.time_scale"):
        scenario_from_dict(_scenario({"time_scale": 0}), "t.yaml")
    with pytest.raises(ConfigError, match=r"truth\.speed"):
        scenario_from_dict(_scenario({"speed": 2}), "t.yaml")
    missing = r"truth\.profile.*has no model 'qwen-image', which the scenario's requests use"
    with pytest.raises(ConfigError, match=missing):
        scenario_from_dict(_scenario({"profile": "wan21-t2v-14b-h100"}), "t.yaml").true_cost()
    with pytest.raises(ConfigError, match="--belief"):
        RunSpec("default", "edf", belief="oracle")


def test_step_mode_runs_each_step_at_the_true_cost() -> None:
    slow = scaled(COST, time_scale=1.3)
    sim = Simulator([make_request(0, size=1024, steps=3)], COST, ServingConfig("step", 4, 0.0), truth=slow)
    sim.run(make_policy("fifo"))
    rec = sim.records[0]
    true = slow.record(rec.request)
    assert rec.finish_s == pytest.approx(true.work_s) and rec.finish_s == pytest.approx(1.3 * rec.work_s)


def test_a_truth_in_one_line_is_checked_as_the_key_is() -> None:
    assert Truth.parse("time_scale=1.3, quadratic_scale=2", "X") == Truth(time_scale=1.3, quadratic_scale=2.0)
    assert Truth.parse("profile=flux1-dev-h100", "X") == Truth("flux1-dev-h100")
    assert Truth.parse("", "X").exact
    with pytest.raises(ConfigError, match=r"^X: 'time_scale': expected KEY=VALUE \(keys: profile, time_scale"):
        Truth.parse("time_scale", "X")
    with pytest.raises(ConfigError, match=r"^X: time_scale: .*number"):
        Truth.parse("time_scale=fast", "X")
    with pytest.raises(ConfigError, match=r"^X: speed: unknown key"):
        Truth.parse("speed=2", "X")


def test_a_truth_equal_to_the_profile_changes_nothing() -> None:
    """The truth's code path (true records, a calibrator, the believed end) with a truth equal to the profile
    gives exactly the records of no truth at all: a run with a truth differs by the truth alone."""
    sc = load_scenario("default")
    spec = RunSpec("default", STATIC_SPEC, seed=1000, duration_s=1800)
    same = dataclasses.replace(sc, truth=Truth(profile=sc.profile))
    with_truth = prepare(spec, same)
    assert with_truth.truth is not None and with_truth.calibrator is not None
    with_truth.run(make_policy(STATIC_SPEC))
    plain = prepare(spec, sc).run(make_policy(STATIC_SPEC))
    key = [(r.request.id, r.first_scheduled_s, r.finish_s, r.status, r.batch_id) for r in plain.records.values()]
    assert [(r.request.id, r.first_scheduled_s, r.finish_s, r.status, r.batch_id)
            for r in with_truth.records.values()] == key
    assert with_truth.calibrator.version == 0


def test_late_binding_hands_off_on_the_believed_end_and_the_batch_waits_at_the_replica() -> None:
    """The central queue is told a wave's predicted end: on a GPU 30 % slower the next batch is handed within
    the lead of that prediction — before the wave really ends — and waits queued there until it does."""
    sc = dataclasses.replace(load_scenario("qwen-image-8gpu"), truth=Truth(time_scale=1.3))
    stage = prepare_stage(RunSpec("qwen-image-8gpu", f"{STATIC_SPEC};calibrate=off@central", seed=1000,
                                  duration_s=600), sc)
    handed: list[tuple[float, float, float]] = []
    for sim in stage.replicas:
        orig = sim.receive

        def receive(req, now, sim=sim, orig=orig):
            handed.append((now, sim.predicted_end_s, sim.gpu_end_s))
            orig(req, now)
        sim.receive = receive  # type: ignore[method-assign]
    run_spec(stage, f"{STATIC_SPEC};calibrate=off@central")
    early = [(t, pred, end) for t, pred, end in handed if end != math.inf]
    assert early and all(pred - stage.lead_s <= t < end and pred < end for t, pred, end in early)
    # handed on the belief: well before the true end less the lead (on the true end, none would be)
    assert sum(t < end - stage.lead_s for t, _, end in early) > len(early) // 2
    assert all(r.status == COMPLETED for r in stage.records.values())
