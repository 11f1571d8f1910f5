"""A fake diffusion replica client whose outputs carry rlsched's published state (``router_views``' wire
format), as rlsched's engine with ``extras.rlsched.publish_state`` sends them (imports vllm_omni:
test-vllm tier only)."""

from __future__ import annotations

from collections import deque
from typing import Any

from vllm_omni.diffusion.data import DIFFUSION_REQUEST_LIFECYCLE_KEY, DIFFUSION_REQUEST_STARTED
from vllm_omni.outputs import OmniRequestOutput

from rlsched.routing.views import STATE_KEY, replica_state
from tests.vllm.fakes import ReplicaClient as Client


class Replica(Client):
    """A replica client whose outputs the orchestrator polls (``get_diffusion_output_nowait``): ``carrier``
    and ``finish`` queue what rlsched's engine sends (a carrier, a final output with a state); ``state``
    builds the next state (seq + 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.outbox: deque[Any] = deque()
        self.seq = 0

    def get_diffusion_output_nowait(self) -> Any:
        return self.outbox.popleft() if self.outbox else None

    def state(self, remaining_s: float, running: list[str], finished: tuple[str, ...] = (), **raw: Any) -> dict:
        self.seq += 1
        return {**replica_state(self.seq, remaining_s, [(r, 0) for r in running], finished), **raw}

    def carrier(self, rid: str, state: Any) -> None:
        """A request-started output sent for its state alone."""
        if isinstance(state, dict):
            state = {**state, "carrier": True}
        self.outbox.append(OmniRequestOutput.from_diffusion(
            request_id=rid, images=[], metrics={STATE_KEY: state}, finished=False,
            custom_output={DIFFUSION_REQUEST_LIFECYCLE_KEY: DIFFUSION_REQUEST_STARTED}))

    def finish(self, rid: str, state: Any = None) -> None:
        """``rid``'s final output, with a state when given."""
        metrics: dict[str, Any] = {"latency_ms": 12.0}
        if state is not None:
            metrics[STATE_KEY] = state
        self.outbox.append(OmniRequestOutput.from_diffusion(request_id=rid, images=[], metrics=metrics))
