"""Scenario YAML, property-tested at the table of bounds (issue 34): every numeric field of every
arrival process, class, shape, serving and replica block, drawn just inside, at and just outside
its range and of the wrong kind, with keys missing or extra. Each draw is refused with a
``ConfigError`` that names the file and the field, or loads into a scenario whose run ends with every
request finished exactly once (``tests.outcomes.check_outcomes``)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlsched import bounds
from rlsched.bounds import Bound
from rlsched.errors import ConfigError, RlschedError
from rlsched.evaluation.runs import RunSpec, simulate
from rlsched.policies import make_policy
from rlsched.sim.scenario import scenario_from_dict
from rlsched.sim.simulator import Simulator
from tests.outcomes import FinishLog, check_outcomes
from tests.property.hostile import WRONG_KIND, around

WHERE = "hostile.yaml"
WINDOW_S = 20.0
"""Every run replays at most this window, so a draw at a bound stays a small run."""
SHAPE = {"model": "qwen-image", "modality": "image", "height": 512, "width": 512, "steps": 4}
ARRIVALS: dict[str, dict[str, Any]] = {
    "poisson": {"process": "poisson", "rate_rps": 0.5},
    "gamma": {"process": "gamma", "rate_rps": 0.5, "cv": 1.0},
    "onoff": {"process": "onoff", "rate_rps": 0.5, "on_s": 5.0, "off_s": 5.0, "burst_factor": 2.0},
    "diurnal": {"process": "diurnal", "rate_rps": 0.5, "period_s": 60.0, "amplitude": 0.5, "phase_s": 0.0},
}
FIELDS: dict[str, Bound] = {
    "duration_s": bounds.DURATION_S,
    "arrival.rate_rps": bounds.POSITIVE, "arrival.cv": bounds.CV, "arrival.on_s": bounds.PERIOD_S,
    "arrival.off_s": bounds.PERIOD_S, "arrival.burst_factor": bounds.BURST_FACTOR,
    "arrival.period_s": bounds.PERIOD_S, "arrival.amplitude": bounds.FRACTION, "arrival.phase_s": bounds.PHASE_S,
    "classes.batch.share": bounds.POSITIVE, "classes.batch.slo_scale": bounds.SLO_SCALE,
    "classes.realtime.share": bounds.POSITIVE, "classes.realtime.slo_scale": bounds.SLO_SCALE,
    "mix.0.height": bounds.SIDE_PX, "mix.0.width": bounds.SIDE_PX, "mix.0.num_frames": bounds.FRAMES,
    "mix.0.steps": bounds.STEPS, "mix.0.weight": bounds.POSITIVE, "mix.0.prefix_groups": bounds.PREFIX_GROUPS,
    "serving.max_num_seqs": bounds.NUM_SEQS, "serving.request_batch_max_wait_ms": bounds.MILLIS,
    "serving.engine_overhead_ms": bounds.MILLIS, "serving.engine_overhead_ms_per_mpx": bounds.MILLIS,
}
"""Every numeric scenario field (one-GPU scenarios) and its range in the table of bounds."""
REPLICA_FIELDS: dict[str, Bound] = {
    "replicas.0.count": bounds.REPLICAS, "replicas.0.sp_degree": bounds.SP_DEGREE,
    "replicas.0.cfg_parallel": bounds.CFG_PARALLEL,
}
KEYS = ["name", "profile", "duration_s", "arrival", "arrival.process", "classes", "mix", "mix.0.model",
        "mix.0.modality", "serving", "serving.mode", "stray", "arrival.stray", "mix.0.stray"]
"""Keys a draw removes (``...``) or sets to junk: required keys go missing, unknown keys appear."""


def scenario(process: str) -> dict[str, Any]:
    return {"name": "hostile", "profile": "qwen-image-h200", "duration_s": 60,
            "arrival": dict(ARRIVALS[process]),
            "classes": {"batch": {"share": 1, "slo_scale": 3}, "realtime": {"share": 1, "slo_scale": 2}},
            "mix": [dict(SHAPE)], "serving": {"mode": "request", "max_num_seqs": 2}}


def put(data: dict[str, Any], path: str, value: Any) -> None:
    """Set (``...``: remove) ``path``'s key; a path whose parent is gone or not a mapping is left alone."""
    *parents, last = path.split(".")
    node: Any = data
    for key in parents:
        try:
            node = node[int(key)] if isinstance(node, list) else node[key]
        except (KeyError, IndexError, TypeError, ValueError):
            return
    if not isinstance(node, dict):
        return
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value


