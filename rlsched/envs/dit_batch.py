"""``rlsched/DiTBatch-v0``: choose the diffusion stage's next batch, one decision point per step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlsched.envs.checks import box_action, non_negative
from rlsched.envs.episodes import Episode, EpisodeOptions, EpisodeSampler
from rlsched.envs.reward import SloReward
from rlsched.learned.observation import OBS_DIM, OBS_HIGH, OBS_LOW, SCHEMA_VERSION, ObservationEncoder
from rlsched.learned.observing import trivial_candidate
from rlsched.policies.projected import ACTION_DIM, ActionParams, ProjectedPolicy, ProjectionConfig
from rlsched.sim.request import CLASS_INDEX, RequestRecord
from rlsched.sim.simulator import Decision, Simulator
from rlsched.sim.telemetry import SimTelemetry


class DiTBatchEnv(gym.Env[np.ndarray, np.ndarray]):
    """
    ## Description

    One GPU serving a diffusion (DiT) stage as vLLM-Omni does: requests of three
    priority classes (realtime, batch, background) arrive with latency SLOs; only
    requests with the same compatibility key (model, shape, frames, steps, CFG) can
    share a batch. At every decision point — the GPU is idle and work is queued — the
    agent sets the knobs of a projected scheduling policy; the policy turns them into
    per-request utilities, and a knapsack projection picks a batch that fits memory
    and the batch caps (or waits to coalesce). The simulator (``rlsched.sim``) then
    runs to the next decision point. In ``request`` mode a batch runs all its denoise
    steps; in ``step`` mode one step, and running requests can be preempted.

    Decision points where the action cannot matter are resolved without asking the
    agent (``auto_resolve``): exactly one candidate and no chance to wait for a
    fuller batch (step mode, ``max_num_seqs == 1``, or the candidate has waited past
    the longest admission wait). Every policy would start that request alone.

    ## Action Space

    ``Box(-1, 1, (9,), float32)``, decoded by ``rlsched.policies.projected.decode_action``
    and applied by ``ProjectedPolicy`` — the same mapping the frozen policy uses when serving:

    | Index | Meaning                                         | Decoded to                                       |
    |-------|-------------------------------------------------|--------------------------------------------------|
    | 0-2   | priority logit per class (realtime, batch, bg)  | class weight = softmax(2·a)                      |
    | 3-6   | batch-cap fraction per modality                 | cap = max(1, round(f·max_batch_size_per_modality)) |
    |       | (image, video, audio, text)                     | with f = (a+1)/2                                 |
    | 7     | admission-wait fraction                         | wait ≤ f·batch_timeout_ms for a fuller batch     |
    | 8     | urgency exponent                                | α = 2·(a+1) ∈ [0, 4]                             |

    Utility of starting request i now: ``w_class · pressure^α / remaining_s`` with
    ``pressure = remaining_s / (deadline − now)``; requests past saving keep
    ``late_value`` of it. NaNs count as 0 and values are clipped to [-1, 1].

    ## Observation Space

    ``Box(-5, 5, (149,), float32)`` (``OBS_DIM``), computed by
    ``rlsched.learned.observation.ObservationEncoder`` (numpy only; schema
    ``dit-batch-obs/2``). The queue is the waiting requests, plus the running batch in
    step mode; its counts, work, keys and memory come from the policy's per-group summary
    (``ProjectedPolicy.queue_summary``). "Candidates" are the requests the projection
    considers (``ProjectedPolicy.candidates``: per group its most urgent savable requests
    and its most overdue lost ones, plus the running batch in step mode); the slack, wait
    and top-K entries describe them. Slack = deadline − now − standalone remaining time;
    "rel." means divided by the request's standalone time. Every entry is clipped to [-5, 5].

    | Num     | Observation                                        | Scaling                         | Range   |
    |---------|----------------------------------------------------|---------------------------------|---------|
    | 0-11    | queued requests per class × modality (rt-image, …) | log1p(count)                    | [0, 5]  |
    | 12-14   | queued work per class (GPU-seconds)                | log1p(s / 30)                   | [0, 5]  |
    | 15-17   | candidates' min slack per class (rel.; none: 5)    | asinh                           | [-5, 5] |
    | 18-20   | candidates' oldest wait per class                  | log1p(s / 30)                   | [0, 5]  |
    | 21-23   | arrival load per class (EWMA, τ = 300 s)           | GPU-s of work per s             | [0, 5]  |
    | 24-26   | SLO attainment per class (EWMA over finishes)      | share, starts at 1              | [0, 1]  |
    | 27      | step mode                                          | 0/1                             | {0, 1}  |
    | 28      | max_num_seqs                                       | log1p                           | [0, 5]  |
    | 29      | distinct compatibility keys in the queue           | log1p                           | [0, 5]  |
    | 30      | running requests (step mode)                       | log1p                           | [0, 5]  |
    | 31      | queued requests                                    | log1p                           | [0, 5]  |
    | 32      | queued requests' memory / free GPU memory          | log1p                           | [0, 5]  |
    | 33-36   | GPU memory used, compute util, membw util, known   | ``Telemetry``; 0s when unknown  | [0, 1]  |
    | 37-148  | top-8 candidates by urgency, 14 each (below)       |                                 |         |

    Each top-K slot (most urgent first: savable ones by ascending slack, then late
    ones, then those without SLO; empty slots are all 0):

    | Offset | Feature                                       | Scaling          |
    |--------|-----------------------------------------------|------------------|
    | 0-2    | class one-hot                                 | 0/1              |
    | 3-6    | modality one-hot                              | 0/1              |
    | 7      | standalone remaining time                     | log1p(s / 30)    |
    | 8      | slack (rel.)                                  | asinh            |
    | 9      | wait                                          | log1p(s / 30)    |
    | 10     | same compatibility key as slot 0              | 0/1              |
    | 11     | running (step mode)                           | 0/1              |
    | 12     | queued requests sharing its key               | log1p(count)     |
    | 13     | valid slot                                    | 0/1              |

    ## Rewards

    Aligned with what evaluation reports first, the class-weighted SLO attainment
    (weights ``rlsched.sim.metrics.CLASS_WEIGHTS``: realtime 3, batch 2, background 1):

    * ``+v_c`` when a request of class c completes within its SLO, with
      ``v_c = w_c / (N_c · Σ w)`` (``N_c``: class-c requests in the episode's workload,
      Σ over the classes present). The credits of a whole episode sum to exactly the
      weighted attainment of ``rlsched.sim.metrics``, so returns compare across
      scenarios, loads and episode lengths;
    * ``−λ·v_c`` (``late_penalty`` λ, default 0.5) once per request, at the first
      decision point where a queued request's slack is negative — it can no longer
      meet its SLO even if started alone now. This gives credit assignment at the
      decision that let it slip instead of minutes later at its completion.

    An episode's return lies in [−λ, 1]; failed (OOM) and unfinished requests earn nothing.

    ## Starting State

    A drawn scenario, mode, rate scale and arrival window (see Arguments); the
    workload seed is drawn from ``self.np_random`` in [0, 900) (validation: 900-999, evaluation
    ≥ 1000). The GPU and queue start empty at the window's start; the first step
    is the first decision point.

    ## Episode End

    1. Termination: every request of the window has completed or failed.
    2. Truncation: ``max_episode_steps`` (2048 for v0) decisions, by the ``TimeLimit`` wrapper.

    ## Arguments

    Constructor keywords (``gymnasium.make("rlsched/DiTBatch-v0", **kwargs)``); the
    first five can be overridden per episode with ``reset(options={...})``:

    | Parameter       | Type                   | Default      | Description                                         |
    |-----------------|------------------------|--------------|-----------------------------------------------------|
    | `scenario`      | str or list of str     | `"default"`  | scenario(s) under ``envs/``; one drawn per episode  |
    | `mode`          | str, list or None      | `None`       | `request` / `step`, drawn; None: the scenario's     |
    | `rate_scale`    | float or (low, high)   | `(0.5, 1.5)` | arrival-rate multiplier, uniform per episode        |
    | `window_s`      | float, range or None   | `None`       | arrival window at a uniform start; None: all of it  |
    | `workload_seed` | int or None            | `None`       | fixed workload seed (evaluation); None: in [0, 900)  |
    | `late_penalty`  | float                  | `0.5`        | λ above                                             |
    | `auto_resolve`  | bool                   | `True`       | resolve decision points the action cannot change    |
    | `projection`    | ProjectionConfig, None | `None`       | projection knobs (``ProjectionConfig`` defaults)    |

    ```python
    >>> import gymnasium as gym, rlsched.envs
    >>> env = gym.make("rlsched/DiTBatch-v0", scenario=["default", "omni-mix"], mode=["request", "step"])
    >>> obs, info = env.reset(seed=0, options={"rate_scale": 1.0})
    ```

    The info dict of every step holds ``batch_size`` (requests the action started;
    0: wait), ``class_weights`` (decoded), ``slo_attainment`` (per class with finished
    requests: the share of them within SLO), ``weighted_slo_attainment`` (so far;
    unfinished requests count as missed), ``auto_resolved`` (trivial points passed in
    the step) and ``time_s`` (simulated); ``reset`` adds ``scenario``, ``mode``,
    ``rate_scale``, ``workload_seed`` and ``window_s`` (start, end); ``step`` adds
    ``queue_wait_s`` (queueing delays of the requests the action started for the first time).

    ## Version History

    * v0: Initial version (observation schema ``dit-batch-obs/1``).
    * v0, observation schema ``dit-batch-obs/2`` (same 149 entries, same order): the
      queue entries (counts, work, distinct keys, requests, memory, and each top-K slot's
      requests sharing its key) describe the whole queue from the policy's per-group
      summary, in O(groups); the slack, wait and top-K entries come from the projection's
      candidates instead of a scan of every waiting request. A checkpoint recording
      ``dit-batch-obs/1`` is refused at load.
    """

    metadata: dict[str, Any] = {"render_modes": []}
    sim: Simulator
    episode: Episode
    reward: SloReward
    telemetry: SimTelemetry

    def __init__(self, scenario: str | Sequence[str] = "default", mode: str | Sequence[str | None] | None = None,
                 rate_scale: float | Sequence[float] = (0.5, 1.5), window_s: float | Sequence[float] | None = None,
                 workload_seed: int | None = None, late_penalty: float = 0.5, auto_resolve: bool = True,
                 projection: ProjectionConfig | None = None, render_mode: str | None = None) -> None:
        self.options = EpisodeOptions.build(scenario, mode, rate_scale, window_s, workload_seed)
        self.late_penalty, self.auto_resolve = non_negative("env.late_penalty", late_penalty), auto_resolve
        self.render_mode = render_mode
        self.action_space = spaces.Box(-1.0, 1.0, (ACTION_DIM,), dtype=np.float32)
        self.observation_space = spaces.Box(OBS_LOW, OBS_HIGH, (OBS_DIM,), dtype=np.float32)
        self.policy = ProjectedPolicy(config=projection)
        self.encoder = ObservationEncoder(self.policy)
        self.schema_version = SCHEMA_VERSION
        self._sampler = EpisodeSampler()
        for name in self.options.scenarios:  # a typo or a multi-replica pool fails here, not at the first reset
            self._sampler.load(name)
        self._started = False

    # ------------------------------------------------------------------ API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        episode = self._sampler.sample(self.options.merged(options), self.np_random)
        self._start(episode)
        self._advance(resolve=False)
        info = {"scenario": episode.scenario.name, "mode": episode.scenario.serving.mode,
                "rate_scale": episode.rate_scale, "workload_seed": episode.workload_seed,
                "window_s": (episode.start_s, episode.end_s), **self._info(0)}
        return self._observe(), info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._started:
            raise gym.error.ResetNeeded("call reset() before step()")
        self.policy.set_action(box_action(action, ACTION_DIM, "rlsched/DiTBatch-v0"))
        decision = self.policy.decide(self.sim)
        waits = self._queue_waits(decision)
        self._apply(decision)
        alive = self._advance(resolve=self.auto_resolve)
        obs = self._observe()
        info = self._info(len(decision.batch))
        info["queue_wait_s"] = waits
        return obs, self.reward.take(), not alive, False, info

    # -------------------------------------------------------------- episode
    def _start(self, episode: Episode) -> None:
        sim = self.sim = Simulator(episode.requests, episode.cost, episode.scenario.serving)
        self.episode, self._started = episode, True
        self.reward = SloReward(episode.requests, self.late_penalty)
        self.telemetry = SimTelemetry(sim)
        self.encoder.reset(episode.start_s)
        self.policy.params = ActionParams()  # the info dict of reset shows the defaults, not the last action
        self.policy.reset(sim)
        self._arrival_order = [r.id for r in sorted(episode.requests, key=lambda r: r.arrival_s)]
        self._noted = 0
        self._auto = 0
        self._max_wait_s = self.policy.config.batch_timeout_ms / 1e3
        sim.on_finish.append(self._on_finish)

    def _on_finish(self, rec: RequestRecord) -> None:
        cls = CLASS_INDEX[rec.request.tier]
        self.reward.on_finish(rec, cls)
        self.encoder.note_finish(cls, rec.slo_met)

    def _apply(self, decision: Decision) -> None:
        self.sim.apply(decision)

    def _advance(self, resolve: bool) -> bool:
        """Run to the next decision point the agent must take; False when the workload is drained."""
        self._auto = 0
        sim = self.sim
        while sim.advance_to_next_decision():
            self._note_arrivals()
            only = self._trivial() if resolve else None
            if only is None:
                return True
            self.reward.check_late_one(only, CLASS_INDEX[only.request.tier], sim.now)
            self._apply(Decision((only.request.id,)))
            self._auto += 1
        self._note_arrivals()
        return False

    def _trivial(self) -> RequestRecord | None:
        """The single candidate when every action would start it alone now, else None."""
        return trivial_candidate(self.sim, self._max_wait_s)

    def _queue_waits(self, decision: Decision) -> list[float]:
        """Queueing delay of the requests this decision starts for the first time."""
        sim = self.sim
        return [sim.now - rec.request.arrival_s for rec in (sim.records[i] for i in decision.batch)
                if rec.first_scheduled_s != rec.first_scheduled_s]  # NaN: never scheduled yet

    def _note_arrivals(self) -> None:
        sim = self.sim
        arrived = sim.total_requests - sim.arrivals_left
        if arrived == self._noted:
            return
        for rid in self._arrival_order[self._noted:arrived]:
            rec = sim.records[rid]
            self.encoder.note_arrival(rec, CLASS_INDEX[rec.request.tier])
        self._noted = arrived

    def _observe(self) -> np.ndarray:
        obs = self.encoder.encode(self.sim, self.telemetry.read())
        if self.encoder.rows is not None:
            self.reward.check_late(self.encoder.rows, self.encoder.slack_s)
        return obs

    def _info(self, batch_size: int) -> dict[str, Any]:
        return {"batch_size": batch_size, "class_weights": self.policy.params.class_weights,
                "slo_attainment": self.reward.attainment(),
                "weighted_slo_attainment": self.reward.weighted_attainment(),
                "auto_resolved": self._auto, "time_s": self.sim.now}
