"""rlsched's log lines in the server's log: the ``rlsched`` logger gets vLLM's handler (vLLM configures only
its own ``vllm`` logger; Python's root logger stays bare, so before this the server log showed nothing of
rlsched). Done only in a process that uses the plugin (an engine that initializes rlsched's scheduler, an
API process that builds a router pool): nothing changes where rlsched is merely installed. Records still
propagate to the root logger, which a server leaves without handlers (no line twice) and tests capture."""

from __future__ import annotations

import logging

ROOT = "rlsched"


def join_vllm_logging() -> None:
    """vLLM's handlers on the ``rlsched`` logger, at vLLM's level unless one was set (idempotent). A handler
    the root logger holds too is left out: rlsched's records reach it by propagation (no line twice)."""
    ours, vllm, root = logging.getLogger(ROOT), logging.getLogger("vllm"), logging.getLogger()
    for handler in vllm.handlers:
        if handler not in ours.handlers and handler not in root.handlers:
            ours.addHandler(handler)
    if vllm.handlers and ours.level == logging.NOTSET:
        ours.setLevel(vllm.getEffectiveLevel())


__all__ = ["join_vllm_logging"]
