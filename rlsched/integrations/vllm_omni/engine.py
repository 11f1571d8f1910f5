"""``RLDiffusionEngine``: vLLM-Omni's ``DiffusionEngine`` with a policy-driven scheduler.

vLLM-Omni has no scheduler-class setting for diffusion; its supported seam is
``engine_backend: "<dotted path to a DiffusionEngine subclass>"``, and
``DiffusionEngine.__init__`` accepts ``scheduler=``. This subclass builds the
scheduler that matches the execution mode (the engine picks its executor path by
mode, so the scheduler must be a ``StepScheduler`` in step mode and a
``RequestScheduler`` otherwise) and hands it to the base class, which initializes it.

With ``extras.rlsched.publish_state`` on, the replica publishes its scheduler state to the router in
the orchestrator (``rlsched.routing.views``; the scheduler builds it: ``publish.py``):

- every output ``step_streaming`` yields carries the latest state in its metrics, under
  ``router_views.STATE_KEY`` (``remaining_s`` taken when it is yielded);
- when a ``schedule()`` changed the running set, ``_emit_request_started_outputs`` also puts one
  *carrier*: a request-started output (``DiffusionOutput(request_started=True)``, as vLLM-Omni sends
  to a request that opted into lifecycle events) on the first running request that did not opt in,
  new ones first; its state is the one that ``schedule()`` built, marked ``"carrier": true``. It
  travels as vLLM-Omni's own started outputs do — ``step_streaming``, the stage process's
  ``on_request_started`` (or the inline client), the orchestrator's ``poll_diffusion_output`` —
  and the router pool swallows it there, so the orchestrator never routes it.

Off (the default), ``step_streaming`` is vLLM-Omni's own generator and no carrier is sent.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from vllm_omni.diffusion.data import DiffusionOutput
from vllm_omni.diffusion.diffusion_engine import DiffusionEngine

from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.publish import Published, StatePublisher
from rlsched.integrations.vllm_omni.scheduler import RLRequestScheduler, RLStepScheduler
from rlsched.routing.views import STATE_KEY

CARRIED = "_rlsched_carried"
"""Attribute of a carrier ``DiffusionOutput``: the ``Published`` state it carries."""


def is_step_mode(od_config: Any) -> bool:
    """The engine's own rule: ``streaming_output`` forces ``step_execution`` on."""
    return bool(getattr(od_config, "step_execution", False) or getattr(od_config, "streaming_output", False))


def make_scheduler(od_config: Any) -> RLRequestScheduler | RLStepScheduler:
    """The plugin scheduler for ``od_config`` (settings from ``extras``/env; not yet initialized)."""
    settings = PluginConfig.from_od_config(od_config)
    cls = RLStepScheduler if is_step_mode(od_config) else RLRequestScheduler
    return cls(settings=settings)


class RLDiffusionEngine(DiffusionEngine):
    """Select with ``engine_backend: rlsched.integrations.vllm_omni.RLDiffusionEngine``."""

    def __init__(self, od_config: Any, scheduler: Any = None) -> None:
        super().__init__(od_config, scheduler=scheduler if scheduler is not None else make_scheduler(od_config))

    def run_startup_warmup(self) -> None:
        """vLLM-Omni's start-up dummy request goes through the scheduler; keep it out of the
        SLO and batch metrics, and start the policy's clock and history after it."""
        sched = self.scheduler
        if hasattr(sched, "begin_warmup"):
            sched.begin_warmup()
        try:
            super().run_startup_warmup()
        finally:
            if hasattr(sched, "end_warmup"):
                sched.end_warmup()

    # ------------------------------------------------------- publishing
    def step_streaming(self, request: Any) -> AsyncGenerator[list[Any], None]:
        """vLLM-Omni's generator; with ``publish_state``, each output it yields carries the state."""
        outputs = super().step_streaming(request)
        publisher = getattr(self.scheduler, "publisher", None)
        return outputs if publisher is None else _with_state(outputs, publisher)

    def postprocess_output(self, request: Any, output: Any) -> Any:
        formatted = super().postprocess_output(request, output)
        state: Published | None = getattr(output, CARRIED, None)
        publisher = getattr(self.scheduler, "publisher", None)
        if state is not None and publisher is not None:  # a carrier: the state of its schedule() call
            for out in formatted:
                _stamp(out, publisher, state, carrier=True)
        return formatted

    def _emit_request_started_outputs(self, sched_output: Any) -> None:
        super()._emit_request_started_outputs(sched_output)
        take = getattr(self.scheduler, "take_carrier", None)
        state = take() if take is not None else None
        if state is None:
            return
        try:  # on the busy loop's thread, outside its error handling: publishing never stops the engine
            request_id = self._carrier_target(sched_output)
            if request_id is not None:
                carrier = DiffusionOutput(finished=False, request_started=True)
                setattr(carrier, CARRIED, state)
                self._put_output(request_id, carrier)
        except Exception:  # the state still goes out on the next output
            pass

    def _carrier_target(self, sched_output: Any) -> str | None:
        """The first scheduled request, new ones first, that did not opt into lifecycle events (its
        client expects no started output; the router pool swallows the carrier), else None."""
        for new in sched_output.scheduled_new_reqs:
            if not _opted(getattr(new, "req", None)):
                return str(new.request_id)
        for request_id in sched_output.scheduled_cached_reqs.request_ids:
            state = self.scheduler.get_request_state(request_id)
            if state is not None and not _opted(state.req):
                return str(request_id)
        return None


def _stamp(output: Any, publisher: StatePublisher, state: Published | None = None, carrier: bool = False) -> None:
    """``output``'s metrics with the state (default: the latest); publishing never fails an output."""
    try:
        message = publisher.message(state, carrier)
        if message is not None:
            output.metrics[STATE_KEY] = message
    except Exception:  # the router falls back to its ledger
        pass


def _opted(request: Any) -> bool:
    return bool(getattr(getattr(request, "sampling_params", None), "emit_request_lifecycle", False))


async def _with_state(outputs: AsyncGenerator[list[Any], None],
                      publisher: StatePublisher) -> AsyncGenerator[list[Any], None]:
    """``outputs``, each one's metrics with the latest state (a carrier's holds its own already)."""
    try:
        async for formatted in outputs:
            for out in formatted:
                if STATE_KEY not in out.metrics:
                    _stamp(out, publisher)
            yield formatted
    finally:
        await outputs.aclose()


__all__ = ["RLDiffusionEngine", "is_step_mode", "make_scheduler"]
