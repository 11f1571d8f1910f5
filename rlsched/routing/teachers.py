"""Look-ahead teachers: the ceilings of early and late binding on a multi-replica stage (offline; slow by design).

``LookaheadRouter`` routes an arriving request by trying it on every replica it fits on:
for each, it forks the whole stage (``Stage.fork``: every replica's queue, running batch,
timers and clock), binds the request there, and lets the base router (``rlsched``) and the
stage's replica policy finish the fork over ``horizon_s`` seconds; it binds the request to
the replica whose fork scores best (ties: the base router's own choice, tried first).

* ``POLICY@lookahead[:H]`` — *realizable*: the fork holds only the requests already known
  (queued, running, and the one being routed); a router that simulated its options could
  do this online.
* ``POLICY@hindsight[:H]`` — the fork also receives the real arrivals of the next ``H``
  seconds (routed by the base router): a ceiling no online router reaches.

``H`` is the horizon in seconds (default ``DEFAULT_HORIZON_S``); ``;base=ROUTER`` changes the
base router (default ``rlsched``); ``;top=N`` tries at most N replicas, the base router's choice
and the N-1 best others by realizable gain (0, the default: all). ``POLICY`` is the replica
policy on every replica of the real stage and of every fork.

The score of a fork at its horizon ``T``: class-weighted SLOs met minus class-weighted SLOs
already missed (finished late, failed, rejected, or unfinished with a deadline <= ``T``);
a request still open at ``T`` with a later deadline counts neither way. The realizable
teacher scores the requests it knows; hindsight also the arrivals it was shown. Replicas of
one kind that are empty (nothing queued or running) are equivalent, so only the first is
tried (the base router's choice where it is one of them).

Late binding has its own teacher, a central policy: ``CentralLookahead`` (``POLICY@central-lookahead[:H]``,
``POLICY@central-hindsight[:H]``, option ``;hold=S``) tries, whenever a replica frees, the central
policy's candidate batches for it and holding it idle on forks of the whole stage (``Stage.fork_deciding``).

The base router's state is a function of the replicas' queues (``rlsched``, ``least-work``,
``affinity`` follow the journals; a fork's are rebuilt from its queues), so a fresh one reset
on the fork routes as the real one would; a router with state of its own (``round-robin``'s
index, ``random``'s generator) would restart it on each fork.
"""

from __future__ import annotations

import copy
import math

from rlsched.errors import ConfigError
from rlsched.policies.base import PolicySpec, make_policy
from rlsched.policies.candidates import candidate_batches, fits
from rlsched.policies.projected import ProjectedPolicy
from rlsched.routing.routers import LATE_REPLICA_POLICY
from rlsched.sim.request import COMPLETED, FAILED_OOM, REJECTED, Request
from rlsched.sim.simulator import Simulator
from rlsched.sim.stage import Hold, Router, Stage, simulated
from rlsched.sim.view import Decision, QueueView, SchedulingPolicy, StageView

DEFAULT_HORIZON_S = 300.0
"""How far each fork is run (and, for ``hindsight``, how far ahead it sees arrivals)."""
_ENDED = (COMPLETED, FAILED_OOM, REJECTED)


