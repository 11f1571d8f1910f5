"""``rlsched/DiTRoute-v0``: route each arriving request to a replica; rewarded against rlsched's router.

Each episode draws a multi-replica pool, a load and a window of arrivals on a training
seed. rlsched's router (``RlschedRouter``, the strongest heuristic router: results/router-
ceiling) routes the first ``burn_in_s`` seconds alone, so the agent starts with realistic
queues. From then on, at every arrival that fits on two replicas or more, the agent picks a
replica slot (``rlsched.learned.router``'s features; slot 0 is rlsched's own choice, the
other replicas follow in index order; slots of replicas the request does not fit on, or
that the pool does not have, are masked through ``action_masks()``, as sb3-contrib's
``MaskablePPO`` expects). Every replica runs the pool's tuned ``static``.

Reward (paired, as ``rlsched/DiTPick-v0``'s): the class-weighted SLO credit (realtime 1,
batch 2/3, background 1/3 per request met) the agent's stage earns in the step, minus what
rlsched's router earns over the same simulated interval on an identical copy of the
workload (run once per episode: it is deterministic, so its finish times are the lockstep
copy); at the end the copy's remaining credit is subtracted, so the return is exactly
(agent − rlsched's router) requests met after the burn-in: 0 for an agent that always
picks slot 0.

Observation: ``RG`` global features, then ``MAX_REPLICAS`` × ``RF`` replica features
(proposal first), in [-5, 5].

Arguments and actions are checked as the other two ids check theirs (``rlsched.envs.checks``): the episode
distribution, every scenario or pool and every tuned file at construction, ``reset`` options alike, and an
action outside ``Discrete(MAX_REPLICAS)`` is an ``InvalidDecision`` (a valid slot the mask refuses is slot 0).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlsched.envs.checks import discrete_action, non_negative
from rlsched.envs.episodes import EpisodeOptions
from rlsched.envs.reward import PairedCredit
from rlsched.errors import ConfigError
from rlsched.learned.router import MAX_REPLICAS, RF, RG, RouteFeatures
from rlsched.policies import make_policy
from rlsched.policies.static import load_static
from rlsched.resources import data_dir
from rlsched.routing.routers import RlschedRouter
from rlsched.run.seeds import TRAIN_SEEDS
from rlsched.sim import load_scenario
from rlsched.sim.request import Request, RequestRecord
from rlsched.sim.stage import Stage
from rlsched.sim.yamlio import read_yaml

OBS_SIZE = RG + MAX_REPLICAS * RF


class DiTRouteEnv(gym.Env[np.ndarray, np.int64]):
    """See the module docstring. ``pools``: multi-replica scenarios (names or files); ``static`` maps each
    to the tuned action file of its replica policy, by default ``agents/router.yaml``'s mapping (the
    shipped pools)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, pools: str | Sequence[str] = "qwen-image-8gpu", static: dict[str, str] | None = None,
                 rate_scale: tuple[float, float] = (0.5, 1.5), window_s: tuple[float, float] = (1200.0, 2400.0),
                 burn_in_s: float = 300.0, workload_seed: int | None = None) -> None:
        self.options = EpisodeOptions.build(pools, None, rate_scale, window_s, workload_seed)
        pools = list(self.options.scenarios)
        if static is None:
            static = dict(read_yaml(data_dir("agents") / "router.yaml")["static"])
        missing = [p for p in pools if p not in static]
        if missing:
            raise ConfigError("router.static", f"no replica policy for {missing}")
        self.pools, self.static = list(pools), dict(static)
        self.burn_in_s = non_negative("router.burn_in_s", burn_in_s)
        self.action_space = spaces.Discrete(MAX_REPLICAS)
        self.observation_space = spaces.Box(-5.0, 5.0, (OBS_SIZE,), dtype=np.float32)
        self._loaded: dict[str, Any] = {}
        for pool in pools:  # a typo, a one-GPU scenario or a missing tuned file fails here, not at reset
            self._pool(pool)
            load_static(self.static[pool])
        self._steps: Generator[Request, int, None] | None = None
        self._order: list[int] = []

    # ---------------------------------------------------------------- API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if options and "mode" in options:
            raise ConfigError("reset options", "mode: DiTRoute-v0 runs each pool in its own mode")
        opts = self.options.merged(options)  # pools (scenario), rate_scale, window_s, workload_seed: checked alike
        unknown = [name for name in opts.scenarios if name not in self.static]
        if unknown:
            raise ConfigError("router.static", f"no tuned action file for {unknown} (reset options)")
        rng = self.np_random
        for _ in range(20):  # a window whose arrivals never offer a choice has nothing to learn
            pool = opts.scenarios[int(rng.integers(len(opts.scenarios)))]
            sc, cost, specs = self._pool(pool)
            scale = float(rng.uniform(*opts.rate_scale))
            window = sc.duration_s if opts.window_s is None else min(float(rng.uniform(*opts.window_s)),
                                                                     sc.duration_s)
            start = float(rng.uniform(0.0, sc.duration_s - window))
            wseed = opts.workload_seed if opts.workload_seed is not None else int(rng.integers(TRAIN_SEEDS.stop))
            reqs = [r for r in sc.requests(wseed, scale, duration_s=start + window, cost=cost) if r.arrival_s >= start]
            if reqs and self._start(pool, reqs, specs, wseed, start):
                break
        info = {"pool": pool, "rate_scale": scale, "workload_seed": wseed, "alive": self._steps is not None}
        return self._obs(), info

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._steps is None:
            raise gym.error.ResetNeeded("call reset() before step(), and again after the episode ended")
        j = discrete_action(action, MAX_REPLICAS, "rlsched/DiTRoute-v0")
        if not self._mask[j]:
            j = 0  # a masked slot (only without masking) is rlsched's choice
        self.decisions += 1
        self.deviations += j != 0
        alive = self._advance(self._order[j])
        reward = self.credit.take(self.stage.now if alive else float("inf"))
        info = {"agent_credit": self.credit.agent_credit, "shadow_credit": self.credit.shadow_credit,
                "deviations": self.deviations, "decisions": self.decisions}
        return self._obs(), reward, not alive, False, info

    def action_masks(self) -> np.ndarray:
        """Valid replica slots (sb3-contrib's ``MaskablePPO`` reads this)."""
        return self._mask.copy()

    # ------------------------------------------------------------ internals
    def _pool(self, name: str) -> Any:
        if name not in self._loaded:
            sc = load_scenario(name)
            if not sc.replicas:
                raise ConfigError("router.pools", f"{name!r} is a one-GPU scenario; the router needs replicas")
            cost = sc.cost()
            specs = sc.replica_specs(cost)
            if len(specs) > MAX_REPLICAS:
                raise ConfigError("router.pools", f"{name}: {len(specs)} replicas, the environment holds "
                                                  f"{MAX_REPLICAS}")
            self._loaded[name] = (sc, cost, specs)
        return self._loaded[name]

    def _start(self, pool: str, reqs: list[Request], specs: Any, seed: int, start: float) -> bool:
        spec = f"static:{self.static[pool]}"
        shadow = Stage(reqs, specs, seed=seed).run([make_policy(spec) for _ in specs], RlschedRouter())
        self.stage = Stage(reqs, specs, seed=seed)
        self.features = RouteFeatures()
        self._steps = self.stage.routing([make_policy(spec) for _ in specs])
        self.features.reset(self.stage)
        self.credit = PairedCredit((), 0.0)  # rebuilt at the first choice; finishes before it do not count
        for sim in self.stage.replicas:
            sim.on_finish.append(self._on_finish)
        self.decisions = self.deviations = 0
        self._burn_in_until = start + self.burn_in_s
        self._t = start
        self._request: Request | None = next(self._steps, None)
        alive = self._request is not None and self._advance(None)
        # both copies are identical up to the first choice; credits count from there
        self.credit = PairedCredit(shadow.records.values(), self._t)
        return alive

    def _on_finish(self, rec: RequestRecord) -> None:
        self.credit.on_finish(rec)

    def _advance(self, replica: int | None) -> bool:
        """Send ``replica`` for the pending request (None: none pending), then route by rlsched's
        choice until an arrival past the burn-in offers a choice; False when the run is over."""
        steps = self._steps
        assert steps is not None
        try:
            if replica is not None:
                self._request = steps.send(replica)
            while True:
                request = self._request
                assert request is not None
                proposal, glob, cand = self.features.describe(request, self.stage)
                valid = cand[:, 0] > 0
                if request.arrival_s >= self._burn_in_until and valid.sum() > 1:
                    self._order = [proposal, *(i for i in range(len(cand)) if i != proposal)]
                    self._mask = np.zeros(MAX_REPLICAS, dtype=bool)
                    self._mask[:len(cand)] = valid[self._order]
                    self._glob, self._cand = glob, cand[self._order]
                    if self._t < self._burn_in_until:
                        self._t = self.stage.now
                    return True
                self._request = steps.send(proposal)
        except StopIteration:
            self._steps = None
            self._mask = np.zeros(MAX_REPLICAS, dtype=bool)
            self._mask[0] = True
            return False

    def _obs(self) -> np.ndarray:
        out = np.zeros(OBS_SIZE, dtype=np.float32)
        if self._steps is not None:
            out[:RG] = self._glob
            out[RG:RG + self._cand.size] = self._cand.ravel()
        return np.clip(out, -5.0, 5.0)


__all__ = ["OBS_SIZE", "DiTRouteEnv"]
