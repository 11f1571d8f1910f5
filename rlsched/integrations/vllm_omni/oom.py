"""An out-of-memory batch in the plugin: the memory calibration learns from it, and its requests go back to the
queue or fail by the simulator's rule (``rlsched.sim.admission.split_oom``).

``OutOfMemory`` is a collaborator of the plugin's scheduler (``scheduler._PolicyScheduling``): it keeps which
requests an out-of-memory batch sent back, and which of them must start alone; the scheduler's memory check
reads ``alone``. No vLLM import.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlsched.sim.admission import split_oom
from rlsched.sim.request import RequestRecord

if TYPE_CHECKING:
    from rlsched.integrations.vllm_omni.metrics import PluginMetrics
    from rlsched.integrations.vllm_omni.state import PluginState

_log = logging.getLogger(__name__)

BatchRecords = Callable[[tuple[str, ...]], list[RequestRecord]]
"""The records of the named requests this plugin follows (the scheduler's ``_batch_records``)."""


def is_oom(req_output: Any) -> bool:
    """An engine output carrying an out-of-memory error (``torch.OutOfMemoryError``'s text, "CUDA out of
    memory. Tried to allocate ...", as vLLM-Omni's ``DiffusionOutput.from_exception`` keeps it)."""
    result = getattr(req_output, "result", None)
    error = getattr(result, "error", None)
    return isinstance(error, str) and "out of memory" in error.lower()


class OutOfMemory:
    """The requests out-of-memory batches sent back (``retried``), and those that must start alone."""

    def __init__(self, step_mode: bool) -> None:
        self.step_mode = step_mode
        self.retried: set[str] = set()
        """Requests an out-of-memory batch sent back to the queue."""
        self.alone: set[str] = set()
        """Requests a second out-of-memory batch sent back: each starts alone (``admission.split_oom``)."""

    def forget(self, request_id: str) -> None:
        """The engine popped ``request_id``."""
        self.retried.discard(request_id)
        self.alone.discard(request_id)

    def alone_ids(self, st: PluginState) -> set[int]:
        """The ids of the requests that must start alone (a handful at most)."""
        return {iid for iid in map(st.int_id, self.alone) if iid is not None}

    def handle(self, sched_output: Any, output: Any, st: PluginState | None, records: BatchRecords,
               requeue: Callable[[str], bool], metrics: PluginMetrics) -> Any:
        """The engine ran out of memory on this batch (its execution-error path gives each request the
        exception's text): None when it did not. Else the memory calibration learns from it
        (``CostCalibrator.observe_oom``) and, in request mode with calibration on, its requests go back to the
        head of the queue as new requests (a wave keeps nothing of a request after an error) unless the batch
        was one request's alone; one sent back before goes alone next time (``admission.split_oom``, the
        simulator's rule), and every batch is cut to what the raised belief says fits (the scheduler's memory
        check). Returns the batch without them, for vLLM-Omni to fail the rest (step mode: all of them — the
        worker keeps a request's denoise state and refuses a second new-request payload for it). Counted
        (``rlsched_oom_requests_total``); never raises into the engine."""
        try:
            ids = [rid for rid in sched_output.scheduled_request_ids if is_oom(output.get_request_output(rid))]
            if not ids:
                return None
            retry: list[str] = []
            if st is not None:
                recs = records(tuple(ids))
                st.observe_oom(recs)
                if st.calibrator is not None and len(recs) == len(ids):
                    retry = self._send_back(st, recs, requeue)
            metrics.oom_requests.labels(outcome="retried").inc(len(retry))
            metrics.oom_requests.labels(outcome="failed").inc(len(ids) - len(retry))
            _log.warning("rlsched: the engine ran out of memory on a batch of %d: %d queued again, %d failed",
                         len(ids), len(retry), len(ids) - len(retry))
            if not retry:
                return sched_output
            again = set(retry)
            return dataclasses.replace(
                sched_output,
                scheduled_new_reqs=[nr for nr in sched_output.scheduled_new_reqs if nr.request_id not in again],
                scheduled_cached_reqs=dataclasses.replace(sched_output.scheduled_cached_reqs, request_ids=[
                    rid for rid in sched_output.scheduled_cached_reqs.request_ids if rid not in again]))
        except Exception:  # vLLM-Omni fails the batch as it would without the plugin
            _log.debug("rlsched: out-of-memory handling failed", exc_info=True)
            return None

    def _send_back(self, st: PluginState, recs: list[RequestRecord], requeue: Callable[[str], bool]) -> list[str]:
        """The requests of an out-of-memory batch ``split_oom`` sends back, at the head of the queue in the
        batch's order; returns their names (one vLLM-Omni keeps running fails with the batch)."""
        names = {r.request.id: st.name(r.request.id) for r in recs}
        retried = {iid for iid, name in names.items() if name in self.retried}
        kept_alone = {iid for iid, name in names.items() if name in self.alone}
        split = split_oom(recs, retried, self.step_mode, kept_alone)
        alone = {names[r.request.id] for r in split.alone}
        # reversed: each goes to the head, so the batch keeps its order there
        retry = [n for n in (names[r.request.id] for r in reversed(split.retry)) if requeue(n)]
        retry.reverse()
        for rid in retry:  # the view's head in the batch's order, as vLLM-Omni's
            st.note_preempted(rid)
            self.retried.add(rid)
            if rid in alone:
                self.alone.add(rid)
        return retry


__all__ = ["OutOfMemory", "is_oom"]
