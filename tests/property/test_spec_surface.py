"""Policy and router specs, property-tested (issue 34): every registered policy and router, with an
argument and ``;key=value`` options drawn at their bounds (DRR's quantum, a random router's seed, a
teacher's horizon and ``top``, ``delay_ms``, every projection setting), of the wrong kind, or holding
the grammar's own separators. Each spec is refused with a typed error (``RlschedError``) that names
the policy, router or option, or builds a policy whose run ends with every request finished exactly
once: one GPU under a policy, a two-replica stage under ``POLICY@ROUTER``."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlsched import bounds
from rlsched.errors import RlschedError
from rlsched.evaluation.runs import RunSpec, prepare, simulate
from rlsched.policies import make_policy, policy_names
from rlsched.policies.projected import ProjectionConfig
from rlsched.routing.routers import ROUTERS, TEACHERS
from tests.outcomes import FinishLog, check_outcomes
from tests.property.hostile import edges

WINDOW_S, RATE_SCALE = 10.0, 8.0
"""Each run replays this window of ``default`` at this rate scale: about eight requests."""
SLOW = {"lookahead", "hindsight"}
"""Policies that simulate forks at each decision: drawn, but run over a shorter window."""


def _numbers(bound: bounds.Bound) -> list[str]:
    return [repr(v) if isinstance(v, float) else str(v) for v in edges(bound)]


NUMBER_TEXT = st.sampled_from(sorted({*_numbers(bounds.DRR_QUANTUM_S), *_numbers(bounds.SEED),
                                      *_numbers(bounds.DURATION_S), *_numbers(bounds.DECISION_MS),
                                      "nan", "inf", "-inf", "1e400", "-0", "2", "0x10", "1_0", str(2**70)}))
WORD_TEXT = st.sampled_from(["", " ", "true", "false", "yes", "engine", "ledger", "replica", "rlsched", "random",
                             "agents/tuned/default.json", "checkpoints/pick", "checkpoints/default", "/nonexistent",
                             "/dev/null", "/tmp", "a:b", "a;b", "a=b", "a@b", "fifo", "[1]", "\x00", "é"])
VALUE = st.one_of(NUMBER_TEXT, WORD_TEXT)
OPTION_NAMES = sorted({f.name for f in fields(ProjectionConfig)} | {"view", "delay_ms", "base", "top", "static",
                                                                     "bogus", ""})


@st.composite
def specs(draw: st.DrawFn, names: list[str]) -> str:
    """``NAME[:ARG][;KEY=VALUE]...``, sometimes with a key given twice or a pair without ``=``."""
    text = draw(st.sampled_from(names))
    if draw(st.booleans()):
        text += ":" + draw(VALUE)
    for _ in range(draw(st.integers(0, 2))):
        key, value = draw(st.sampled_from(OPTION_NAMES)), draw(VALUE)
        text += f";{key}" if draw(st.integers(0, 9)) == 0 else f";{key}={value}"
    return text


def _refused(exc: RlschedError, spec: str) -> None:
    """A refusal names what it refuses: the spec's name, argument or one of its option keys."""
    parts = [p.strip() for p in spec.replace(":", ";").replace("=", ";").split(";") if p.strip()]
    parts += [p.replace("\0", "\\0") for p in parts]  # a NUL is shown escaped
    assert any(p in str(exc) for p in parts), (spec, exc)
    event(f"refused: {type(exc).__name__}")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs(policy_names()))
def test_a_hostile_policy_spec_is_refused_or_runs_every_request_once(spec: str) -> None:
    try:
        policy = make_policy(spec)
    except RlschedError as exc:
        _refused(exc, spec)
        return
    window = 4.0 if spec.split(":")[0].split(";")[0] in SLOW else WINDOW_S
    sim = prepare(RunSpec("default", spec, 0, RATE_SCALE, window))
    log = FinishLog(sim)
    try:
        sim.run(policy)
    except RlschedError as exc:  # e.g. a projection setting that makes an invalid decision: typed
        _refused(exc, spec)
        return
    m = check_outcomes(sim, log)
    assert m["requests_unfinished"] == 0 and len(log.calls) == len(sim.records) == m["requests_total"] > 0
    event("ran")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["fifo", "edf", "sjf"]), specs(sorted({*ROUTERS, *TEACHERS})))
def test_a_hostile_router_spec_is_refused_or_routes_every_request_once(policy: str, router: str) -> None:
    slow = router.split(":")[0].split(";")[0] in TEACHERS
    try:
        _, m = simulate(RunSpec("default", f"{policy}@{router}", 0, RATE_SCALE, 4.0 if slow else WINDOW_S,
                                 replicas=2))
    except RlschedError as exc:
        _refused(exc, router)
        return
    ended = m["requests_completed"] + m["requests_failed"] + m["requests_rejected"]
    assert m["requests_unfinished"] == 0 and ended == m["requests_total"] > 0
    assert sum(r["requests"] for r in m["per_replica"]) == m["requests_total"], "a request routed twice or lost"
    event("ran")

