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
   out-of-memory batch sent back (``oom.OutOfMemory``) out of a batch the raised belief refuses.
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
from vllm_omni.diffusion.sched.interface import DiffusionSchedulerOutput

from rlsched.errors import PolicyOutputError
from rlsched.integrations.vllm_omni.batch_clock import BatchClock
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.deadline import InlineRunner
from rlsched.integrations.vllm_omni.decider import Decider
from rlsched.integrations.vllm_omni.guard import GuardedDecision, runner_for
from rlsched.integrations.vllm_omni.logs import join_vllm_logging
from rlsched.integrations.vllm_omni.metrics import PluginMetrics, finish_outcome, model_name_of, serve
from rlsched.integrations.vllm_omni.oom import OutOfMemory
from rlsched.integrations.vllm_omni.order import QueueOrder
from rlsched.integrations.vllm_omni.profiles import stage_profile
from rlsched.integrations.vllm_omni.publish import Publication, Published, StatePublisher
from rlsched.integrations.vllm_omni.safety import check_decision
from rlsched.integrations.vllm_omni.state import PluginState, open_telemetry
from rlsched.policies import SchedulingPolicy, make_policy
from rlsched.policies.base import calibrates
from rlsched.routing.views import calibration_of
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
        self.preemptions = 0
        self.admission_mismatches = 0
        """Calls where vLLM-Omni's batch differed from the policy's choice (an upstream change)."""
        self._warming_up = False
        self._order = QueueOrder()
        """Where each id sits in ``_waiting`` (kept at every insertion; ``_arrange`` reads it)."""
        self.publication: Publication | None = None
        """The replica's state for the router (``publish_state``; ``publish.Publication``); None when not published."""
        self.batch_clock = BatchClock(self.step_mode, lambda: self.rl_state,
                                      lambda: getattr(self, "_request_progress", None), self._clock, self.metrics)
        """Each batch's predicted and observed time, and the calibration it feeds (``batch_clock.BatchClock``)."""
        self._oom = OutOfMemory(self.step_mode)
        """What out-of-memory batches sent back (``oom.OutOfMemory``)."""
        self.decider = Decider(self.step_mode, self.metrics, self._oom.alone_ids)
        """The policy's batch or a fallback's, and their counts (``decider.Decider``)."""
        self._fallback = self.decider.fallback

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
        self.decider.open(self.metrics, getattr(self.policy, "name", "policy"))
        self.batch_clock.clock, self.batch_clock.metrics = self._clock, self.metrics
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
        self.publication = Publication(StatePublisher(self._clock), self._clock) if settings.publish_state else None
        port = None
        if settings.metrics_port:
            port = serve(settings.metrics_port, self.metrics.registry, settings.metrics_ports)
            if port is not None:
                self.metrics.replica.labels(devices=replica_devices() or "", port=str(port)).set(1)
        _log_start(self, settings, port)

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
        self._oom.forget(request_id)
        if self.publication is not None:
            self.publication.popped(request_id, state is not None and not self._warming_up)
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
            self.batch_clock.calibrated(st)  # a version the decision's telemetry read made (the device's memory)
        except Exception:  # metrics and logs are advisory
            pass
        if out.num_scheduled_reqs and not self._warming_up:
            self.metrics.batch_size.observe(out.num_scheduled_reqs)
        # after admission, not before: the gauge must not keep counting requests that just started
        self._update_queue_depth(force=bool(out.scheduled_new_reqs))
        self._publish(out.finished_req_ids, at_schedule=True)
        self.batch_clock.start(out, not self._warming_up, self.quotas)  # last: the batch starts
        return out

    def update_from_output(self, sched_output: Any, output: Any) -> set[str]:
        oom = self._oom.handle(sched_output, output, self.rl_state, lambda ids: self.batch_clock.batch(ids)[0],
                              self._requeue, self.metrics)
        if oom is None:
            self.batch_clock.observe(sched_output)  # before vLLM-Omni's update: the steps done are still the batch's
        else:  # the batch did not run: nothing to time; what is retried is not vLLM-Omni's to finish
            self.batch_clock.cancel()
            sched_output = oom
        try:
            self.batch_clock.calibrated(self.rl_state)  # a version this batch's time or OOM made
        except Exception:  # metrics and logs are advisory
            pass
        self.batch_clock.recost_some()
        finished: set[str] = super().update_from_output(sched_output, output)  # type: ignore[misc]
        self._publish(finished, at_schedule=False)
        return finished

    # ---------------------------------------------------------- publishing
    @property
    def publisher(self) -> StatePublisher | None:
        """The replica's latest published state (``RLDiffusionEngine`` reads it); None when not published."""
        return self.publication.publisher if self.publication is not None else None

    def take_carrier(self) -> Published | None:
        """The state built by the last ``schedule()`` if that call changed the running set (once; the
        engine sends it on a carrier output), else None."""
        return self.publication.take_carrier() if self.publication is not None else None

    def _publish(self, finished: Iterable[str], at_schedule: bool) -> None:
        """A new state if there is news (``publish.Publication``); never raises into the engine."""
        if self._warming_up or self.publication is None:
            return
        try:
            self.publication.publish(finished, at_schedule, self._request_states,  # type: ignore[attr-defined]
                                     tuple(self._running), self._steps_done, self._predicted_s,
                                     calibration_of(getattr(self.rl_state, "calibrator", None)))
        except Exception:  # publishing is advisory: the router falls back to its ledger
            pass

    def _requeue(self, request_id: str) -> bool:
        """``request_id`` (running) back at the head of the queue as a request not yet started: vLLM-Omni's
        ``preempt_request`` moves it (and ``_order`` follows), its status back to waiting makes the next
        ``schedule()`` send it as a new request rather than as a cached one to resume. False when vLLM-Omni
        keeps it running (a KV load in flight): it fails with the batch."""
        if not self.preempt_request(request_id):
            return False
        self.get_request_state(request_id).status = DiffusionRequestStatus.WAITING  # type: ignore[attr-defined]
        return True

    def _steps_done(self, request_id: str) -> int:
        return self.batch_clock.steps_done(request_id)

    def _predicted_s(self, running: tuple[str, ...], steps: list[int]) -> float:
        return self.batch_clock.predicted(*self.batch_clock.records(running, steps))

    def _batch_records(self, running: tuple[str, ...], steps: list[int]) -> tuple[list[RequestRecord], list[int]]:
        return self.batch_clock.records(running, steps)

    def _plan(self, st: PluginState) -> tuple[int, ...] | None:
        """The batch to run (ids; empty: admit nothing new, or the head alone when nothing runs), or None to let
        vLLM-Omni schedule (nothing to admit). Whatever decided it, the memory check cut it (``Decider``)."""
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
        # a serving rule: the fallbacks decide without the held classes too
        return self.decider.plan(self._policy_view(), self._guard, self._decide, self.max_num_running_reqs,
                                 bool(self._running))

    def _reset_policy(self) -> None:
        """After a decision that raised or was interrupted: a fresh policy over the same queue."""
        if self.rl_state is not None:
            self.policy.reset(self._policy_view(refresh=False))  # the view as the failed decision left it

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
            st = self.rl_state
            self.metrics.set_queue_depth(st.waiting_by_class if st is not None else Counter())

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

    @property
    def fallbacks(self) -> int:
        """schedule() calls that fell back to FIFO (see ``fallback_reasons``)."""
        return self.decider.fallbacks

    @property
    def fallback_reasons(self) -> Counter[str]:
        return self.decider.fallback_reasons

    @property
    def waits_overridden(self) -> int:
        return self.decider.waits_overridden

    @property
    def decisions(self) -> int:
        return self.decider.decisions

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


