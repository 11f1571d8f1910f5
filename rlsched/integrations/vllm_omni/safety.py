"""Checks a policy's decision against the live queue before the plugin acts on it.

A decision the engine cannot carry out as-is is rejected with a reason, and the
plugin schedules that call by vLLM-Omni's FIFO with the memory check
(``rlsched.sim.admission.fifo_that_fits``; ``FALLBACK_REASONS`` are the ``reason``
label values of ``rlsched_fallbacks_total``).
"""

from __future__ import annotations

import itertools
import math
from numbers import Integral, Real
from typing import Any

from rlsched.integrations.vllm_omni.guard import REASONS
from rlsched.sim.view import QueueView, batch_problem

CHECK_REASONS = (  # what check_decision refuses
    "nan",         # a NaN id or wait_until, or a non-finite network output (PolicyOutputError)
    "malformed",   # not a Decision-like object, or ids that are not integers
    "too_large",   # more ids than max_num_seqs
    "duplicate",   # an id named twice
    "unknown_id",  # an id that is not waiting (request mode) or live (step mode)
    "mixed_keys",  # ids whose compatibility keys differ
)
FALLBACK_REASONS = REASONS + CHECK_REASONS + (  # the guard's (exception, slow, timeout, busy, backoff), the checks'
    "cannot_fit",  # starts a request no GPU of the profile can hold while a waiting one fits
    "memory",      # the batch does not fit the GPU by the calibrated cost: its longest prefix that does runs
    "untracked",   # the queue holds a request the plugin could not build a record for
    "internal_error",  # the plugin's own bookkeeping raised (a bug); FIFO ran instead
)


def check_decision(decision: Any, state: QueueView) -> tuple[str | None, tuple[int, ...]]:
    """``(None, ids)`` for a decision the engine can run as-is, else ``(reason, ())``.

    An empty ``ids`` is a valid "wait" decision; what the plugin does with it is its call.
    """
    batch = getattr(decision, "batch", None)
    wait_until = getattr(decision, "wait_until", None)
    if batch is None or isinstance(batch, (str, bytes)):
        return "malformed", ()
    try:  # at most one id past the cap: an endless iterator must not exhaust memory
        raw = tuple(itertools.islice(batch, state.config.max_num_seqs + 1))
    except TypeError:
        return "malformed", ()
    if wait_until is not None and (not isinstance(wait_until, Real) or isinstance(wait_until, bool)):
        return "malformed", ()
    if _is_nan(wait_until):
        return "nan", ()
    ids: list[int] = []
    for x in raw:
        if type(x) is not int:  # the common case skips the slower ABC checks
            if _is_nan(x):
                return "nan", ()
            if isinstance(x, bool) or not isinstance(x, Integral):
                return "malformed", ()
        ids.append(int(x))
    batch_ids = tuple(ids)
    return batch_problem(state, batch_ids), batch_ids


def _is_nan(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, Integral) and math.isnan(x)
