"""Each simulator, stage, request and config-reading message of docs/errors.md, triggered by the
smallest input that earns it (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlsched.errors import ConfigError, InvalidDecision, InvalidRequest
from rlsched.policies import make_policy
from rlsched.sim import Decision, ServingConfig, Simulator, load_profile
from rlsched.sim.scenario import load_scenario, scenario_from_dict
from rlsched.sim.stage import ReplicaSpec, Stage
from rlsched.sim.yamlio import read_yaml
from tests.conftest import make_request

COST = load_profile("qwen-image-h200")


def sim(n: int = 2) -> Simulator:
    return Simulator([make_request(i, 0.0) for i in range(n)], COST, ServingConfig("request", 4))


def stage(n: int = 2) -> Stage:
    specs = [ReplicaSpec(f"r{i}", COST, ServingConfig("request", 4)) for i in range(2)]
    return Stage([make_request(i, 0.0) for i in range(n)], specs)


# ------------------------------------------------------------------ requests
@pytest.mark.parametrize("fields, message", [
    ({"slo": 0.0}, "invalid request field 'slo_s'=0.0: must be > 0 (inf for none)"),
    ({"slo": math.nan}, "invalid request field 'slo_s'=nan: must be > 0 (inf for none)"),
    ({"size": 0}, "invalid request field 'height'=0: must be a positive integer"),
    ({"steps": True}, "invalid request field 'num_inference_steps'=True: must be a positive integer"),
])
def test_a_bad_request_field_is_named(fields: dict, message: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        make_request(0, **fields)
    assert str(err.value) == message


def test_a_workload_with_a_request_id_twice_is_refused() -> None:
    reqs = [make_request(3, 0.0), make_request(3, 1.0)]
    with pytest.raises(InvalidRequest, match="duplicate request id in the workload"):
        Simulator(reqs, COST, ServingConfig("request", 4))
    with pytest.raises(InvalidRequest, match="duplicate request id in the workload"):
        Stage(reqs, [ReplicaSpec("r", COST, ServingConfig("request", 4))])


# ------------------------------------------------------------------ decisions
def test_decisions_the_simulator_cannot_carry_out() -> None:
    s = sim()
    assert s.advance_to_next_decision()  # to the first decision point
    with pytest.raises(InvalidDecision, match="request 99 is not waiting here"):
        s.release([99])
    with pytest.raises(InvalidDecision, match="a rejection must give a reason"):
        s.apply(Decision(reject=(0,), reason=""))
    with pytest.raises(InvalidDecision, match="request 99 is not waiting; only waiting requests can be rejected"):
        s.apply(Decision(reject=(99,), reason="x"))
    s.apply(Decision((0,)))
    with pytest.raises(InvalidDecision, match="the GPU is busy; decide only at a decision point"):
        s.apply(Decision((1,)))
    with pytest.raises(InvalidDecision, match="before the replica's clock"):
        s.receive(make_request(7, 0.0), -1.0)


def test_stage_misuse_is_named() -> None:
    with pytest.raises(ConfigError, match="a stage needs at least one replica"):
        Stage([make_request(0)], [])
    with pytest.raises(ConfigError, match=r"give a router \(early binding\) or a central policy \(late binding"):
        stage().run([make_policy("fifo")] * 2)
    with pytest.raises(ConfigError, match="1 policies for 2 replicas"):
        stage().run([make_policy("fifo")], router=lambda req, view: 0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="future_s must be >= 0, not -1.0"):
        stage().fork(-1.0)
    st = stage()
    with pytest.raises(InvalidDecision, match="replica 5 of 2"):
        st.bind(make_request(9), 5)
    with pytest.raises(InvalidRequest, match="already in this stage"):
        st.bind(make_request(0), 0)


def test_serving_settings_built_in_code_are_checked() -> None:
    with pytest.raises(ConfigError, match="serving.engine_overhead_ms: must be >= 0"):
        ServingConfig("request", 4, engine_overhead_ms=-1.0)


# ------------------------------------------------------------------ files
def test_a_scenario_that_is_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="x.yaml: expected a mapping at the top level, got list"):
        scenario_from_dict([1], "x.yaml")


def test_yaml_that_is_not_utf8_or_not_yaml(tmp_path: Path) -> None:
    bad = tmp_path / "b.yaml"
    bad.write_bytes(b"name: \xff\n")
    with pytest.raises(ConfigError, match=r"b\.yaml: not UTF-8 text"):
        read_yaml(bad)
    bad.write_text("a: [1\n")
    with pytest.raises(ConfigError, match=r"b\.yaml:2: invalid YAML: "):
        read_yaml(bad)


def test_a_scenario_with_replicas_where_one_gpu_is_modelled() -> None:
    sc = load_scenario("qwen-image-8gpu")
    with pytest.raises(ConfigError) as err:
        sc.require_one_gpu("the training environment")
    assert "models one GPU (rlsched simulate, eval and plan run the stage" in str(err.value)