def _log_start(sched: _PolicyScheduling, settings: PluginConfig, port: int | None) -> None:
    """One line in the server's log per engine: what schedules it and how it is bounded."""
    join_vllm_logging()
    sha = getattr(sched.policy, "checkpoint_sha256", None)
    _log.info("rlsched engine (%s mode, devices %s): policy %s%s, profile %s, decisions within %g ms (budget) / "
              "%g ms (deadline) on the %s thread, replica state %s, metrics %s",
              "step" if sched.step_mode else "request", replica_devices() or "-", getattr(sched.policy, "name", "?"),
              f" (checkpoint sha256 {sha[:12]})" if sha else "", sched.rl_state.shipped.name,
              settings.decision_budget_ms, settings.decision_deadline_ms,
              "engine" if isinstance(sched._guard.runner, InlineRunner) else "worker",
              "published" if settings.publish_state else "not published",
              f"on port {port}" if port is not None else "off")


_REASONS = {PolicyOutputError: "nan"}
"""Fallback reason of an exception from ``decide`` (any other type: ``exception``)."""


class RLRequestScheduler(_PolicyScheduling, RequestScheduler):
    """Request mode (waves run to completion) under a ``SchedulingPolicy``."""

    step_mode = False


class RLStepScheduler(_PolicyScheduling, StepScheduler):
    """Step mode (one denoise step per call, preemption at step boundaries) under a ``SchedulingPolicy``."""

    step_mode = True


__all__ = ["RLRequestScheduler", "RLStepScheduler"]
