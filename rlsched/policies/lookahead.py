"""A one-step look-ahead teacher over the candidate batches (offline; slow by design).

``LookaheadPolicy`` tries each candidate of ``rlsched.policies.candidates`` on a fork
of the simulator and lets the base policy finish the fork; it starts the candidate
whose fork meets the most class-weighted SLOs. *Realizable*: the fork holds only the requests already queued or
running (what a scheduler knows). *Hindsight* (``future_s`` > 0): the fork also receives
the arrivals of the next ``future_s`` seconds (30 minutes for ``hindsight:``) — a
ceiling no online policy can reach. Both measure how
much choosing among feasible batches can gain over the base heuristic, the headroom a
learned policy can claim. Request mode only (in step mode every denoise step would be a
look-ahead); a step-mode simulator gets the base policy's decision.
"""

from __future__ import annotations

import numpy as np

from rlsched.policies.base import PolicySpec
from rlsched.policies.candidates import candidate_batches, fits
from rlsched.policies.projected import ProjectedPolicy
from rlsched.policies.static import load_static
from rlsched.sim.simulator import Decision, Simulator


class LookaheadPolicy:
    """Start the candidate batch whose simulated future meets the most class-weighted SLOs."""

    name = "lookahead"

    def __init__(self, base: ProjectedPolicy, future_s: float = 0.0) -> None:
        self.base, self.future_s = base, future_s
        self.looked = 0
        """Decisions at which more than one candidate was simulated."""
        self.changed = 0
        """Decisions at which the teacher started something other than the base's proposal."""

    def reset(self, state: Simulator) -> None:
        self.base.reset(state)

    def decide(self, state: Simulator) -> Decision:
        decision = self.base.decide(state)
        if state.config.step_mode or not decision.batch:
            return decision
        batches = [b for b in candidate_batches(self.base, state, decision.batch) if fits(state, b)]
        if len(batches) < 2:
            return decision
        self.looked += 1
        scores = [self._score(state, b) for b in batches]
        best = batches[int(np.argmax(scores))]  # ties: the first, the base's proposal
        if best != tuple(sorted(decision.batch)):
            self.changed += 1
            return Decision(best)
        return decision

    def _score(self, state: Simulator, batch: tuple[int, ...]) -> float:
        return rollout_value(state, batch, self.base, self.future_s)


def rollout_value(state: Simulator, batch: tuple[int, ...], base: ProjectedPolicy, future_s: float) -> float:
    """Class-weighted SLOs met when ``batch`` starts now and ``base`` runs the rest on a fork
    (present requests; with ``future_s`` > 0 also the arrivals of the next ``future_s`` s)."""
    fork = state.fork(future_s)
    present = set(fork.records)
    fork.apply(Decision(batch))
    fork.run(ProjectedPolicy(base.params, base.config))
    return sum(r.request.weight for r in fork.records.values()
               if r.slo_met and (future_s > 0 or r.request.id in present))


HINDSIGHT_S = 1800.0
"""How far ``hindsight:`` sees into the future."""


def _lookahead(spec: PolicySpec, future_s: float) -> LookaheadPolicy:
    policy = LookaheadPolicy(load_static(spec.arg, spec.options), future_s)
    policy.name = str(spec)
    return policy


def lookahead(spec: PolicySpec) -> LookaheadPolicy:
    """``lookahead:TUNED.json``: the realizable teacher over that ``static`` base."""
    return _lookahead(spec, 0.0)


def hindsight(spec: PolicySpec) -> LookaheadPolicy:
    """``hindsight:TUNED.json``: the teacher that also sees the next ``HINDSIGHT_S`` of arrivals."""
    return _lookahead(spec, HINDSIGHT_S)


__all__ = ["HINDSIGHT_S", "LookaheadPolicy", "hindsight", "lookahead", "rollout_value"]
