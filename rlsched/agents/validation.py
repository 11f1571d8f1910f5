"""Validation during training: fixed seeds that are neither training nor evaluation seeds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlsched.agents.config import AgentConfig
from rlsched.policies import make_policy
from rlsched.run import RunSpec, prepare
from rlsched.sim import load_scenario
from rlsched.sim.metrics import summarize


def validation_eval(cfg: AgentConfig) -> Callable[[Any], dict[str, float]]:
    """``f(policy or spec) -> {scenario: mean weighted SLO attainment over cfg.eval_seeds}``."""

    def evaluate(policy: Any) -> dict[str, float]:
        out = {}
        for sc in cfg.env.scenarios:
            scenario = load_scenario(sc)  # once per scenario, not per seed
            vals = []
            for seed in cfg.eval_seeds:
                pol = make_policy(policy) if isinstance(policy, str) else policy
                spec = RunSpec(sc, "validation", seed, cfg.eval_rate_scale, cfg.eval_duration_s)
                sim = prepare(spec, scenario)
                vals.append(summarize(sim.run(pol))["weighted_slo_attainment"])
            out[sc] = float(sum(vals) / len(vals))
        return out

    return evaluate
