"""vLLM-Omni schedulers driven by a ``SchedulingPolicy``.

``RLRequestScheduler`` (request mode: whole waves) and ``RLStepScheduler`` (step
mode: one denoise step per call) wrap vLLM-Omni's own ``schedule()`` and never
rewrite its loop. Each call:

1. syncs ``PluginState`` (O(running): the state follows every arrival, start, preemption
   and finish as it happens, and journals it as the simulator does) and asks the policy;
2. checks the decision (``safety.check_decision``) — an exception (any, ``SystemExit``
   included), a NaN (in the decision or the network's output), an invalid batch, or a
   decision slower than ``decision_budget_ms`` falls back to vLLM-Omni's FIFO with the memory
   check (``admission.fifo_that_fits``: its order and key rule, each request only while the batch
   fits the GPU by the calibrated cost; O(batch)) for that call, counted in ``fallbacks``. A
   policy's batch that does not fit is cut to its longest prefix that does (``memory``). Every
   batch, from the policy or a fallback, passes that check, which is what keeps a request an
   out-of-memory batch sent back (``_out_of_memory``) out of a batch the raised belief refuses.
   A request the plugin has no record for (``untracked``), or a plugin bug
   (``internal_error``), admits the head of the queue alone. ``decide`` and the check
   (which reads at most ``max_num_seqs + 1`` ids of the batch) run within
   ``decision_deadline_ms`` (``PluginConfig.decision_thread``): rlsched's own policies on the
   engine thread, a watchdog interrupting one that overruns (``deadline.InlineRunner``); any
   other policy on a worker thread that ``schedule()`` waits for at most the deadline, so one
   that sleeps or loops costs one bounded wait (``deadline.DeadlineRunner``). The fallback serves
   while a late call still runs (``busy``) and for a back-off of 1, 2, 4, … 64 calls after
   consecutive overruns (``backoff``), then the policy is reset (an interrupted decision
   may have left its structures half-updated) and serves again;
3. step mode: preempts (``preempt_request``) running requests the batch leaves out;
4. moves the chosen waiting requests, in the policy's order, to the head of
   ``_waiting`` (the rest keep their order; ``order.QueueOrder`` finds each in O(log n), so
   this does not grow with the queue) and caps ``max_num_running_reqs`` at
   ``running + chosen`` for this call only; then ``super().schedule()`` admits exactly
   them. vLLM-Omni's invariants hold because its own loop does the admission: one
   compatibility key per batch, at most ``max_num_seqs``, every live id in exactly one
   queue, nothing dropped.

With ``publish_state`` on, the scheduler also keeps the replica's state for the router in the
orchestrator (``publish.StatePublisher``; the wire format: ``rlsched.routing.views``): after
each ``schedule()`` and each ``update_from_output`` where the running set changed, requests finished or
left the batch unfinished, a new state (O(batch): the running ids with their steps done, the batch's
predicted end from the cost model, what finished or was preempted since). ``RLDiffusionEngine`` attaches
it to the outputs it sends, and sends a carrier output when a ``schedule()`` changed the running set
(``take_carrier``).

With online calibration on (the default), a new calibrated cost reaches the queue without costing a decision
(``PluginState.adopt_cost``, ``rlsched.sim.online.Recosting``): memory at once, so every check above reads the
calibrated memory; time ``RECOST_SLICE`` records after each batch, in ``update_from_output``, so the next
decision replays a slice of its queue index, never re-ranks the queue (a queue of one slice or less: at once).

A "wait" decision (empty batch) admits nothing new when something is running; when
nothing runs it is overridden and the fallback admits (the engine would otherwise spin on an
empty schedule), counted in ``waits_overridden``. Request mode keeps vLLM-Omni's
admission wait (``request_batch_max_wait_ms``), which runs before ``schedule()``.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, cast

from vllm_omni.diffusion.sched import DiffusionRequestStatus, RequestScheduler, StepScheduler
from vllm_omni.diffusion.sched.interface import CachedRequestData, DiffusionSchedulerOutput

from rlsched.errors import PolicyOutputError
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.deadline import InlineRunner
from rlsched.integrations.vllm_omni.guard import GuardedDecision, runner_for
from rlsched.integrations.vllm_omni.logs import join_vllm_logging
from rlsched.integrations.vllm_omni.metrics import PluginMetrics, finish_outcome, model_name_of, serve
from rlsched.integrations.vllm_omni.order import QueueOrder
from rlsched.integrations.vllm_omni.profiles import stage_profile
from rlsched.integrations.vllm_omni.publish import Published, StatePublisher
from rlsched.integrations.vllm_omni.safety import check_decision
from rlsched.integrations.vllm_omni.state import PluginState, open_telemetry
from rlsched.policies import SchedulingPolicy, make_policy
from rlsched.policies.base import calibrates
from rlsched.routing.views import calibration_of
from rlsched.sim.admission import admitted, fifo_that_fits, split_oom
from rlsched.sim.cost import CostModel
from rlsched.sim.online import CostCalibrator
from rlsched.sim.quota import Quotas, QuotaView
from rlsched.sim.request import RequestRecord
from rlsched.sim.simulator import ServingConfig

_log = logging.getLogger(__name__)


def freeze_gc_heap() -> None:
    """Move every object alive now into the permanent generation (vLLM's ``freeze_gc_heap``):
    later collections only walk what serving allocates."""
    gc.collect()
    gc.freeze()


RECOST_SLICE = 32
"""Records whose time figures a new calibration version re-costs after each batch (``Recosting``), when more
are live; at most as many at once. A slice adds that many entries to the policy's journal, which the next
decision replays (a few µs each): a version costs the decisions after it O(slice), never O(queue). A queue of
4,096 is at the new version's times within 128 batches (versions that come meanwhile wait for the pass; each
moves a scale by a few per cent), its memory at once."""
QUEUE_DEPTH_INTERVAL_S = 0.1
"""The ``rlsched_queue_depth`` gauges are refreshed at most this often (counting costs O(queue))."""
_COMPLETED = DiffusionRequestStatus.FINISHED_COMPLETED
_ABORTED = DiffusionRequestStatus.FINISHED_ABORTED


def replica_devices() -> str | None:
    """This process's devices as vLLM-Omni set them when it spawned the replica (the platform's device-control
    variable, e.g. ``CUDA_VISIBLE_DEVICES``): with ``num_replicas`` > 1 each replica gets its own slice of the
    stage's ``devices``, which is how the replicas of one stage config tell themselves apart."""
    from vllm_omni.platforms import current_omni_platform

    name = getattr(current_omni_platform, "device_control_env_var", None)
    return os.environ.get(name) if name else None