class LookaheadRouter:
    """Bind each arrival to the replica whose simulated future scores best (module docstring)."""

    name = "lookahead"

    def __init__(self, policy: str, horizon_s: float = DEFAULT_HORIZON_S, future_s: float = 0.0,
                 base: str = "rlsched", top: int = 0, name: str = "lookahead") -> None:
        """``name``: the spec as the user gave it (``hindsight:-5``), which every error names."""
        from rlsched.routing.routers import make_router

        where = f"router {name}"
        if not (math.isfinite(horizon_s) and horizon_s > 0):
            raise ConfigError(where, f"the horizon must be a number of seconds > 0, not {horizon_s!r}")
        if not 0 <= future_s <= horizon_s:
            raise ConfigError(where, f"future_s must lie in [0, horizon {horizon_s:g}], not {future_s!r}")
        if type(top) is not int or top == 1 or top < 0:
            raise ConfigError(where, f"top must be 0 (every replica) or an integer >= 2, not {top!r}")
        self.name = name
        # a teacher decides on forks of the replicas' true state (a ceiling): its base router reads the same
        given, base = base, base if "view=" in base else f"{base};view=replica"
        self.policy, self.horizon_s, self.future_s, self.base_spec = policy, horizon_s, future_s, base
        self.top = top
        """Try at most this many replicas (0: all): the base router's choice and the best others by
        realizable gain (``replica_gain``) — what keeps hindsight affordable on 8 replicas."""
        self._prototype = make_policy(policy)  # fails here on a bad spec, not at the first arrival
        self._make_router = make_router
        try:
            self.base: Router = make_router(base)
        except ConfigError as exc:  # name the option the user gave, not the spec built from it
            raise ConfigError(where, f"base={given!r} is not a router the teacher can start from: {exc}") from None
        self.looked = 0
        """Arrivals at which more than one replica was simulated."""
        self.changed = 0
        """Arrivals bound elsewhere than the base router's choice."""
        self.forks = 0
        """Forks run (one per replica tried)."""

    def reset(self, view: StageView) -> None:
        stage = simulated(view, self.name)
        self.base = self._make_router(self.base_spec)
        self.base.reset(stage)
        self._kind = [(id(s.cost), s.serving) for s in stage.specs]
        self.looked = self.changed = self.forks = 0

    def route(self, request: Request, view: StageView) -> int:
        stage = simulated(view, self.name)
        choice = self.base.route(request, stage)
        tries = self.candidates(request, stage, choice)
        if len(tries) < 2:
            return choice
        self.looked += 1
        if self.top and len(tries) > self.top:  # the realizable gains (cheap) choose whom hindsight tries
            gains = [self.replica_gain(stage, request, r) for r in tries[1:]]
            ranked = sorted(range(len(gains)), key=lambda i: -gains[i])[:self.top - 1]
            tries = [choice, *(tries[1 + i] for i in sorted(ranked))]
        scores = [self.value(stage, request, r) for r in tries]
        best = tries[max(range(len(tries)), key=scores.__getitem__)]  # ties: the first, the base's choice
        self.changed += best != choice
        return best

    def candidates(self, request: Request, stage: Stage, choice: int) -> list[int]:
        """The replicas to try: the base router's choice first, then every other replica the request
        fits on alone (memory), one per kind among the empty ones."""
        out, empty_kinds = [choice], set()
        if is_idle(stage, choice):
            empty_kinds.add(self._kind[choice])
        for r, sim in enumerate(stage.replicas):
            if r == choice or not sim.cost.fits([sim.cost.record(request)]):
                continue
            if is_idle(stage, r):
                if self._kind[r] in empty_kinds:
                    continue
                empty_kinds.add(self._kind[r])
            out.append(r)
        return out

    def value(self, stage: Stage, request: Request, replica: int) -> float:
        """How binding ``request`` to ``replica`` now scores, up to a constant shared by every replica
        tried at this arrival: with hindsight the whole stage's fork (``stage_value``); realizable,
        only that replica's gain (``replica_gain``), which ranks the replicas as whole-stage forks
        would (without arrivals, replicas evolve independently) at 2 one-replica runs instead of R."""
        if self.future_s > 0:
            return self.stage_value(stage, request, replica)
        return self.replica_gain(stage, request, replica)

    def stage_value(self, stage: Stage, request: Request, replica: int) -> float:
        """The score of the whole stage forked with ``request`` bound to ``replica`` (module docstring)."""
        fork = stage.fork(self.future_s, stage.now + self.horizon_s)
        fork.bind(request, replica)
        counted = None if self.future_s > 0 else set(fork.routed)
        fork.run([self._fresh() for _ in fork.replicas], self._make_router(self.base_spec))
        self.forks += 1
        return outcome_value(fork, counted)

    def replica_gain(self, stage: Stage, request: Request, replica: int) -> float:
        """What ``request`` on ``replica`` adds to that replica's score: a fork of the replica with it,
        less one without (no new arrivals)."""
        sim, end = stage.replicas[replica], stage.now + self.horizon_s
        gain = 0.0
        for sign, extra in ((1.0, request), (-1.0, None)):
            if extra is None and not (sim.waiting or sim.running):
                continue  # an empty replica scores 0 without the request
            fork = sim.fork(0.0)
            fork.horizon_s = end
            if extra is not None:
                fork.receive(extra, stage.now)
            fork.run(self._fresh())
            self.forks += 1
            gain += sign * outcome_value(fork, end_s=end)
        return gain

    def _fresh(self) -> SchedulingPolicy:
        """A new replica policy, as ``make_policy(self.policy)`` makes it (without re-reading its files)."""
        return fresh_policy(self._prototype)


