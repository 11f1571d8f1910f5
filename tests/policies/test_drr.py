"""DRR's rounds: a quantum far below a batch's work finishes as a large one does (issue 34: ``drr:1e-6``
added the quantum once per round, 10^7 rounds a decision, and looped for minutes)."""

from __future__ import annotations

import pytest

from rlsched.errors import ConfigError
from rlsched.policies import make_policy
from rlsched.policies.baselines import Drr
from rlsched.sim import Simulator, load_scenario


def _run(policy: Drr, duration_s: float = 1800) -> list[tuple[int, float, float]]:
    sc = load_scenario("default")
    sim = Simulator(sc.requests(seed=0, duration_s=duration_s), sc.cost(), sc.serving).run(policy)
    return sorted((r.request.id, r.first_scheduled_s, r.finish_s) for r in sim.records.values())


@pytest.mark.parametrize("quantum", [0.01, 0.3, 1.0])
def test_skipped_rounds_decide_as_the_round_loop_does(quantum: float) -> None:
    """Adding the idle rounds in one step changes no decision (the loop alone: ``IDLE_ROUNDS`` past any)."""
    looped = Drr(quantum_s=quantum)
    looped.IDLE_ROUNDS = 10**12
    assert _run(Drr(quantum_s=quantum)) == _run(looped)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("quantum", ["1e-6", "1e-9"])
def test_a_tiny_quantum_finishes(quantum: str) -> None:
    records = _run(make_policy(f"drr:{quantum}"), 600)  # before: minutes per decision
    assert records and all(f == f for _, _, f in records)  # every request finished (no NaN finish)


@pytest.mark.parametrize("spec", ["drr:1e-300", "drr:1e300"])
def test_a_quantum_past_the_table_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match=rf"policy {spec}: the argument must be a finite number >= 1e-09 and "
                                          r"<= 1e\+09"):
        make_policy(spec)
