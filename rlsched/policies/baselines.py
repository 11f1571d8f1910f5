"""Baseline policies: vLLM-Omni's FIFO, SJF/SRTF, EDF, strict priority, DRR."""

from __future__ import annotations

import math
from collections.abc import Iterable

from rlsched import bounds
from rlsched.errors import ConfigError
from rlsched.policies.base import PolicySpec, no_options, without_arguments
from rlsched.sim.queue_index import QueueIndex, by_arrival, by_key
from rlsched.sim.request import RequestRecord
from rlsched.sim.simulator import WAIT, Decision
from rlsched.sim.view import QueueView


class Fifo:
    """Exactly vLLM-Omni 0.30's diffusion scheduler (``RequestScheduler``/``StepScheduler``).

    Admission: from the head of the queue while the key matches the running batch's
    (or the head's) and ``max_num_seqs`` allows; stop at the first incompatible
    request (head-of-line blocking). No memory check, no preemption.

    Request mode: the engine's admission wait runs before each wave when
    ``request_batch_max_wait_ms`` > 0 and ``max_num_seqs`` > 1: it ends when the queue
    holds ``max_num_seqs`` requests (any keys), when no request arrived for the stable
    window ``min(50 ms, wait/5)``, or at the deadline ``start + wait``.
    Step mode: the running batch keeps going; between steps waiting requests join
    from the head while they share the running key.
    """

    name = "fifo"

    def reset(self, state: QueueView) -> None:
        self._wait: tuple[float, float, int] | None = None  # (deadline, stable_since, last queue length)

    def decide(self, state: QueueView) -> Decision:
        cap = state.config.max_num_seqs
        if state.config.step_mode:
            if state.running:
                return Decision(tuple(r.request.id for r in state.running) + self._join(state, cap))
        else:
            until = self._admission_wait(state)
            if until is not None:
                return Decision((), wait_until=until)
        self._wait = None
        return Decision(_head_run(state.waiting.values(), cap))

    def _admission_wait(self, state: QueueView) -> float | None:
        """Wake-up time while the engine would still hold the wave open, else None."""
        wait_s = state.config.request_batch_max_wait_ms / 1e3
        cap, now, queued = state.config.max_num_seqs, state.now, len(state.waiting)
        if wait_s <= 0 or cap <= 1:
            return None
        deadline, stable_since, last = self._wait or (now + wait_s, now, -1)
        if queued > last:
            stable_since, last = now, queued
        self._wait = (deadline, stable_since, last)
        stable_end = stable_since + min(0.05, wait_s / 5)
        if queued >= cap or now >= stable_end or now >= deadline:
            return None
        return min(deadline, stable_end)

    @staticmethod
    def _join(state: QueueView, cap: int) -> tuple[int, ...]:
        key, room = state.running[0].key, cap - len(state.running)
        out: list[int] = []
        for rec in state.waiting.values():
            if len(out) >= room or rec.key != key:
                break
            out.append(rec.request.id)
        return tuple(out)


def _head_run(queue: Iterable[RequestRecord], cap: int) -> tuple[int, ...]:
    """Consecutive same-key requests from the head (stops at the first mismatch)."""
    out: list[int] = []
    key = None
    for rec in queue:
        if len(out) >= cap or (key is not None and rec.key != key):
            break
        key = rec.key
        out.append(rec.request.id)
    return tuple(out)


class OrderedPolicy:
    """Pick the best request by ``rank``; batch its key's requests in rank order.

    In step mode the policy is preemptive: running requests compete with waiting
    ones at every step boundary (they keep their progress when they yield).
    ``rank`` must not change while a request waits: waiting requests live in a
    ``QueueIndex`` (one sorted list per key), so a decision reads the key heads —
    O(keys + log n), not a sort of the queue.
    """

    name = "ordered"

    def reset(self, state: QueueView) -> None:
        self.index = QueueIndex(by_key, lambda rec: self.rank(rec, state.now))

    def rank(self, rec: RequestRecord, now: float) -> tuple[float, ...]:
        raise NotImplementedError

    def decide(self, state: QueueView) -> Decision:
        self.index.sync(state)
        now, cap = state.now, state.config.max_num_seqs
        running = [(*self.rank(r, now), r.request.id, r) for r in state.running] if state.config.step_mode else []
        heads = [(*g.keys[0], g.recs[0]) for g in self.index.groups.values()] + running
        if not heads:
            return WAIT
        key = min(heads, key=_ORDER)[-1].key
        group = self.index.groups.get(key)
        same = [(*k, r) for k, r in zip(group.keys[:cap], group.recs[:cap])] if group else []
        same += [e for e in running if e[-1].key == key]
        return Decision(tuple(e[-1].request.id for e in sorted(same, key=_ORDER)[:cap]))


def _ORDER(entry: tuple) -> tuple:
    return entry[:-1]


class Sjf(OrderedPolicy):
    """Shortest remaining work first (SRTF with preemption in step mode)."""

    name = "sjf"

    def rank(self, rec: RequestRecord, now: float) -> tuple[float, ...]:
        return (rec.remaining_s, rec.request.arrival_s)


