"""Per-class quotas: the most of the GPU's time a class may take while requests of other classes wait.

A scenario's class (``classes.NAME.quota``) or the plugin's (``extras.rlsched.classes.NAME.quota``) may
carry a ``quota``, a fraction in (0, 1] (1: no cap): a work-conserving cap, as a paid SaaS caps a bulk tenant. When the
class's share of the GPU-seconds started over the last ``quota_window_s`` seconds has reached its quota
and a request of some class that is not held waits, the class's requests are held out of the decision:
the policy decides over the others. When nothing else waits the class runs: the GPU never idles because
of a quota (and when every class that waits is over its quota, none is held).

A batch's seconds are its standalone cost estimate (what the cost model predicts for it when it starts:
a wave, or in step mode one step), split among its requests by their standalone step times. The
quotas of a scenario need not sum to 1; a class without one is never held.

Defined once, engine-neutral: the simulator (``Simulator.policy_view``) and the vLLM-Omni plugin's
scheduler build the same ``QuotaView`` over their own state, feed the same ``Quotas`` the batches they
start, and hand the view to the policy and to the plugin's fallbacks alike (a serving rule, not a
policy's choice). A policy reads the view as any ``QueueView``; its queue index follows the view's own
journal, where a class being held reads as its requests leaving the queue, and being released as their
coming back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence, ValuesView
from typing import TYPE_CHECKING, Any, TypeVar, overload

from rlsched.sim.classes import DEFAULT_QUOTA_WINDOW_S, QUOTA, QUOTA_WINDOW_S
from rlsched.sim.request import RequestRecord
from rlsched.sim.view import DEQUEUED, ENQUEUED, Journal, JournalFollower

if TYPE_CHECKING:
    from rlsched.sim.serving import ServingConfig
    from rlsched.sim.view import QueueView


class Quotas:
    """Each quota-bearing class's GPU-seconds started over a sliding window, and which are held now.

    ``started`` is told every batch that starts; ``held`` says which classes sit out the next decision.
    ``total_s`` keeps every class's GPU-seconds over the whole run (the share a report shows)."""

    def __init__(self, quotas: Mapping[str, float], window_s: float = DEFAULT_QUOTA_WINDOW_S) -> None:
        self.quotas = {c: float(QUOTA.check(q, f"classes.{c}.quota")) for c, q in quotas.items()}
        self.window_s = float(QUOTA_WINDOW_S.check(window_s, "quota_window_s"))
        self._starts: deque[tuple[float, str, float]] = deque()
        """(start time, class, seconds) of every share started within the window, oldest first."""
        self._in_window: dict[str, float] = {}
        self._window_total = 0.0
        self.total_s: dict[str, float] = {}
        """GPU-seconds started per class over the whole run (every class, quota or not)."""

    @classmethod
    def of(cls, config: ServingConfig) -> Quotas | None:
        """The quotas a serving config declares; None when it declares none (nothing is ever held)."""
        return cls(dict(config.quotas), config.quota_window_s) if config.quotas else None

    def started(self, batch: Sequence[RequestRecord], seconds: float, now: float) -> None:
        """A batch of ``seconds`` (its standalone cost estimate) started at ``now``."""
        if not batch or not seconds > 0:
            return
        weights = [r.step_s for r in batch]
        whole = sum(weights)
        for rec, w in zip(batch, weights):
            share = seconds * (w / whole if whole > 0 else 1 / len(batch))
            c = rec.request.priority
            self.total_s[c] = self.total_s.get(c, 0.0) + share
            self._starts.append((now, c, share))
            self._in_window[c] = self._in_window.get(c, 0.0) + share
            self._window_total += share

    def _expire(self, now: float) -> None:
        starts, cutoff = self._starts, now - self.window_s
        while starts and starts[0][0] <= cutoff:
            _, c, s = starts.popleft()
            self._in_window[c] -= s
            self._window_total -= s
        if not starts:  # exact zeros again, whatever the float sums drifted to
            self._in_window.clear()
            self._window_total = 0.0

    def shares(self, now: float) -> dict[str, float]:
        """Each class's share of the GPU-seconds started over the window ending at ``now``."""
        self._expire(now)
        total = self._window_total
        return {c: s / total for c, s in self._in_window.items()} if total > 0 else {}

    def held(self, now: float, present: Iterable[str]) -> frozenset[str]:
        """The classes to hold out of a decision at ``now``: of the classes ``present`` (with a request
        waiting, or in step mode running), those at or over their quota, provided one present class is
        not; else none."""
        shares = self.shares(now)
        present = set(present)
        over = frozenset(c for c, q in self.quotas.items() if q < 1 and c in present and shares.get(c, 0.0) >= q)
        return over if over and present - over else frozenset()