DEFAULT_HOLD_S = 5.0
"""How long the late-binding teacher's "hold" option keeps a freed replica idle (``Hold``): the central
queue serves the other replicas meanwhile."""


class CentralLookahead:
    """Late binding's realizable look-ahead teacher: a central policy (``POLICY@central-lookahead``).

    When a replica frees and the base central policy (``POLICY``) proposes a batch for it, it tries
    each of the base's candidate batches that fits (``candidate_batches``: the proposal first) and
    *holding* the replica idle for ``hold_s`` (``Hold``: the others are served meanwhile), each on a fork of
    the whole stage taken at that decision (``Stage.fork_deciding``: every replica's queue and wave,
    the central queue, no arrivals to come), lets the base central policy and FIFO replicas finish
    the fork over ``horizon_s`` seconds, and decides what scores best (``outcome_value``; ties: the
    first, the base's proposal). Offline (every option is a whole-stage run): a lower bound on what a
    central dispatcher choosing among the same options could gain on what it knows (one decision at a
    time, the base heuristic for everything after it)."""

    name = "central-lookahead"

    def __init__(self, policy: str, horizon_s: float = DEFAULT_HORIZON_S, hold_s: float = DEFAULT_HOLD_S,
                 future_s: float = 0.0, name: str = "central-lookahead", replay: bool = False) -> None:
        """``future_s`` > 0: hindsight, each fork also receives the real arrivals of the next ``future_s``
        seconds (``POLICY@central-hindsight``, a ceiling no online dispatcher reaches). ``replay``:
        realizable with a forecast, each fork receives the arrivals of the last ``horizon_s`` seconds
        again, ``horizon_s`` later (``POLICY@central-replay``; ``Stage.fork_deciding``)."""
        where = f"router {name}"
        if not (math.isfinite(horizon_s) and horizon_s > 0):
            raise ConfigError(where, f"the horizon must be a number of seconds > 0, not {horizon_s!r}")
        if not (math.isfinite(hold_s) and hold_s >= 0):
            raise ConfigError(where, f"hold must be a number of seconds >= 0 (0: never hold), not {hold_s!r}")
        self.name, self.horizon_s, self.hold_s, self.future_s = name, horizon_s, hold_s, future_s
        self.replay_s = horizon_s if replay else 0.0
        self._prototype = make_policy(policy)
        self.base = fresh_policy(self._prototype)
        self.stage: Stage | None = None
        self.looked = 0
        """Decisions at which more than one option was simulated."""
        self.changed = 0
        """Decisions other than the base's proposal (a hold included)."""
        self.held = 0
        """Decisions to hold the freed replica."""
        self.forks = 0
        """Forks run (one per option tried)."""

    def bind_stage(self, stage: Stage) -> None:
        """The stage whose central queue this policy serves (``Stage._open_central`` calls it)."""
        self.stage = stage

    def reset(self, state: Simulator) -> None:
        self.base.reset(state)

    def decide(self, state: QueueView) -> Decision:
        decision = self.base.decide(state)
        stage = self.stage
        if stage is None or stage.dispatching is None or not decision.batch:
            return decision
        options = [decision]
        if isinstance(self.base, ProjectedPolicy):
            options += [Decision(b, reject=decision.reject, reason=decision.reason)
                        for b in candidate_batches(self.base, state, decision.batch)[1:] if fits(state, b)]
        if self.hold_s > 0:
            options.append(Hold(wait_until=state.now + self.hold_s, reject=decision.reject, reason=decision.reason))
        if len(options) < 2:
            return decision
        self.looked += 1
        scores = [self.value(stage, option) for option in options]
        best = max(range(len(options)), key=scores.__getitem__)  # ties: the first, the base's proposal
        self.changed += best != 0
        self.held += not options[best].batch
        return options[best]

    def value(self, stage: Stage, decision: Decision) -> float:
        """The score of the stage forked with ``decision`` taken for the replica being served."""
        fork = stage.fork_deciding(decision, stage.now + self.horizon_s, self.future_s, self.replay_s)
        fork.run([make_policy(LATE_REPLICA_POLICY) for _ in fork.replicas], central=self._fresh)
        self.forks += 1
        return outcome_value(fork)

    def _fresh(self) -> SchedulingPolicy:
        return fresh_policy(self._prototype)


