"""``rlsched/DiTPick-v0``: pick one of K feasible candidate batches; rewarded against a shadow heuristic.

Each episode draws a request-mode scenario, a load and a window of arrivals on a training
seed. The strengthened heuristic (the scenario's tuned ``static``) serves the first
``burn_in_s`` seconds alone, so the agent starts with a realistic queue, not an empty GPU.
From then on, at every decision point with a choice, the agent picks a candidate of
``rlsched.learned.pick`` (slot 0 is the heuristic's own proposal; invalid slots are masked
through ``action_masks()``, as sb3-contrib's ``MaskablePPO`` expects).

Reward (paired, input-dependent baseline, as in Decima / RLTune): the class-weighted SLO
credit (realtime 1, batch 2/3, background 1/3 per request met) the agent's simulator earns
in the step, minus what a *shadow* heuristic earns over the same simulated interval on an
identical copy of the workload (run once per episode: the heuristic is deterministic, so
its finish times are the lockstep copy). At the end the shadow's remaining credit is
subtracted, so the return is exactly (agent − heuristic) requests met after the burn-in:
0 for a policy that always picks slot 0, whatever the workload's own difficulty.

Observation: ``GLOBAL_DIM`` queue-level entries (the knob policy's ``dit-batch-obs/2``
before its top-K slots) then K × ``CAND_FIELDS`` per-candidate features, in [-5, 5].

Arguments and actions are checked as the other two ids check theirs (``rlsched.envs.checks``): the episode
distribution, every scenario or pool and every tuned file at construction, ``reset`` options alike, and an
action outside ``Discrete(K)`` is an ``InvalidDecision`` (a valid slot the mask refuses is slot 0).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlsched.envs.checks import discrete_action, non_negative
from rlsched.envs.episodes import EpisodeOptions, EpisodeSampler
from rlsched.envs.reward import PairedCredit
from rlsched.errors import ConfigError
from rlsched.learned.observation import GLOBAL_DIM
from rlsched.learned.pick import CandidateView, F, K, PickPolicy
from rlsched.policies.projected import ProjectedPolicy
from rlsched.policies.static import load_static
from rlsched.sim.simulator import Decision, Simulator

OBS_SIZE = GLOBAL_DIM + K * F
_RETRIES = 20


class DiTPickEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring. ``scenario``: one name or file, or several (as ``DiTBatch-v0`` takes it);
    ``static`` maps each to its tuned action file (the heuristic), by default ``agents/tuned/NAME.json``
    as ``agents/pick.yaml`` has it (shipped for the shipped request-mode scenarios)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, scenario: str | Sequence[str] = "default", static: dict[str, str] | None = None,
                 rate_scale: tuple[float, float] = (0.5, 1.5), window_s: tuple[float, float] = (1200.0, 2400.0),
                 burn_in_s: float = 300.0, workload_seed: int | None = None,
                 scenarios: Sequence[str] | None = None) -> None:
        if scenarios is not None:  # this env's first spelling; DiTBatch-v0's is ``scenario``
            warnings.warn("DiTPick-v0: scenarios= is deprecated, pass scenario= (one name or a list)",
                          DeprecationWarning, stacklevel=2)
            scenario = scenarios
        self.options = EpisodeOptions.build(scenario, "request", rate_scale, window_s, workload_seed)
        scenarios = list(self.options.scenarios)
        if static is None:
            static = {s: f"agents/tuned/{s}.json" for s in scenarios}
        missing = [s for s in scenarios if s not in static]
        if missing:
            raise ConfigError("pick.static", f"no tuned action file for {missing}")
        self.scenarios, self.static = list(scenarios), dict(static)
        self.burn_in_s = non_negative("pick.burn_in_s", burn_in_s)
        self.action_space = spaces.Discrete(K)
        self.observation_space = spaces.Box(-5.0, 5.0, (OBS_SIZE,), dtype=np.float32)
        self._sampler = EpisodeSampler()
        self._bases: dict[str, ProjectedPolicy] = {}
        for name in scenarios:  # a typo, a multi-replica pool or a missing tuned file fails here, not at reset
            self._sampler.load(name)
            self._base(name)
        self.view: CandidateView | None = None

    # ---------------------------------------------------------------- API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        opts = self.options.merged(options)
        unknown = [name for name in opts.scenarios if name not in self.static]
        if unknown:
            raise ConfigError("pick.static", f"no tuned action file for {unknown} (reset options)")
        for _ in range(_RETRIES):  # a window whose queue never offers a choice has nothing to learn
            obs, info = self._start(self._sampler.sample(opts, self.np_random))
            if info["alive"]:
                break
        return obs, info

    def _start(self, ep: Any) -> tuple[np.ndarray, dict[str, Any]]:
        name = ep.scenario.name
        start = ep.start_s + self.burn_in_s
        sim = self.sim = Simulator(ep.requests, ep.cost, ep.scenario.serving)
        self.policy = PickPolicy(lambda g, c: np.zeros(K), self._base(ep.key))
        self.policy.reset(sim)
        while sim.advance_to_next_decision() and sim.now < start:  # burn-in: the heuristic alone
            sim.apply(self.policy.base.decide(sim))
        # both copies are identical up to here; credits count from the first decision after it
        t0 = sim.now if sim.needs_decision else float("inf")
        shadow = Simulator(ep.requests, ep.cost, ep.scenario.serving).run(self._base(ep.key))
        self.credit = PairedCredit(shadow.records.values(), t0)
        sim.on_finish.append(self.credit.on_finish)
        self.decisions = self.deviations = 0
        self._decision: Decision | None = None
        alive = self._advance(first=True)
        info = {"scenario": name, "rate_scale": ep.rate_scale, "workload_seed": ep.workload_seed, "alive": alive}
        return self._obs(), info

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._decision is None or self.view is None:
            raise gym.error.ResetNeeded("call reset() before step(), and again after the episode ended")
        j = discrete_action(action, K, "rlsched/DiTPick-v0")
        if not self.view.mask[j]:
            j = 0  # a masked slot (only without masking) is the heuristic's proposal
        self.decisions += 1
        self.deviations += j != 0
        self.sim.apply(self.policy.choose(self._decision, self.view, j))
        alive = self._advance()
        reward = self.credit.take(self.sim.now if alive else float("inf"))
        info = {"agent_credit": self.credit.agent_credit, "shadow_credit": self.credit.shadow_credit,
                "deviations": self.deviations, "decisions": self.decisions}
        return self._obs(), reward, not alive, False, info

    def action_masks(self) -> np.ndarray:
        """Valid candidates (sb3-contrib's ``MaskablePPO`` reads this)."""
        if self.view is None:
            mask = np.zeros(K, dtype=bool)
            mask[0] = True
            return mask
        return self.view.mask.copy()

    # ------------------------------------------------------------ internals
    def _base(self, scenario: str) -> ProjectedPolicy:
        if scenario not in self._bases:
            self._bases[scenario] = load_static(self.static[scenario])
        base = self._bases[scenario]
        return ProjectedPolicy(base.params, base.config)

    def _advance(self, first: bool = False) -> bool:
        """Run to the next decision point with a choice; False when the workload is drained."""
        sim = self.sim
        # after the burn-in the simulator may already stand at a decision point
        while (first and sim.needs_decision) or sim.advance_to_next_decision():
            first = False
            decision, view = self.policy.propose(sim)
            if view is not None:
                self._decision, self.view = decision, view
                return True
            sim.apply(decision)
        self._decision, self.view = None, None
        return False

    def _obs(self) -> np.ndarray:
        out = np.zeros(OBS_SIZE, dtype=np.float32)
        if self.view is not None:
            out[:GLOBAL_DIM] = self.policy.global_features(self.sim)
            out[GLOBAL_DIM:] = self.view.features.ravel()
        return out


__all__ = ["OBS_SIZE", "DiTPickEnv"]
