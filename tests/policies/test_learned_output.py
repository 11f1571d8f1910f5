"""A learned policy never turns a non-finite network output into a decision."""

import numpy as np
import pytest

from rlsched.errors import PolicyOutputError
from rlsched.learned.knob import LearnedPolicy
from tests.conftest import make_request


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_network_output_is_a_typed_error(make_sim, bad: float) -> None:
    policy = LearnedPolicy(lambda obs: np.full(9, bad))
    sim = make_sim([make_request(i, 0.0, size) for i, size in enumerate((512, 1024, 512))])
    with pytest.raises(PolicyOutputError, match="network output is not finite"):
        sim.run(policy)


def test_finite_output_still_decides(make_sim) -> None:
    sim = make_sim([make_request(i, 0.0, size) for i, size in enumerate((512, 1024, 512))])
    sim.run(LearnedPolicy(lambda obs: np.zeros(9)))
    assert all(r.status == "completed" for r in sim.records.values())
