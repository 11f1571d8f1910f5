"""``DiTPick-v0``: masks, the paired reward against the shadow heuristic, the Gymnasium contract."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from rlsched.envs.pick import OBS_SIZE, DiTPickEnv  # noqa: E402
from rlsched.policies.static import load_static  # noqa: E402
from rlsched.sim import Simulator  # noqa: E402
from rlsched.sim.metrics import CLASS_WEIGHTS  # noqa: E402

SCENARIOS = ["default", "bursty"]


def _env(**kw):  # type: ignore[no-untyped-def]
    return DiTPickEnv(SCENARIOS, {s: f"agents/tuned/{s}.json" for s in SCENARIOS}, window_s=(900.0, 1200.0), **kw)


def _episode(env: DiTPickEnv, seed: int, choose) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    obs, info = env.reset(seed=seed)
    total, done, info = 0.0, False, {}
    while not done:
        assert obs.shape == (OBS_SIZE,) and env.observation_space.contains(obs)
        mask = env.action_masks()
        assert mask[0] and mask.dtype == bool
        obs, reward, done, truncated, info = env.step(choose(mask))
        total += reward
    return total, info


def test_always_the_proposal_earns_exactly_the_shadow_heuristic_credit() -> None:
    env = _env()
    for seed in range(3):
        total, info = _episode(env, seed, lambda m: 0)
        assert total == pytest.approx(0.0, abs=1e-9)
        assert info["agent_credit"] == pytest.approx(info["shadow_credit"]) and info["deviations"] == 0
        assert info["decisions"] > 0


def _credit_after(records, t0: float) -> float:  # type: ignore[no-untyped-def]
    """Class-weighted credit (realtime 1) of the requests that met their SLO, finishing after ``t0``."""
    top = max(CLASS_WEIGHTS.values())
    return sum(CLASS_WEIGHTS[r.request.priority] / top for r in records if r.slo_met and r.finish_s > t0)


def test_the_return_is_the_difference_in_credit_whatever_the_agent_does() -> None:
    """Caught: a reward that is not the class-weighted (realtime 1, batch 2/3, background 1/3)
    difference in SLOs met after the burn-in, e.g. ``_credit`` (envs/pick.py) counting every request
    met as 1: the agent and the shadow share it, so an always-the-proposal episode still returns 0
    and the return still equals agent_credit − shadow_credit (what this test compared before, the
    same two counters ``_reward`` adds). The expected return is recomputed from the records: the
    agent's simulator, and the tuned heuristic re-run here on the episode's workload, each credited
    for the finishes after the first decision point past the burn-in."""
    env = _env()
    episodes: list = []
    start = env._start
    env._start = lambda ep: (episodes.append(ep), start(ep))[1]  # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    choosers = {"random": lambda valid: int(rng.choice(valid)), "last": lambda valid: int(valid[-1])}
    differed = False
    for seed, how in [(seed, how) for seed in range(4) for how in choosers]:
        _, info = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, done, _, info = env.step(choosers[how](np.flatnonzero(env.action_masks())))
            total += reward
        sim, ep = env.sim, episodes[-1]
        assert not sim.waiting and not sim.running and sim.arrivals_left == 0
        # the heuristic alone on the same workload; t0: its first decision point past the burn-in
        heuristic = Simulator(ep.requests, ep.cost, ep.scenario.serving)
        policy = load_static(env.static[ep.scenario.name])
        policy.reset(heuristic)
        while heuristic.advance_to_next_decision() and heuristic.now < ep.start_s + env.burn_in_s:
            heuristic.apply(policy.decide(heuristic))
        t0 = heuristic.now if heuristic.needs_decision else float("inf")
        while heuristic.advance_to_next_decision():
            heuristic.apply(policy.decide(heuristic))
        agent, shadow = _credit_after(sim.records.values(), t0), _credit_after(heuristic.records.values(), t0)
        assert info["agent_credit"] == pytest.approx(agent, abs=1e-9)
        assert info["shadow_credit"] == pytest.approx(shadow, abs=1e-9)
        assert total == pytest.approx(agent - shadow, abs=1e-9)
        differed |= abs(total) > 1e-9
    assert differed  # random picks change the outcome: the reward is not constant


def test_gymnasium_env_checker_passes() -> None:
    from gymnasium.utils.env_checker import check_env

    check_env(_env(), skip_render_check=True)


def test_registered_with_gymnasium() -> None:
    import gymnasium as gym

    import rlsched.envs  # noqa: F401

    env = gym.make("rlsched/DiTPick-v0", scenario=["default"], static={"default": "agents/tuned/default.json"},
                   window_s=(600.0, 900.0))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (OBS_SIZE,)
    assert env.unwrapped.action_masks()[0]


def test_the_old_scenarios_keyword_still_works_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="scenarios= is deprecated, pass scenario="):
        env = DiTPickEnv(scenarios=["default"])
    assert env.scenarios == ["default"]
