"""Each batch's time in the plugin: predicted by the cost model, observed on the plugin clock, and what the
online calibration makes of it (``rlsched.sim.online``).

``BatchClock`` is a collaborator of the plugin's scheduler (``scheduler._PolicyScheduling``): the scheduler
tells it when a batch starts (``start``, the last thing ``schedule()`` does) and when it ran (``observe``, in
``update_from_output``); between them it reads nothing. No vLLM import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlsched.sim.request import RequestRecord
from rlsched.sim.truth import FORM_TERMS

if TYPE_CHECKING:
    from rlsched.integrations.vllm_omni.metrics import PluginMetrics
    from rlsched.integrations.vllm_omni.state import PluginState
    from rlsched.sim.quota import Quotas

_log = logging.getLogger(__name__)


class BatchClock:
    """The cost model's time for a batch, the batch's observed time, and the calibration versions seen.

    ``state()`` is the scheduler's current ``PluginState`` (None before ``initialize``), ``progress()`` vLLM-Omni's
    step-mode progress (None in request mode)."""

    def __init__(self, step_mode: bool, state: Callable[[], PluginState | None], progress: Callable[[], Any],
                 clock: Callable[[], float], metrics: PluginMetrics) -> None:
        self.step_mode, self._state, self._progress = step_mode, state, progress
        self.clock, self.metrics = clock, metrics
        self._start: tuple[Any, float] | None = None
        """The last ``schedule()``'s output and the plugin clock when it returned (``observe``)."""
        self._calibration_seen = 0
        """The calibration version last logged and exported (``calibrated``)."""

    def steps_done(self, request_id: str) -> int:
        """Denoise steps done (step mode: vLLM-Omni's progress; a request-mode wave starts at 0)."""
        progress = self._progress()
        p = progress.get(request_id) if progress is not None else None
        return int(p.current_step) if p is not None else 0

    def records(self, running: tuple[str, ...], steps: list[int]) -> tuple[list[RequestRecord], list[int]]:
        """The records of the requests ``running`` names that this plugin follows, with their steps done."""
        st = self._state()
        recs: list[RequestRecord] = []
        done: list[int] = []
        if st is None:
            return recs, done
        for rid, d in zip(running, steps):
            iid = st.int_id(rid)
            rec = st.records.get(iid) if iid is not None else None
            if rec is not None:
                recs.append(rec)
                done.append(d)
        return recs, done

    def batch(self, ids: tuple[str, ...]) -> tuple[list[RequestRecord], list[int]]:
        """``records`` of the named requests at their steps done now."""
        return self.records(ids, [self.steps_done(rid) for rid in ids])

    def predicted(self, recs: list[RequestRecord], done: list[int]) -> float:
        """The cost model's time for the batch (step mode: its next step), as the simulator and
        ``CostProfileExecutor`` predict it."""
        st = self._state()
        if st is None or not recs:
            return 0.0
        cfg = st.config
        return st.cost.batch_duration(recs, self.step_mode, cfg.engine_overhead_ms, cfg.engine_overhead_ms_per_mpx,
                                      done)

    def start(self, out: Any, counted: bool, quotas: Quotas | None = None) -> None:
        """The batch ``out`` starts (a wave, or in step mode one step; ``counted``: outside warm-up): the
        ``quotas`` are told its requests and the cost model's time for it, as the simulator tells them at
        ``apply``; then the clock is read for ``observe`` (as close to the executor's start as can be)."""
        self._start = None
        if not out.num_scheduled_reqs or not counted:
            return
        st = self._state()
        if quotas is not None and st is not None:
            try:
                recs, done = self.batch(tuple(out.scheduled_request_ids))
                quotas.started(recs, self.predicted(recs, done), st.now)
            except Exception:  # never raise into the engine; a batch uncounted lets the class run a little more
                _log.debug("rlsched: quota accounting failed", exc_info=True)
        try:
            self._start = (out, self.clock())
        except Exception:  # metrics are advisory
            pass

    def cancel(self) -> None:
        """The batch started did not run (out of memory): nothing to time."""
        self._start = None

    def observe(self, sched_output: Any) -> None:
        """The batch ``sched_output`` ran (request mode: a wave; step mode: one step): its seconds on the
        plugin clock since the ``schedule()`` that started it, against the cost model's prediction, and
        the memory headroom telemetry last read. O(batch) once per batch; never raises into the engine."""
        started, self._start = self._start, None
        if started is None or started[0] is not sched_output:
            return
        try:
            observed = self.clock() - started[1]
            recs, done = self.batch(tuple(sched_output.scheduled_request_ids))
            st = self._state()
            self.metrics.record_batch(self.predicted(recs, done), observed)
            if st is not None:
                self.metrics.set_headroom(st.telemetry)
                st.observe_batch(recs, done, observed)
        except Exception:  # metrics and calibration are advisory: the engine runs on
            _log.debug("rlsched: batch timing failed", exc_info=True)

    def recost_some(self) -> None:
        """Between decisions, after each batch: one slice of what a new calibration version left to re-cost
        (``PluginState.recost_some``: ``RECOST_SLICE`` records' time figures; their memory is current already)."""
        st = self._state()
        if st is None:
            return
        try:
            st.recost_some()
        except Exception:  # a record re-costed later is decided on at its old time: never fail the engine
            _log.debug("rlsched: re-costing failed", exc_info=True)

    def calibrated(self, st: PluginState | None) -> None:
        """A new calibration version: logged, exported (the served model's scales); once each. Looked at
        after each batch and each ``schedule()`` (whose telemetry read may bring the device's memory). The
        line names each form term the calibration publishes (``FORM_TERMS``: ``, fixed xF, encode xE, decode xD,
        comm xC``, up to its last one not 1), as ``rlsched profile calibrate --log`` reads it back."""
        cal = st.calibrator if st is not None else None
        if st is None or cal is None or cal.version == self._calibration_seen:
            return
        self._calibration_seen = cal.version
        model = st.settings.model or next(iter(st.shipped.models))
        scales = cal.scales().get(model, (1.0, 1.0, 1.0))
        self.metrics.set_calibration(cal.version, scales)
        _log.info("rlsched: cost profile %s calibrated, version %d: %s time x%.3f, attention x%.3f, memory x%.3f%s",
                  st.shipped.name, cal.version, model, *scales[:3],
                  "".join(f", {term} x{v:.3f}" for term, v in zip(FORM_TERMS, scales[3:])))


__all__ = ["BatchClock"]