class QuotaView(JournalFollower):
    """``state`` (a ``QueueView``) as a policy sees it under ``quotas``: the requests of held classes left
    out of ``waiting`` (and, in step mode, of ``running``, so a decision preempts them). Everything else
    reads through to ``state``. One per state, kept for its life: its ``journal`` follows the state's, so a
    policy's queue index stays incremental. ``refresh`` before each decision."""

    def __init__(self, state: QueueView, quotas: Quotas) -> None:
        super().__init__()
        self.state, self.quotas = state, quotas
        self.journal = Journal(state.journal.keep)
        """The changes of this view's ``waiting``: the state's, less the held classes', plus a held
        class's requests leaving (and coming back) when it is held (released)."""
        self.held: frozenset[str] = frozenset()
        """The classes held out of the current decision."""
        self._by_class: dict[str, dict[int, RequestRecord]] = {}
        """The state's waiting records per class (held or not)."""
        self._visible = _Visible(self)

    def refresh(self) -> QuotaView:
        """Bring the view up to its state and decide which classes are held now; returns self."""
        state = self.state
        self.sync(state)
        present = {c for c, recs in self._by_class.items() if recs}
        if state.step_mode:
            present.update(r.request.priority for r in state.running)
        held = self.quotas.held(state.now, present)
        if held != self.held:
            for c in held - self.held:
                for rec in self._by_class.get(c, {}).values():
                    self.journal.append(DEQUEUED, rec)
            for c in self.held - held:
                for rec in self._by_class.get(c, {}).values():
                    self.journal.append(ENQUEUED, rec)
            self.held = held
        return self

    # ------------------------------------------------------------ the state's journal
    def _rebuild(self, state: QueueView) -> None:
        self._by_class = {}
        for rec in state.waiting.values():
            self._by_class.setdefault(rec.request.priority, {})[rec.request.id] = rec
        self.journal.restart()  # every reader rebuilds from this view's waiting

    def _add(self, rec: RequestRecord) -> None:
        c = rec.request.priority
        self._by_class.setdefault(c, {})[rec.request.id] = rec
        if c not in self.held:
            self.journal.append(ENQUEUED, rec)

    def _remove(self, rec: RequestRecord) -> None:
        c = rec.request.priority
        if self._by_class.get(c, {}).pop(rec.request.id, None) is not None and c not in self.held:
            self.journal.append(DEQUEUED, rec)

    # ------------------------------------------------------------------- the view
    @property
    def waiting(self) -> Mapping[int, RequestRecord]:
        return self._visible if self.held else self.state.waiting

    @property
    def running(self) -> Sequence[RequestRecord]:
        running = self.state.running
        if not (self.held and self.state.step_mode):
            return running
        return [r for r in running if r.request.priority not in self.held]

    @property
    def now(self) -> float:
        return self.state.now

    def __getattr__(self, name: str) -> Any:
        # config, cost, step_mode, the hooks, telemetry, and what a state holds beyond the protocol
        if name == "state":  # not yet set: never recurse
            raise AttributeError(name)
        return getattr(self.state, name)


T = TypeVar("T")


class _Visible(Mapping[int, RequestRecord]):
    """The state's ``waiting`` less the held classes', in the state's order."""

    __slots__ = ("_view",)

    def __init__(self, view: QuotaView) -> None:
        self._view = view

    def __getitem__(self, rid: int) -> RequestRecord:
        rec = self._view.state.waiting[rid]
        if rec.request.priority in self._view.held:
            raise KeyError(rid)
        return rec

    @overload
    def get(self, rid: int, /) -> RequestRecord | None: ...

    @overload
    def get(self, rid: int, default: T, /) -> RequestRecord | T: ...

    def get(self, rid: int, default: Any = None) -> Any:
        rec = self._view.state.waiting.get(rid)
        return default if rec is None or rec.request.priority in self._view.held else rec

    def __contains__(self, rid: object) -> bool:
        return isinstance(rid, int) and self.get(rid) is not None

    def __len__(self) -> int:
        view = self._view
        return len(view.state.waiting) - sum(len(view._by_class.get(c, ())) for c in view.held)

    def __iter__(self) -> Iterator[int]:
        held = self._view.held
        return (rec.request.id for rec in self._view.state.waiting.values() if rec.request.priority not in held)

    def values(self) -> _Values:
        return _Values(self)


class _Values(ValuesView[RequestRecord]):
    """``_Visible.values()``: a dict's view of the visible records."""

    __slots__ = ("_of",)

    def __init__(self, of: _Visible) -> None:
        super().__init__(of)
        self._of = of

    def __iter__(self) -> Iterator[RequestRecord]:
        held = self._of._view.held
        return (rec for rec in self._of._view.state.waiting.values() if rec.request.priority not in held)

    def __len__(self) -> int:
        return len(self._of)


__all__ = ["DEFAULT_QUOTA_WINDOW_S", "QUOTA", "QUOTA_WINDOW_S", "QuotaView", "Quotas"]
