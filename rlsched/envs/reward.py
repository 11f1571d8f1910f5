"""Dense reward whose episode return is the evaluation's class-weighted SLO attainment.

Meeting the SLO of a request of class c earns ``v_c = w_c / (N_c · Σ_k w_k)``, where
``N_c`` counts class-c requests in the episode's workload and the sum runs over the
classes present. Summed over an episode these credits are exactly
``rlsched.sim.metrics.weighted_attainment`` — the number evaluation reports first —
so the return is comparable across scenarios and loads (it lies in [−λ, 1]). The
penalty ``−λ·v_c``, once per request, lands when a queued request's slack
(deadline − now − standalone remaining time) is first seen below zero among the
decision's candidates — about when it became impossible to meet, rather than at its
(much later) completion — or, for a request never seen late, when it finishes late.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import numpy as np

from rlsched.policies.table import Rows
from rlsched.sim.metrics import CLASS_WEIGHTS
from rlsched.sim.request import CLASS_INDEX, PRIORITY_CLASSES, Request, RequestRecord


class SloReward:
    """Accumulates credits and penalties between two ``take()`` calls."""

    def __init__(self, requests: Sequence[Request], late_penalty: float) -> None:
        counts = np.bincount([CLASS_INDEX[r.tier] for r in requests], minlength=len(PRIORITY_CLASSES))
        weights = np.array([CLASS_WEIGHTS[c] for c in PRIORITY_CLASSES])
        present = float(weights[counts > 0].sum())
        self.value = np.where(counts > 0, weights / np.maximum(counts, 1) / max(present, 1e-12), 0.0)
        """Credit per request met, by class index."""
        self._value = self.value.tolist()
        self.late_penalty = late_penalty
        self._late = np.zeros(max(r.id for r in requests) + 1 if requests else 0, dtype=bool)
        self._pending = 0.0
        self.met = [0] * len(PRIORITY_CLASSES)
        self.finished = [0] * len(PRIORITY_CLASSES)

    def on_finish(self, rec: RequestRecord, cls: int) -> None:
        """A request completed or failed (the simulator's ``on_finish`` hook)."""
        self.finished[cls] += 1
        if rec.slo_met:
            self.met[cls] += 1
            self._pending += self._value[cls]
        elif not self._late[rec.request.id]:  # missed without ever being seen late (not a candidate)
            self._late[rec.request.id] = True
            self._pending -= self.late_penalty * self._value[cls]

    def check_late(self, rows: Rows, slack_s: np.ndarray) -> None:
        """Penalise queued requests whose slack went negative since the last check."""
        ids = rows.request_id
        new = (slack_s < 0) & ~self._late[ids]
        if new.any():
            self._late[ids[new]] = True
            self._pending -= self.late_penalty * float(self.value[rows.cls[new]].sum())

    def check_late_one(self, rec: RequestRecord, cls: int, now: float) -> None:
        if rec.deadline_s - now - rec.remaining_s < 0 and not self._late[rec.request.id]:
            self._late[rec.request.id] = True
            self._pending -= self.late_penalty * self._value[cls]

    def take(self) -> float:
        """Reward accumulated since the last call."""
        out, self._pending = self._pending, 0.0
        return out

    def weighted_attainment(self) -> float:
        """Class-weighted SLO attainment so far (unfinished requests count as missed)."""
        return float(sum(v * m for v, m in zip(self._value, self.met, strict=True)))

    def attainment(self) -> dict[str, float]:
        """Per class with finished requests: the share of them that met their SLO."""
        return {c: m / f for c, m, f in zip(PRIORITY_CLASSES, self.met, self.finished, strict=True) if f}


_TOP = max(CLASS_WEIGHTS.values())


def credit(rec: RequestRecord) -> float:
    """A finished request's SLO credit in the paired environments: its class weight over
    realtime's (1, 2/3, 1/3) when it met its SLO, else 0."""
    return CLASS_WEIGHTS[rec.request.tier] / _TOP if rec.slo_met else 0.0


class PairedCredit:
    """The paired reward of ``DiTPick-v0`` and ``DiTRoute-v0`` (an input-dependent baseline, as in
    Decima / RLTune): the credit the agent's run earns between two steps minus what a shadow run of
    the heuristic earned over the same simulated interval on an identical copy of the workload. The
    shadow is deterministic, so its finish times, run once, are the lockstep copy; credits count
    after ``t0`` (the first decision, where both copies are still identical)."""

    def __init__(self, shadow: Iterable[RequestRecord], t0: float) -> None:
        done = sorted((r.finish_s, credit(r)) for r in shadow if r.finish_s > t0)
        self._shadow_t = [t for t, _ in done]
        self._shadow_c = np.concatenate([[0.0], np.cumsum([c for _, c in done])])
        self._t, self._pending = t0, 0.0
        self.agent_credit = self.shadow_credit = 0.0

    def on_finish(self, rec: RequestRecord) -> None:
        """A request of the agent's run finished (the simulators' ``on_finish`` hook)."""
        self._pending += credit(rec)

    def take(self, now: float) -> float:
        """The reward since the last call, up to simulated time ``now`` (``inf``: the end)."""
        i0, i1 = bisect.bisect_right(self._shadow_t, self._t), bisect.bisect_right(self._shadow_t, now)
        shadow = float(self._shadow_c[i1] - self._shadow_c[i0])
        self._t = now
        agent, self._pending = self._pending, 0.0
        self.agent_credit += agent
        self.shadow_credit += shadow
        return agent - shadow
