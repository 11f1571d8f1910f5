"""Registry-driven: every registered policy (teachers aside: they fork a simulator, offline only) decides on
both states that implement ``QueueView`` — the ``Simulator`` and the plugin's ``PluginState`` — and what it
decides on the plugin's state is a batch the engine can run as-is (``check_decision``)."""

from __future__ import annotations

import pytest

from rlsched.integrations.vllm_omni.safety import check_decision
from rlsched.policies import make_policy
from rlsched.policies.base import policy_kind, policy_names
from rlsched.sim import ServingConfig, Simulator, load_profile
from tests.conftest import make_request
from tests.integrations.test_plugin_state import Key, make_state, sp

SERVED = [n for n in policy_names() if policy_kind(n) != "teacher"]


def test_the_registry_is_what_is_served() -> None:
    assert {"fifo", "edf", "static", "rl", "pick"} <= set(SERVED)
    assert not {"lookahead", "hindsight"} & set(SERVED)


@pytest.mark.parametrize("mode", ["request", "step"])
@pytest.mark.parametrize("name", SERVED)
def test_every_policy_runs_as_is_on_the_plugins_state(name: str, mode: str) -> None:
    state, clock = make_state(mode)
    shapes = [(512, "realtime"), (1024, "batch"), (768, "background"), (512, "batch"), (1024, "realtime")]
    for i, (size, cls) in enumerate(shapes):
        state.add(f"r{i}", sp(size, size, steps=8, extra_args={"priority": cls}), Key(size))
        clock.t += 0.1
    policy = make_policy(name)
    policy.reset(state)
    decision = policy.decide(state)
    reason, ids = check_decision(decision, state)
    assert reason is None, (name, reason)
    # an idle GPU with 5 waiting: a batch, or a wait with a wake-up (a batching policy holds for company)
    assert ids or state.now < decision.wait_until < float("inf"), (name, decision)


@pytest.mark.parametrize("name", SERVED)
def test_every_policy_runs_a_simulator_to_the_end(name: str) -> None:
    reqs = [make_request(i, t=0.5 * i, size=(512, 768, 1024)[i % 3], steps=8,
                         priority=("realtime", "batch", "background")[i % 3], slo=30.0) for i in range(30)]
    sim = Simulator(reqs, load_profile("qwen-image-h200"), ServingConfig("request", 4))
    policy = make_policy(name)
    policy.reset(sim)
    while sim.advance_to_next_decision():
        sim.apply(policy.decide(sim))
    assert sum(r.finish_s is not None for r in sim.records.values()) == 30
