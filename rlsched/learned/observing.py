"""What a learned policy needs around its network, the same in training and serving."""

from __future__ import annotations

from rlsched.learned.observation import ObservationEncoder
from rlsched.policies.projected import ProjectedPolicy
from rlsched.sim.request import CLASS_INDEX, RequestRecord
from rlsched.sim.telemetry import Telemetry, TelemetrySample
from rlsched.sim.view import QueueView


def trivial_candidate(state: QueueView, max_wait_s: float) -> RequestRecord | None:
    """The single candidate when every action would start it alone now, else None.

    One candidate (waiting, or running in step mode) and no chance to wait for a
    fuller batch: step mode, ``max_num_seqs == 1``, or it waited past the longest
    admission wait.
    """
    step_mode = state.config.step_mode
    if len(state.waiting) + (len(state.running) if step_mode else 0) != 1:
        return None
    rec = next(iter(state.waiting.values())) if state.waiting else state.running[0]
    if step_mode or state.config.max_num_seqs == 1 or state.now >= rec.request.arrival_s + max_wait_s:
        return rec
    return None


class ObservingPolicy:
    """An ``ObservationEncoder`` over ``projected``'s candidates whose history follows the
    state's arrival/finish hooks, and GPU telemetry sampled at every decision
    (``sample_telemetry``), as the plugin folds it at every schedule()."""

    def __init__(self, projected: ProjectedPolicy, telemetry: Telemetry | None = None) -> None:
        self.encoder = ObservationEncoder(projected)
        self.telemetry = telemetry
        """A ``Telemetry`` source; None: the state's own (``QueueView.open_telemetry``)."""
        self._telemetry = telemetry

    def _observe_from(self, state: QueueView) -> None:
        """Start the history at ``state.now`` and follow the state's hooks (call from ``reset``)."""
        self.encoder.reset(state.now)
        self._telemetry = self.telemetry or state.open_telemetry()
        for hooks, hook in ((state.on_arrival, self.note_arrival), (state.on_finish, self.note_finish)):
            if hook not in hooks:  # a second reset on the same state (the plugin's recovery) adds none
                hooks.append(hook)

    def note_arrival(self, rec: RequestRecord) -> None:
        self.encoder.note_arrival(rec, CLASS_INDEX[rec.request.tier])

    def note_finish(self, rec: RequestRecord) -> None:
        self.encoder.note_finish(CLASS_INDEX[rec.request.tier], rec.slo_met)

    def sample_telemetry(self) -> TelemetrySample | None:
        return self._telemetry.read() if self._telemetry is not None else None


__all__ = ["ObservingPolicy", "trivial_candidate"]
