"""Memory safety that does not depend on the clock (issue 47), inside vLLM-Omni's real ``RequestScheduler`` and
``StepScheduler``: whatever a call falls back to, it admits only what fits the GPU by the calibrated cost; a
policy's batch that does not fit is cut; a request an out-of-memory batch sent back goes out in a batch the
raised belief says fits, alone after a second OOM, and fails only when it fails alone."""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from vllm_omni.diffusion.data import DiffusionOutput  # noqa: E402
from vllm_omni.diffusion.worker.utils import BatchRunnerOutput, RunnerOutput  # noqa: E402

from rlsched.errors import PolicyOutputError  # noqa: E402
from rlsched.sim.simulator import Decision  # noqa: E402
from tests.vllm.fakes import StepRunner, check_invariants, finish_wave, mk_req, new_ids, plugin, pop_finished  # noqa: E402
from tests.vllm.test_scheduler import Fixed  # noqa: E402

OOM = "CUDA out of memory. Tried to allocate 9.00 GiB"


def _sleepy(state) -> Decision:
    time.sleep(0.05)
    return Decision(tuple(state.waiting)[:1])


def _raises(state) -> Decision:
    raise ValueError("boom")


def _nan(state) -> Decision:
    raise PolicyOutputError("network output is NaN")


def _size(sched, fit: int) -> int:
    """A square image size (multiple of 64) ``fit`` of which fit the scheduler's calibrated cost together and
    ``fit + 1`` do not."""
    st = sched.rl_state
    base = next(iter(st.records.values()))

    def fits(size: int, n: int) -> bool:
        from dataclasses import replace

        rec = st.cost.record(replace(base.request, height=size, width=size))
        return st.cost.fits([rec] * n)
    return next(s for s in range(256, 8192, 64) if fits(s, fit) and not fits(s, fit + 1))


def _loaded(policy, n: int = 4, fit: int = 1, step: bool = False, **kw):
    """A plugin scheduler with ``n`` same-key requests waiting, ``fit`` of which the GPU holds together."""
    probe = plugin("fifo")
    probe.add_request(mk_req("probe"))
    size = _size(probe, fit)
    sched = plugin(policy, step=step, **kw)
    for i in range(n):
        sched.add_request(mk_req(f"r{i}", size))
    return sched


def _believed_fit(sched, ids) -> bool:
    st = sched.rl_state
    return st.cost.fits([st.records[st.int_id(r)] for r in ids])


@pytest.mark.parametrize("fn, kw, reason", [(_raises, {}, "exception"), (_nan, {}, "nan"),
                                            (_sleepy, {"budget_ms": 1.0}, "slow"),
                                            (_sleepy, {"budget_ms": 1.0, "deadline_ms": 10.0}, "timeout"),
                                            (lambda st: Decision((99,)), {}, "unknown_id")])
@pytest.mark.parametrize("fit", [1, 2])
def test_every_fallback_admits_only_what_fits(fn, kw, reason, fit) -> None:
    """Four large images, ``fit`` of which the GPU holds: vLLM-Omni's FIFO would start all four. Caught
    (issue 47): the fallback was ``super().schedule()``, memory-blind."""
    sched = _loaded(Fixed(fn), fit=fit, **kw)
    if reason == "slow":  # a lone overrun is used (guard.py): the second in a row is the one discarded
        sched._guard.overruns_in_a_row = 1
    out = sched.schedule()
    assert new_ids(out) == [f"r{i}" for i in range(fit)] and _believed_fit(sched, new_ids(out))
    assert reason in sched.fallback_reasons
    check_invariants(sched)


def test_the_backoff_after_an_overrun_admits_only_what_fits() -> None:
    sched = _loaded(Fixed(_sleepy), n=6, fit=2, budget_ms=1.0)
    seen = []
    while sched.has_requests():
        out = sched.schedule()
        assert len(new_ids(out)) <= 2 and _believed_fit(sched, new_ids(out))
        seen += new_ids(out)
        finish_wave(sched, out)
    assert seen == [f"r{i}" for i in range(6)] and {"slow", "backoff"} <= set(sched.fallback_reasons)