def fresh_policy(prototype: SchedulingPolicy) -> SchedulingPolicy:
    """A new policy made as ``prototype`` was (without re-reading its files)."""
    if type(prototype) is ProjectedPolicy:
        fresh = ProjectedPolicy(prototype.params, prototype.config)
        fresh.name = prototype.name
        return fresh
    return copy.deepcopy(prototype)


def is_idle(stage: Stage, r: int) -> bool:
    """Replica ``r`` holds nothing (no queue, no running batch): idle replicas of one kind are
    equivalent, so a teacher tries one of them."""
    sim = stage.replicas[r]
    return not sim.waiting and not sim.running and sim.gpu_end_s == math.inf


def outcome_value(state: Stage | Simulator, ids: set[int] | None = None, end_s: float | None = None) -> float:
    """Class-weighted SLOs met minus those already missed at ``end_s`` (default: the state's
    ``horizon_s``, where a fork stops) among ``state``'s requests (or those in ``ids``); open
    requests with a later deadline count neither way."""
    end, total = state.horizon_s if end_s is None else end_s, 0.0
    for rid, rec in state.records.items():
        if ids is not None and rid not in ids:
            continue
        w = rec.request.weight
        if rec.slo_met:
            total += w
        elif rec.status in _ENDED or rec.deadline_s <= end:
            total -= w
    return total


def _teacher(spec: PolicySpec, policy: str, hindsight: bool) -> LookaheadRouter:
    options = dict(spec.options)
    base, top = options.pop("base", "rlsched"), options.pop("top", "0")
    if options:
        raise ConfigError(f"router {spec}", f"takes only the options base=ROUTER and top=N (got {', '.join(options)})")
    try:
        horizon = float(spec.arg) if spec.arg else DEFAULT_HORIZON_S
    except ValueError:
        raise ConfigError(f"router {spec}", f"the horizon must be a number of seconds, not {spec.arg!r}") from None
    if not top.isdigit():
        raise ConfigError(f"router {spec}", f"top must be an integer >= 2 (0: every replica), not {top!r}")
    return LookaheadRouter(policy, horizon, horizon if hindsight else 0.0, base, int(top), str(spec))


def _central_teacher(spec: PolicySpec, policy: str, hindsight: bool = False, replay: bool = False) -> CentralLookahead:
    options = dict(spec.options)
    hold = options.pop("hold", str(DEFAULT_HOLD_S))
    if options:
        raise ConfigError(f"router {spec}", f"takes only the option hold=SECONDS (got {', '.join(options)})")
    numbers = []
    for what, text in (("the horizon", spec.arg or str(DEFAULT_HORIZON_S)), ("hold", hold)):
        try:
            numbers.append(float(text))
        except ValueError:
            raise ConfigError(f"router {spec}", f"{what} must be a number of seconds, not {text!r}") from None
    return CentralLookahead(policy, numbers[0], numbers[1], numbers[0] if hindsight else 0.0, str(spec), replay)


def central_lookahead(spec: PolicySpec, policy: str) -> CentralLookahead:
    """``POLICY@central-lookahead[:H][;hold=S]``: late binding's realizable teacher (``CentralLookahead``)."""
    return _central_teacher(spec, policy, hindsight=False)


def central_replay(spec: PolicySpec, policy: str) -> CentralLookahead:
    """``POLICY@central-replay[:H][;hold=S]``: the realizable teacher whose forks replay the last ``H`` s of
    arrivals as the next ``H`` s (a forecast from what the dispatcher has seen)."""
    return _central_teacher(spec, policy, replay=True)


def central_hindsight(spec: PolicySpec, policy: str) -> CentralLookahead:
    """``POLICY@central-hindsight[:H][;hold=S]``: the same, each fork also seeing the next ``H`` s of arrivals."""
    return _central_teacher(spec, policy, hindsight=True)


def lookahead(spec: PolicySpec, policy: str) -> LookaheadRouter:
    """``POLICY@lookahead[:H][;base=ROUTER]``: the realizable teacher."""
    return _teacher(spec, policy, hindsight=False)


def hindsight(spec: PolicySpec, policy: str) -> LookaheadRouter:
    """``POLICY@hindsight[:H][;base=ROUTER]``: the teacher that also sees the next ``H`` s of arrivals."""
    return _teacher(spec, policy, hindsight=True)


__all__ = ["DEFAULT_HOLD_S", "DEFAULT_HORIZON_S", "CentralLookahead", "LookaheadRouter", "central_hindsight",
           "central_lookahead", "central_replay",
           "fresh_policy", "hindsight", "is_idle", "lookahead", "outcome_value"]