class Edf(OrderedPolicy):
    """Earliest deadline (arrival + SLO) first."""

    name = "edf"

    def rank(self, rec: RequestRecord, now: float) -> tuple[float, ...]:
        return (rec.deadline_s, rec.request.arrival_s)


class StrictPriority(OrderedPolicy):
    """Strict class order, the heaviest class first (realtime > batch > background; a scenario's own
    classes by their ``weight``), FIFO within a class and among classes of one weight."""

    name = "priority"

    def rank(self, rec: RequestRecord, now: float) -> tuple[float, ...]:
        return (-rec.request.weight, rec.request.arrival_s)


class Drr:
    """Deficit round-robin across compatibility keys (the idea of vllm-omni PR #3860).

    Each active key earns ``quantum_s`` of GPU time per round; a key may send a batch
    when its deficit covers the batch's standalone work, up to ``max_num_seqs`` and a
    compute budget of ``budget_s`` per batch. Keys that drain forget their deficit.
    Rounds in which no key can send are added in one step (``_skip_rounds``): a quantum
    far below a batch's work (``drr:1e-6``) took 10^7 rounds a decision and looped for minutes.
    """

    IDLE_ROUNDS = 64
    """Rounds looped one by one before the rest are added in one step (the loop's own float sums
    decide every common case, as before)."""

    name = "drr"

    def __init__(self, quantum_s: float = 10.0, budget_s: float = 60.0) -> None:
        self.quantum_s = bounds.DRR_QUANTUM_S.check(quantum_s, "drr quantum_s")  # 0 would never earn a batch
        self.budget_s = budget_s

    def reset(self, state: QueueView) -> None:
        self._deficit: dict[tuple, float] = {}
        self._order: list[tuple] = []
        self.index = QueueIndex(by_key, by_arrival)

    def decide(self, state: QueueView) -> Decision:
        if state.config.step_mode and state.running:
            return Decision(tuple(r.request.id for r in state.running) + Fifo._join(state, state.config.max_num_seqs))
        self.index.sync(state)
        by_key = self.index.groups
        self._sync_keys(by_key)
        if not by_key:
            return WAIT
        cap = state.config.max_num_seqs
        rounds = 0
        while True:  # terminates: every round adds a positive quantum to every key
            for key in self._order:
                batch = self._try(key, by_key[key].first(cap), cap)
                if batch:
                    self._order.remove(key)
                    self._order.append(key)
                    return Decision(batch)
            rounds += 1
            if rounds == self.IDLE_ROUNDS:
                return Decision(self._skip_rounds(by_key, cap))
            for key in self._order:
                self._deficit[key] += self.quantum_s

    def _skip_rounds(self, by_key: dict, cap: int) -> tuple[int, ...]:
        """The rounds until a key's head request is covered, added in one step: every key earns them,
        and the first key in ``_order`` covered after that many sends, as the loop would have chosen."""
        heads = {k: by_key[k].first(cap)[0].remaining_s for k in self._order}
        need = {k: max(math.ceil((heads[k] - self._deficit[k]) / self.quantum_s), 1) for k in self._order}
        rounds = min(need.values())
        for k in self._order:
            self._deficit[k] += rounds * self.quantum_s
        key = next(k for k in self._order if need[k] == rounds)
        self._deficit[key] = max(self._deficit[key], heads[key])  # a quantum below the deficit's float precision
        batch = self._try(key, by_key[key].first(cap), cap)
        self._order.remove(key)
        self._order.append(key)
        return batch

    def _sync_keys(self, by_key: dict) -> None:
        self._order = [k for k in self._order if k in by_key] + [k for k in by_key if k not in self._deficit]
        self._deficit = {k: self._deficit.get(k, 0.0) for k in self._order}

    def _try(self, key: tuple, recs: list[RequestRecord], cap: int) -> tuple[int, ...]:
        spent = 0.0
        out: list[int] = []
        for rec in recs[:cap]:
            cost = rec.remaining_s
            if spent + cost > self._deficit[key] or (out and spent + cost > self.budget_s):
                break
            spent += cost
            out.append(rec.request.id)
        self._deficit[key] -= spent
        return tuple(out)


def _num(arg: str, default: float, spec: str = "drr") -> float:
    """A positive finite number from ``name:ARG``: a quantum <= 0 would make DRR's rounds loop forever."""
    if not arg:
        return default
    try:
        value = float(arg)
    except ValueError:
        raise ConfigError(f"policy {spec}:{arg}", "the argument must be a number") from None
    if not 0 < value < float("inf"):
        raise ConfigError(f"policy {spec}:{arg}", "the argument must be a finite number > 0")
    if not bounds.DRR_QUANTUM_S.holds(value):
        raise ConfigError(f"policy {spec}:{arg}", f"the argument must be {bounds.DRR_QUANTUM_S.describe()}")
    return value


fifo = without_arguments(Fifo)
sjf = without_arguments(Sjf)
edf = without_arguments(Edf)
strict_priority = without_arguments(StrictPriority)


def drr(spec: PolicySpec) -> Drr:
    """``drr[:QUANTUM_S]``."""
    no_options(spec)
    return Drr(quantum_s=_num(spec.arg, 10.0))

__all__ = ["Drr", "Edf", "Fifo", "OrderedPolicy", "Sjf", "StrictPriority"]