def load_or_refuse(data: dict[str, Any]) -> Any:
    """The scenario, or None after checking the refusal is a ConfigError naming this file."""
    try:
        return scenario_from_dict(data, WHERE)
    except ConfigError as exc:
        assert str(exc).startswith(WHERE), exc
        event("refused")
        return None


def run_to_the_end(sc: Any) -> None:
    """Run ``sc`` over at most ``WINDOW_S`` under FIFO; a refusal of the workload (too many arrivals,
    a shape no GPU holds) is a typed error naming the field, else every request ends exactly once."""
    try:
        reqs = sc.requests(seed=0, duration_s=min(sc.duration_s, WINDOW_S))
    except RlschedError as exc:
        assert str(exc).strip(), exc
        return
    event("ran")
    sim = Simulator(reqs, sc.cost(), sc.serving)
    log = FinishLog(sim)
    sim.run(make_policy("fifo"))
    m = check_outcomes(sim, log)
    assert m["requests_unfinished"] == 0 and len(log.calls) == len(reqs) == m["requests_total"]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(ARRIVALS)), st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=3),
       st.data())
def test_numbers_at_their_bounds_are_refused_naming_the_field_or_run_to_the_end(
        process: str, paths: list[str], data: st.DataObject) -> None:
    doc = scenario(process)
    for path in paths:
        value = data.draw(around(FIELDS[path]), label=path)
        put(doc, path, value)
    sc = load_or_refuse(doc)
    if sc is not None:
        run_to_the_end(sc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(ARRIVALS)),
       st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.just(...), WRONG_KIND)), min_size=1, max_size=2))
def test_missing_extra_and_mistyped_keys_are_refused_or_run(process: str, edits: list[tuple[str, Any]]) -> None:
    doc = scenario(process)
    for path, value in edits:
        put(doc, path, value)
    sc = load_or_refuse(doc)
    if sc is not None:
        run_to_the_end(sc)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(REPLICA_FIELDS)), min_size=1, max_size=2), st.data())
def test_replica_groups_at_their_bounds_are_refused_or_run_as_a_stage(paths: list[str], data: st.DataObject) -> None:
    doc = scenario("poisson") | {"replicas": [{"count": 2}]}
    for path in paths:
        put(doc, path, data.draw(around(REPLICA_FIELDS[path]), label=path))
    sc = load_or_refuse(doc)
    if sc is None:
        return
    try:
        _, m = simulate(RunSpec("hostile", "fifo", 0, 1.0, 5.0), sc)
    except RlschedError as exc:  # e.g. a degree the profile does not calibrate
        assert str(exc).strip(), exc
        return
    ended = m["requests_completed"] + m["requests_failed"] + m["requests_rejected"]
    assert m["requests_unfinished"] == 0 and ended == m["requests_total"]
    assert sum(r["requests"] for r in m["per_replica"]) == m["requests_total"]


@pytest.mark.parametrize("path", sorted(FIELDS))
def test_a_value_just_outside_each_bound_is_refused_naming_the_field(path: str) -> None:
    """The draws above could all land inside: one value past each end, deterministic, names its field."""
    bound = FIELDS[path]
    for value in (math.nextafter(bound.high, math.inf) if not bound.integer else int(bound.high) + 1,
                  bound.low if bound.low_open else (math.nextafter(bound.low, -math.inf) if not bound.integer
                                                    else int(bound.low) - 1)):
        if not math.isfinite(value):
            continue
        doc = scenario("diurnal" if "period" in path or "amplitude" in path or "phase" in path else
                       "onoff" if "on_s" in path or "off_s" in path or "burst" in path else "gamma")
        put(doc, path, value)
        with pytest.raises(ConfigError, match=path.split(".")[-1]):
            scenario_from_dict(copy.deepcopy(doc), WHERE)
