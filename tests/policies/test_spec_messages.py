"""Each policy- and router-spec message of docs/errors.md, triggered by the spec that earns it and
naming the spec or option (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import pytest

from rlsched.errors import ConfigError
from rlsched.policies import make_policy
from rlsched.routing.routers import make_router
from rlsched.routing.teachers import LookaheadRouter


@pytest.mark.parametrize("spec, message", [
    (":x", "empty policy name in ':x'"),
    ("edf;x=1", "takes no options (got x)"),
    ("static;nosuch=1", "not a projection setting (known"),
])
def test_a_bad_policy_spec_names_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_policy(spec)
    assert message in str(err.value)


@pytest.mark.parametrize("spec, policy, message", [
    ("random:x", None, "random takes a seed, an integer >= 0"),
    ("nosuch", None, "or central for late binding"),
    ("lookahead", None, "lookahead simulates the replica policy: give it as POLICY@lookahead"),
    ("lookahead;view=engine", "fifo", "decides on forks of the replicas' true state (a ceiling): it takes "
                                      "view=replica only"),
    ("round-robin;delay_ms=-1", None, "milliseconds in [0, 3600000], not '-1'"),
    ("round-robin;view=ledger;delay_ms=5", None, "only with view=engine (the published state's delay"),
    ("lookahead;bogus=1", "fifo", "takes only the options base=ROUTER and top=N (got bogus)"),
    ("lookahead:soon", "fifo", "the horizon must be a number of seconds, not 'soon'"),
    ("lookahead;top=x", "fifo", "top must be an integer >= 2 (0: every replica), not 'x'"),
    ("hindsight;base=", "fifo", "base='' is not a router the teacher can start from: "),
    ("lookahead;base=lookahead", "fifo", "base='lookahead' is not a router the teacher can start from: "),
])
def test_a_bad_router_spec_names_what_is_wrong(spec: str, policy: str | None, message: str) -> None:
    """Caught by tests/property/test_spec_surface.py: ``hindsight;base=`` was refused as "policy: empty
    policy name in ';view=replica'", a spec the user never typed, naming neither the router nor base."""
    with pytest.raises(ConfigError) as err:
        make_router(spec, policy)
    assert message in str(err.value)
    assert spec.split(";")[0].split(":")[0] in str(err.value) or "router" in str(err.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"horizon_s": -5.0}, "the horizon must be a number of seconds > 0, not -5.0"),
    ({"horizon_s": 10.0, "future_s": 20.0}, "future_s must lie in [0, horizon 10], not 20.0"),
    ({"top": 1}, "top must be 0 (every replica) or an integer >= 2, not 1"),
])
def test_a_teacher_built_in_code_checks_its_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match="router hindsight") as err:
        LookaheadRouter("fifo", name="hindsight", **kwargs)
    assert message in str(err.value)