class _PolicyScheduling:
    """The policy hook shared by both schedulers (placed before the vLLM base in the MRO).

    Construct with a policy (object or spec) and/or ``PluginConfig``; anything left out
    comes from ``od_config.extras`` when the engine calls ``initialize``. Until then the
    scheduler is plain vLLM-Omni.
    """

    step_mode = False
    _waiting: Any
    _running: list[str]
    max_num_running_reqs: int

    def __init__(self, policy: SchedulingPolicy | str | None = None, settings: PluginConfig | None = None, *,
                 cost: CostModel | None = None, clock: Callable[[], float] | None = None,
                 metrics: PluginMetrics | None = None) -> None:
        super().__init__()  # BaseScheduler.__init__ takes no arguments
        self._policy_arg, self._cost_arg = policy, cost
        self.settings: PluginConfig | None = settings
        """Plugin settings; read from ``od_config.extras`` at ``initialize`` when not given."""
        self._clock_arg = clock
        self._clock = clock or time.monotonic
        self.metrics = metrics or PluginMetrics.on()
        self.rl_state: PluginState | None = None
        """The policy's view of the queue; None until ``initialize``."""
        self.quotas: Quotas | None = None
        """The classes' quotas (``extras.rlsched.classes.NAME.quota``; ``rlsched.sim.quota``, the simulator's
        rule): told every batch that starts; None when no class has one."""
        self._quota_view: QuotaView | None = None
        self.fallbacks = 0
        """schedule() calls that fell back to FIFO (see ``fallback_reasons``)."""
        self.fallback_reasons: Counter[str] = Counter()
        self.waits_overridden = 0
        self.decisions = 0
        self.preemptions = 0
        self.admission_mismatches = 0
        """Calls where vLLM-Omni's batch differed from the policy's choice (an upstream change)."""
        self._warming_up = False
        self._order = QueueOrder()
        """Where each id sits in ``_waiting`` (kept at every insertion; ``_arrange`` reads it)."""
        self.publisher: StatePublisher | None = None
        """The replica's state for the router (``publish_state``); None when not published."""
        self._reset_publishing()
        self._batch_start: tuple[Any, float] | None = None
        """The last ``schedule()``'s output and the plugin clock when it returned (``_time_batch``)."""
        self._calibration_seen = 0
        """The calibration version last logged and exported (``_calibrated``)."""
        self._oom_retried: set[str] = set()
        """Requests an out-of-memory batch sent back to the queue (``_out_of_memory``)."""
        self._oom_alone: set[str] = set()
        """Requests a second out-of-memory batch sent back: each starts alone (``admission.split_oom``)."""

    # ----------------------------------------------------------- lifecycle
    def initialize(self, od_config: Any, **kwargs: Any) -> None:
        super().initialize(od_config, **kwargs)  # type: ignore[misc]
        self._order.clear()  # vLLM-Omni's initialize empties _waiting
        self.settings = settings = self.settings or PluginConfig.from_od_config(od_config)
        if self._clock_arg is None and settings.time_scale != 1.0:
            scale = settings.time_scale
            self._clock = lambda: time.monotonic() * scale
        arg = self._policy_arg
        self.policy: SchedulingPolicy = make_policy(arg or settings.policy) if arg is None or isinstance(arg, str) \
            else arg
        cost = self._cost_arg or stage_profile(settings, getattr(od_config, "model", None))
        self.metrics = self.metrics.for_model(model_name_of(od_config))  # every sample labelled with the model
        self.metrics.serve_classes(list(settings.class_table))  # a deployment's own classes: no shipped gauges
        self._decisions_metric = self.metrics.decisions.labels(policy=getattr(self.policy, "name", "policy"))
        self._depth_due, self._depth_was_empty = -math.inf, True
        old = getattr(self, "_guard", None)
        if old is not None:  # initialized again: the previous runner's thread ends
            old.close()
        self._guard = GuardedDecision(
            runner_for(self.policy, settings.decision_thread, settings.decision_deadline_ms / 1e3),
            settings.decision_budget_ms / 1e3, reset=self._reset_policy, observe=self.metrics.latency.observe,
            exception_reasons=_REASONS, pause_gc=settings.pause_gc_in_decisions)
        calibrator = CostCalibrator(cost) if calibrates(settings.policy) else None
        self.rl_state = PluginState(cost, self._serving_config(), settings, self._clock, open_telemetry(settings),
                                    calibrator, RECOST_SLICE)
        self._open_quotas()
        self.policy.reset(self._policy_view())
        self.publisher = StatePublisher(self._clock) if settings.publish_state else None
        self._reset_publishing()
        port = None
        if settings.metrics_port:
            port = serve(settings.metrics_port, self.metrics.registry, settings.metrics_ports)
            if port is not None:
                self.metrics.replica.labels(devices=replica_devices() or "", port=str(port)).set(1)
        self._log_start(settings, port)

    def _log_start(self, settings: PluginConfig, port: int | None) -> None:
        """One line in the server's log per engine: what schedules it and how it is bounded."""
        join_vllm_logging()
        sha = getattr(self.policy, "checkpoint_sha256", None)
        _log.info("rlsched engine (%s mode, devices %s): policy %s%s, profile %s, decisions within %g ms (budget) / "
                  "%g ms (deadline) on the %s thread, replica state %s, metrics %s",
                  "step" if self.step_mode else "request", replica_devices() or "-", getattr(self.policy, "name", "?"),
                  f" (checkpoint sha256 {sha[:12]})" if sha else "", self.rl_state.shipped.name,
                  settings.decision_budget_ms, settings.decision_deadline_ms,
                  "engine" if isinstance(self._guard.runner, InlineRunner) else "worker",
                  "published" if settings.publish_state else "not published",
                  f"on port {port}" if port is not None else "off")

    def _serving_config(self) -> ServingConfig:
        wait_ms = float(getattr(self.od_config, "request_batch_max_wait_ms", 0.0) or 0.0)  # type: ignore[attr-defined]
        settings = self.settings or PluginConfig()
        return ServingConfig("step" if self.step_mode else "request", self.max_num_running_reqs, wait_ms,
                             quotas=settings.quotas, quota_window_s=settings.quota_window_s)

    def _open_quotas(self) -> None:
        """The quotas and the view they hold classes out of, over the current ``rl_state`` (the simulator's
        objects: ``rlsched.sim.quota``)."""
        st = self.rl_state
        self.quotas = Quotas.of(st.config) if st is not None else None
        self._quota_view = QuotaView(st, self.quotas) if st is not None and self.quotas is not None else None

    def _policy_view(self, refresh: bool = True) -> PluginState:
        """What the policy and every fallback decide on: ``rl_state``, less the requests of the classes held
        by their quotas (``refresh``: brought up to the state first; a ``QuotaView`` reads through to the
        state, so it is typed as one)."""
        view = self._quota_view
        if view is None:
            return cast(PluginState, self.rl_state)
        return cast(PluginState, view.refresh() if refresh else view)

    def _quota_started(self, out: DiffusionSchedulerOutput) -> None:
        """Tell the quotas the batch ``out`` starts (a wave, or in step mode one step): its requests and the
        cost model's time for it, as the simulator tells them at ``apply``."""
        st = self.rl_state
        if self.quotas is None or st is None or not out.num_scheduled_reqs or self._warming_up:
            return
        try:
            ids = tuple(out.scheduled_request_ids)
            recs, done = self._batch_records(ids, [self._steps_done(rid) for rid in ids])
            self.quotas.started(recs, self._predicted(recs, done), st.now)
        except Exception:  # never raise into the engine; a batch uncounted lets the class run a little more
            _log.debug("rlsched: quota accounting failed", exc_info=True)

    def add_request(self, request: Any) -> str:
        rid: str = super().add_request(request)  # type: ignore[misc]
        self._order.appended(rid)
        if self.rl_state is not None:
            try:
                key = self.get_request_state(rid).sampling_params_key  # type: ignore[attr-defined]
                rec, bad = self.rl_state.add(rid, request.sampling_params, key)
                for name in bad:
                    self.metrics.invalid.labels(field=name).inc()
                # the gauge follows arrivals too: in request mode no schedule() runs mid-wave
                self.metrics.queue_depth_add(rec.request.priority)
            except Exception:  # never raise into the engine; FIFO serves it (reason "untracked")
                pass
        return rid

    def preempt_request(self, request_id: str) -> bool:
        done: bool = super().preempt_request(request_id)  # type: ignore[misc]
        if done:  # vLLM-Omni put it at the head of _waiting
            self._order.pushed_front(request_id)
        return done

    def pop_request_state(self, request_id: str) -> Any:
        state = super().pop_request_state(request_id)  # type: ignore[misc]
        self._order.forget(request_id)
        self._oom_retried.discard(request_id)
        self._oom_alone.discard(request_id)
        if self.publisher is not None:
            if request_id in self._pub_listed:
                self._pub_listed.discard(request_id)
            elif state is not None and not self._warming_up:  # ended unseen (e.g. while paused): say so next
                self._pub_unlisted.append(request_id)
        st = self.rl_state
        if st is None or state is None:
            return state
        outcome = {_COMPLETED: "completed", _ABORTED: "aborted"}.get(state.status, "failed")
        rec = st.finish(request_id, outcome)
        if rec is not None and not self._warming_up:
            self.metrics.record_finish(rec.request.priority, finish_outcome(rec))
        self._update_queue_depth(force=True)  # a request aborted while waiting leaves the queue here
        return state

    # ------------------------------------------------------------ schedule
    def schedule(self) -> DiffusionSchedulerOutput:
        st = self.rl_state
        if st is None:  # not initialized by an engine: plain vLLM-Omni
            return super().schedule()  # type: ignore[misc]
        try:
            plan = self._plan(st)
        except Exception:  # a plugin bug must not stop the engine: the head alone (nothing checked it)
            self._fallback("internal_error")
            plan = ()
        out: DiffusionSchedulerOutput = super().schedule() if plan is None else self._run(st, plan)  # type: ignore[misc]
        try:
            st.follow(self._running)  # what vLLM-Omni's own loop admitted leaves the policy's queue
        except Exception:
            self._fallback("internal_error")
        try:
            self._calibrated(st)  # a version the decision's telemetry read made (the device's memory)
        except Exception:  # metrics and logs are advisory
            pass
        if out.num_scheduled_reqs and not self._warming_up:
            self.metrics.batch_size.observe(out.num_scheduled_reqs)
        # after admission, not before: the gauge must not keep counting requests that just started
        self._update_queue_depth(force=bool(out.scheduled_new_reqs))
        if self.publisher is not None:
            self._publish(out.finished_req_ids, at_schedule=True)
        self._quota_started(out)
        self._start_timing(out)  # last: as close to the executor's start as the plugin reads the clock
        return out

    def update_from_output(self, sched_output: Any, output: Any) -> set[str]:
        oom = self._out_of_memory(sched_output, output)
        if oom is None:
            self._time_batch(sched_output)  # before vLLM-Omni's update: the steps done are still the batch's
        else:  # the batch did not run: nothing to time; what is retried is not vLLM-Omni's to finish
            self._batch_start = None
            sched_output = oom
        try:
            self._calibrated(self.rl_state)  # a version this batch's time or OOM made
        except Exception:  # metrics and logs are advisory
            pass
        self._recost_some()
        finished: set[str] = super().update_from_output(sched_output, output)  # type: ignore[misc]
        if self.publisher is not None:
            self._publish(finished, at_schedule=False)
        return finished

    # ---------------------------------------------------------- publishing
    def _reset_publishing(self) -> None:
        self._pub_running: tuple[str, ...] = ()
        """The running ids of the last state built."""
        self._pub_listed: set[str] = set()
        """Finished ids some state listed, until the engine pops them (so no later state lists them again)."""
        self._pub_unlisted: list[str] = []
        """Ids popped before any state listed them as finished: the next state does."""
        self._carrier: Published | None = None

    def take_carrier(self) -> Published | None:
        """The state built by the last ``schedule()`` if that call changed the running set (once; the
        engine sends it on a carrier output), else None."""
        state, self._carrier = self._carrier, None
        return state

    def _publish(self, finished: Iterable[str], at_schedule: bool) -> None:
        """A new state when the running set changed, requests finished or left the batch unfinished
        since the last one: O(batch + finished), never O(queue); never raises into the engine."""
        if self._warming_up or self.publisher is None:
            return
        try:
            states, listed = self._request_states, self._pub_listed  # type: ignore[attr-defined]
            done, self._pub_unlisted = self._pub_unlisted, []
            for rid in finished:
                if rid not in listed and rid in states:
                    listed.add(rid)
                    done.append(rid)
            running, prev = tuple(self._running), self._pub_running
            now_running = set(running)
            preempted = []
            for rid in prev:
                if rid in now_running:
                    continue
                state = states.get(rid)
                if state is not None and not state.is_finished():
                    preempted.append((rid, self._steps_done(rid)))
                elif state is not None and rid not in listed:  # finished, not yet reported (an abort)
                    listed.add(rid)
                    done.append(rid)
            changed = now_running != set(prev)
            if not (changed or done or preempted):
                return
            self._pub_running = running
            steps = [self._steps_done(rid) for rid in running]
            now = self._clock()
            end = now + self._predicted_s(running, steps) if running else now
            calibration = calibration_of(getattr(self.rl_state, "calibrator", None))
            built = self.publisher.update(zip(running, steps), end, done, preempted, calibration)
            if at_schedule and changed:
                self._carrier = built
            if len(listed) > 1 << 16:  # ids the engine never popped (a bug upstream): bounded memory
                listed.clear()
        except Exception:  # publishing is advisory: the router falls back to its ledger
            pass

    def _start_timing(self, out: DiffusionSchedulerOutput) -> None:
        """Note when the batch ``out`` starts (``_time_batch`` observes it at its ``update_from_output``)."""
        self._batch_start = None
        if out.num_scheduled_reqs and not self._warming_up:
            try:
                self._batch_start = (out, self._clock())
            except Exception:  # metrics are advisory
                pass

    def _time_batch(self, sched_output: Any) -> None:
        """The batch ``sched_output`` ran (request mode: a wave; step mode: one step): its seconds on the
        plugin clock since the ``schedule()`` that started it, against the cost model's prediction, and
        the memory headroom telemetry last read. O(batch) once per batch; never raises into the engine."""
        started, self._batch_start = self._batch_start, None
        if started is None or started[0] is not sched_output:
            return
        try:
            observed = self._clock() - started[1]
            ids = tuple(sched_output.scheduled_request_ids)
            recs, done = self._batch_records(ids, [self._steps_done(rid) for rid in ids])
            st = self.rl_state
            self.metrics.record_batch(self._predicted(recs, done), observed)
            if st is not None:
                self.metrics.set_headroom(st.telemetry)
                st.observe_batch(recs, done, observed)
        except Exception:  # metrics and calibration are advisory: the engine runs on
            _log.debug("rlsched: batch timing failed", exc_info=True)

    def _out_of_memory(self, sched_output: Any, output: Any) -> Any:
        """The engine ran out of memory on this batch (its execution-error path gives each request the
        exception's text): None when it did not. Else the memory calibration learns from it
        (``CostCalibrator.observe_oom``) and, in request mode with calibration on, its requests go back to the
        head of the queue as new requests (a wave keeps nothing of a request after an error) unless the batch
        was one request's alone; one sent back before goes alone next time (``admission.split_oom``, the
        simulator's rule), and every batch is cut to what the raised belief says fits (``_memory_checked``).
        Returns the batch without them, for vLLM-Omni to fail the rest (step mode: all of them — the worker
        keeps a request's denoise state and refuses a second new-request payload for it). Counted
        (``rlsched_oom_requests_total``); never raises into the engine."""
        try:
            ids = [rid for rid in sched_output.scheduled_request_ids if _is_oom(output.get_request_output(rid))]
            if not ids:
                return None
            st = self.rl_state
            retry: list[str] = []
            if st is not None:
                recs, _ = self._batch_records(tuple(ids), [self._steps_done(rid) for rid in ids])
                st.observe_oom(recs)
                if st.calibrator is not None and len(recs) == len(ids):
                    retry = self._send_back(st, recs)
            self.metrics.oom_requests.labels(outcome="retried").inc(len(retry))
            self.metrics.oom_requests.labels(outcome="failed").inc(len(ids) - len(retry))
            _log.warning("rlsched: the engine ran out of memory on a batch of %d: %d queued again, %d failed",
                         len(ids), len(retry), len(ids) - len(retry))
            if not retry:
                return sched_output
            again = set(retry)
            return dataclasses.replace(
                sched_output,
                scheduled_new_reqs=[nr for nr in sched_output.scheduled_new_reqs if nr.request_id not in again],
                scheduled_cached_reqs=CachedRequestData(request_ids=[
                    rid for rid in sched_output.scheduled_cached_reqs.request_ids if rid not in again]))
        except Exception:  # vLLM-Omni fails the batch as it would without the plugin
            _log.debug("rlsched: out-of-memory handling failed", exc_info=True)
            return None

    def _send_back(self, st: PluginState, recs: list[RequestRecord]) -> list[str]:
        """The requests of an out-of-memory batch ``split_oom`` sends back, at the head of the queue in the
        batch's order; returns their names (one vLLM-Omni keeps running fails with the batch)."""
        names = {r.request.id: st.name(r.request.id) for r in recs}
        retried = {iid for iid, name in names.items() if name in self._oom_retried}
        kept_alone = {iid for iid, name in names.items() if name in self._oom_alone}
        split = split_oom(recs, retried, self.step_mode, kept_alone)
        alone = {names[r.request.id] for r in split.alone}
        # reversed: each goes to the head, so the batch keeps its order there
        retry = [n for n in (names[r.request.id] for r in reversed(split.retry)) if self._requeue(n)]
        retry.reverse()
        for rid in retry:  # the view's head in the batch's order, as vLLM-Omni's
            st.note_preempted(rid)
            self._oom_retried.add(rid)
            if rid in alone:
                self._oom_alone.add(rid)
        return retry

    def _requeue(self, request_id: str) -> bool:
        """``request_id`` (running) back at the head of the queue as a request not yet started: vLLM-Omni's
        ``preempt_request`` moves it (and ``_order`` follows), its status back to waiting makes the next
        ``schedule()`` send it as a new request rather than as a cached one to resume. False when vLLM-Omni
        keeps it running (a KV load in flight): it fails with the batch."""
        if not self.preempt_request(request_id):
            return False
        self.get_request_state(request_id).status = DiffusionRequestStatus.WAITING  # type: ignore[attr-defined]
        return True

    def _recost_some(self) -> None:
        """Between decisions, after each batch: one slice of what a new calibration version left to re-cost
        (``PluginState.recost_some``: ``RECOST_SLICE`` records' time figures; their memory is current already)."""
        st = self.rl_state
        if st is None:
            return
        try:
            st.recost_some()
        except Exception:  # a record re-costed later is decided on at its old time: never fail the engine
            _log.debug("rlsched: re-costing failed", exc_info=True)

    def _calibrated(self, st: PluginState | None) -> None:
        """A new calibration version: logged, exported (the served model's scales); once each. Looked at
        after each batch and each ``schedule()`` (whose telemetry read may bring the device's memory)."""
        cal = st.calibrator if st is not None else None
        if st is None or cal is None or cal.version == self._calibration_seen:
            return
        self._calibration_seen = cal.version
        model = st.settings.model or next(iter(st.shipped.models))
        scales = cal.scales().get(model, (1.0, 1.0, 1.0))
        self.metrics.set_calibration(cal.version, scales)
        _log.info("rlsched: cost profile %s calibrated, version %d: %s time x%.3f, attention x%.3f, memory x%.3f%s",
                  st.shipped.name, cal.version, model, *scales[:3],
                  f", fixed x{scales[3]:.3f}" if len(scales) > 3 else "")

    def _steps_done(self, request_id: str) -> int:
        """Denoise steps done (step mode: vLLM-Omni's progress; a request-mode wave starts at 0)."""
        progress = getattr(self, "_request_progress", None)
        p = progress.get(request_id) if progress is not None else None
        return int(p.current_step) if p is not None else 0

    def _predicted_s(self, running: tuple[str, ...], steps: list[int]) -> float:
        """The cost model's time for the running batch (step mode: its next step), as the simulator and
        ``CostProfileExecutor`` predict it."""
        return self._predicted(*self._batch_records(running, steps))

    def _batch_records(self, running: tuple[str, ...], steps: list[int]) -> tuple[list[RequestRecord], list[int]]:
        """The records of the requests ``running`` names that this plugin follows, with their steps done."""
        st = self.rl_state
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

    def _predicted(self, recs: list[RequestRecord], done: list[int]) -> float:
        st = self.rl_state
        if st is None or not recs:
            return 0.0
        cfg = st.config
        return st.cost.batch_duration(recs, self.step_mode, cfg.engine_overhead_ms, cfg.engine_overhead_ms_per_mpx,
                                      done)

    def _plan(self, st: PluginState) -> tuple[int, ...] | None:
        """The batch to run (ids; empty: admit nothing new, or the head alone when nothing runs), or None to let
        vLLM-Omni schedule (nothing to admit). Whatever decided it, the memory check cut it (``_memory_checked``)."""
        if not self._waiting:
            return None
        if self._running and not self.step_mode:
            return None  # request mode never calls mid-wave
        if st.config.max_num_seqs != self.max_num_running_reqs:  # the engine may resize (DLO + DP)
            st.config = self._serving_config()
        progress = getattr(self, "_request_progress", None) if self.step_mode else None
        if st.sync(self._waiting, self._running, progress):
            self._fallback("untracked")
            return ()  # a request the plugin has no cost for may be at the head: it goes alone
        st = self._policy_view()  # a serving rule: the fallbacks below decide without the held classes too
        refused = self._guard.refusal()  # busy, backoff: no decision is counted
        if refused is not None:
            self._fallback(refused)
            return self._fifo_that_fits(st)
        self.decisions += 1
        self._decisions_metric.inc()
        reason, checked = self._guard.call(self._decide, st)
        if reason is None:
            reason, ids = checked
        if reason is not None:
            self._fallback(reason)
            return self._fifo_that_fits(st)
        if self._starts_a_misfit(st, ids):
            self._fallback("cannot_fit")
            return self._first_that_fits(st)
        if not ids and not self._running:
            self.waits_overridden += 1
            self.metrics.wait_overrides.inc()
            return self._first_that_fits(st)
        return self._memory_checked(st, ids)

    def _alone(self, st: PluginState) -> set[int]:
        """The ids of the requests that must start alone (``_oom_alone``: a handful at most)."""
        return {iid for iid in map(st.int_id, self._oom_alone) if iid is not None}

    def _fifo_that_fits(self, st: PluginState) -> tuple[int, ...]:
        """What every fallback runs: vLLM-Omni's FIFO with the memory check, on the calibrated cost
        (``admission.fifo_that_fits``; O(batch))."""
        running = st.running if self.step_mode else ()
        return fifo_that_fits(st.waiting.values(), running, st.cost, self.max_num_running_reqs, self._alone(st))

    def _memory_checked(self, st: PluginState, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The policy's batch cut to its longest prefix that fits the GPU by the calibrated cost, its first
        request alone if need be (``admission.admitted``); a cut counts as a fallback (``memory``)."""
        if not ids:
            return ids
        waiting = st.waiting
        running = {r.request.id: r for r in st.running} if self.step_mode else {}
        recs = [waiting.get(i) or running[i] for i in ids]
        n = admitted(recs, st.cost, self._alone(st))
        if n == len(ids):
            return ids
        self._fallback("memory")
        return ids[:n]

    def _reset_policy(self) -> None:
        """After a decision that raised or was interrupted: a fresh policy over the same queue."""
        if self.rl_state is not None:
            self.policy.reset(self._policy_view(refresh=False))  # the view as the failed decision left it

    @staticmethod
    def _starts_a_misfit(st: PluginState, ids: tuple[int, ...]) -> bool:
        """The batch starts a waiting request no GPU of the profile can hold while another waiting request
        fits (the engine cannot reject it: it runs only when nothing else can)."""
        waiting = st.waiting
        if not any(i in waiting and not st.cost.fits([waiting[i]]) for i in ids):
            return False
        return any(st.cost.fits([rec]) for rec in waiting.values())

    def _first_that_fits(self, st: PluginState) -> tuple[int, ...]:
        """The engine cannot idle on a "wait" while nothing runs: admit as FIFO would (with the memory check),
        but from the first waiting request the GPU can hold at all (a request no GPU of the profile can hold
        must not start ahead of ones that fit); from the head when it fits or none does."""
        for n, rec in enumerate(st.waiting.values()):
            if st.cost.fits([rec]):
                return self._fifo_that_fits(st) if n == 0 else (rec.request.id,)
        return self._fifo_that_fits(st)

    def _decide(self, st: PluginState) -> tuple[str | None, tuple[int, ...]]:
        """On the decision thread: the policy's decision, checked (a slow or endless ``batch``
        is read there too, within the deadline)."""
        return check_decision(self.policy.decide(st), st)

    def _update_queue_depth(self, force: bool = False) -> None:
        """Set the gauges from ``_waiting``: when forced (admission, a finish), when the queue
        empties, else at most every ``QUEUE_DEPTH_INTERVAL_S``."""
        now = time.monotonic()  # wall clock, not the plugin clock: this only paces a gauge
        empty = not self._waiting
        if force or now >= self._depth_due or (empty and not self._depth_was_empty):
            self._depth_due, self._depth_was_empty = now + QUEUE_DEPTH_INTERVAL_S, empty
            self.metrics.set_queue_depth(self._waiting_by_class())

    def _waiting_by_class(self) -> Counter[str]:
        st = self.rl_state
        return st.waiting_by_class if st is not None else Counter()

    def begin_warmup(self) -> None:
        """The engine's start-up warm-up request follows: keep it out of the metrics."""
        self._warming_up = True

    def end_warmup(self) -> None:
        """Serving starts: a fresh queue view (clock origin, ids, a learned policy's history),
        and the start-up heap frozen out of the garbage collector's reach (``freeze_gc``)."""
        self._warming_up = False
        st = self.rl_state
        if self.settings is not None and self.settings.freeze_gc:
            freeze_gc_heap()
        if st is None or st.records:  # never drop a live request's record
            return
        self.rl_state = PluginState(st.shipped, st.config, st.settings, self._clock, st._telemetry_source,
                                    st.calibrator, RECOST_SLICE)
        self._open_quotas()
        self.policy.reset(self._policy_view())
        self._update_queue_depth(force=True)

    def _fallback(self, reason: str) -> None:
        """Count a call that FIFO schedules instead of the policy."""
        self.fallbacks += 1
        self.fallback_reasons[reason] += 1
        self.metrics.fallbacks.labels(reason=reason).inc()

    def _run(self, st: PluginState, ids: tuple[int, ...]) -> DiffusionSchedulerOutput:
        try:
            cap = self._arrange(st, ids)
        except Exception:  # the head alone: nothing checked what vLLM-Omni's FIFO would add to it
            self._fallback("internal_error")
            ids, cap = (), max(1, len(self._running))
        saved = self.max_num_running_reqs
        self.max_num_running_reqs = cap
        try:
            out: DiffusionSchedulerOutput = super().schedule()  # type: ignore[misc]
        finally:
            self.max_num_running_reqs = saved
        if ids and set(out.scheduled_request_ids) != {st.name(i) for i in ids}:
            self.admission_mismatches += 1
            self.metrics.admission_mismatches.inc()
        return out

    def _arrange(self, st: PluginState, ids: tuple[int, ...]) -> int:
        """Preempt what the batch leaves out, put its waiting ids first; returns this call's cap."""
        if not ids:  # wait while something runs: admit nothing new, keep the batch going
            return max(1, len(self._running))
        names = [st.name(i) for i in ids]
        if self.step_mode:
            keep = set(names)
            # reversed: preempt_request appends left, so the running order survives at the head
            out = [r for r in reversed(self._running) if r not in keep and self.preempt_request(r)]
            for rid in reversed(out):  # the view's head in vLLM-Omni's (and the simulator's) order
                st.note_preempted(rid)
            self.preemptions += len(out)
            self.metrics.preemptions.inc(len(out))
        running = set(self._running)
        new = [n for n in names if n not in running]
        waiting = self._waiting
        if list(itertools.islice(waiting, len(new))) != new:  # already at the head: FIFO-like choices
            self._order.move_to_head(waiting, new)  # O(batch · log queue), not a scan per request
        return max(1, len(self._running) + len(new))


def _is_oom(req_output: Any) -> bool:
    """An engine output carrying an out-of-memory error (``torch.OutOfMemoryError``'s text, "CUDA out of
    memory. Tried to allocate ...", as vLLM-Omni's ``DiffusionOutput.from_exception`` keeps it)."""
    result = getattr(req_output, "result", None)
    error = getattr(result, "error", None)
    return isinstance(error, str) and "out of memory" in error.lower()


_REASONS = {PolicyOutputError: "nan"}
"""Fallback reason of an exception from ``decide`` (any other type: ``exception``)."""


class RLRequestScheduler(_PolicyScheduling, RequestScheduler):
    """Request mode (waves run to completion) under a ``SchedulingPolicy``."""

    step_mode = False


class RLStepScheduler(_PolicyScheduling, StepScheduler):
    """Step mode (one denoise step per call, preemption at step boundaries) under a ``SchedulingPolicy``."""

    step_mode = True


__all__ = ["RLRequestScheduler", "RLStepScheduler"]