def test_a_policy_batch_that_does_not_fit_is_cut_to_its_longest_prefix_that_does() -> None:
    """Caught: the policy's own batch reached the GPU unchecked (a replica behind the central queue runs
    ``fifo``, which packs by key alone)."""
    sched = _loaded(Fixed(lambda st: Decision(tuple(reversed(tuple(st.waiting))))), fit=2)
    out = sched.schedule()
    assert new_ids(out) == ["r3", "r2"] and sched.fallback_reasons == {"memory": 1}
    check_invariants(sched)


def test_the_fifo_policy_behind_the_central_queue_never_starts_a_batch_its_memory_check_refuses() -> None:
    sched = _loaded("fifo", fit=1)
    for _ in range(4):
        out = sched.schedule()
        assert len(new_ids(out)) == 1
        finish_wave(sched, out)
    assert not sched.has_requests()


def test_step_mode_fallback_keeps_the_running_batch_and_joins_only_what_fits() -> None:
    sched = _loaded(Fixed(_raises), n=4, fit=2, step=True)
    runner = StepRunner()
    out, _ = runner.step(sched)
    assert list(out.scheduled_request_ids) == ["r0", "r1"]
    out, _ = runner.step(sched)
    assert list(out.scheduled_request_ids) == ["r0", "r1"]  # running, nothing more fits
    check_invariants(sched)


def test_an_untracked_head_goes_alone() -> None:
    sched = _loaded("fifo", fit=4)
    st = sched.rl_state
    st.remove("r0")  # the plugin lost the record of the head: it cannot cost it
    out = sched.schedule()
    assert new_ids(out) == ["r0"] and "untracked" in sched.fallback_reasons


# ------------------------------------------------------------------ out-of-memory retries
def _oom(sched, out, failing=None) -> set[str]:
    """The worker ran out of memory on ``out``'s batch (every request, or those in ``failing``)."""
    ids = list(out.scheduled_request_ids)
    ro = BatchRunnerOutput.from_list([
        RunnerOutput(request_id=r, finished=True,
                     result=DiffusionOutput(error=OOM) if failing is None or r in failing else DiffusionOutput())
        for r in ids])
    return pop_finished(sched, sched.update_from_output(out, ro))


def _failed(sched) -> float:
    return sched.metrics.sample("rlsched_oom_requests_total", {"outcome": "failed"}) or 0.0


def test_a_request_sent_back_goes_out_only_in_a_batch_the_raised_belief_says_fits() -> None:
    """The four fit the profile together but not the GPU: the OOM raises the memory scale, and the next
    batch — a fallback's (a slow policy) — holds what the raised belief says fits, not the same four. Caught
    (issue 47): "4 queued again, 0 failed", then "0 queued again, 4 failed"."""
    sched = _loaded(Fixed(_sleepy), fit=4, budget_ms=1.0)
    sched._guard.overruns_in_a_row = 1  # every call after this one is a second overrun in a row: discarded
    out = sched.schedule()
    assert len(new_ids(out)) == 4
    assert _oom(sched, out) == set() and len(sched._waiting) == 4
    out = sched.schedule()
    assert 1 <= len(new_ids(out)) < 4 and _believed_fit(sched, new_ids(out))
    finish_wave(sched, out)
    while sched.has_requests():
        finish_wave(sched, sched.schedule())
    assert _failed(sched) == 0


def test_a_second_oom_sends_a_request_back_alone_and_it_fails_only_alone() -> None:
    """The GPU holds none of them however the belief rises (each OOM is the worker's word): four go back,
    three of them (what the raised belief lets start) go back again — alone from now on — and every request
    fails only alone, answered once, sent back at most twice. Caught: a request failed in a batch."""
    sched = _loaded("fifo", n=4, fit=4)
    batches, finished = [], set()
    while sched.has_requests():
        out = sched.schedule()
        batches.append(new_ids(out))
        done = _oom(sched, out)
        assert not done or len(new_ids(out)) == 1, "failed in a batch"
        assert not done & finished
        finished |= done
        assert len(batches) < 10
    assert [len(b) for b in batches] == [4, 3, 1, 1, 1, 1] and finished == {"r0", "r1", "r2", "r3"}
    retried = sched.metrics.sample("rlsched_oom_requests_total", {"outcome": "retried"})
    assert _failed(sched) == 4 and retried == 4 + 3


def test_a_request_that_fails_alone_is_failed_at_once() -> None:
    sched = _loaded("fifo", n=1, fit=1)
    out = sched.schedule()
    assert _oom(sched, out) == {"r0"} and _failed(sched) == 1 and not sched.has_requests()
