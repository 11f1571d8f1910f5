"""Memory-safe admission (``rlsched.sim.admission``), the rules the simulator and every plugin site share, and
the simulator that plays a deployment with them (issue 47)."""

import itertools

import numpy as np
import pytest

from rlsched.policies import make_policy
from rlsched.sim import ServingConfig, Simulator
from rlsched.sim.admission import admitted, fifo_that_fits, split_oom
from rlsched.sim.cost import load_profile
from rlsched.sim.online import CostCalibrator
from rlsched.sim.truth import scaled
from tests.conftest import make_request

COST = load_profile("qwen-image-h200")
ROOM = COST.gpu_memory_gb - COST.weights_gb


def _recs(sizes, start: int = 0):
    out = []
    for i, s in enumerate(sizes, start):
        rec = COST.record(make_request(i, size=s))
        rec.key = rec.request.key()
        out.append(rec)
    return out


def _fitting(n: int) -> int:
    """A square image size ``n`` of which fit ``COST``'s GPU together and ``n + 1`` do not."""
    return next(s for s in range(256, 8192, 64) if COST.fits(_recs([s] * n)) and not COST.fits(_recs([s] * (n + 1))))


# ------------------------------------------------------------------ admitted
def test_admitted_is_the_longest_prefix_cost_fits_holds_at_least_one() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        recs = _recs([int(s) for s in rng.choice([512, 1024, 1536, 2048, 2560, 4608], size=int(rng.integers(1, 7)))])
        n = admitted(recs, COST)
        want = max([k for k in range(1, len(recs) + 1) if COST.fits(recs[:k])], default=1)
        assert n == want, [r.request.height for r in recs]


def test_a_request_that_must_go_alone_starts_only_alone() -> None:
    recs = _recs([512] * 4)
    assert admitted(recs, COST, {0}) == 1  # at the head: alone
    assert admitted(recs, COST, {2}) == 2  # further on: the batch stops before it
    assert admitted(recs, COST) == 4


# ------------------------------------------------------------------ fifo_that_fits
def test_fifo_that_fits_is_vllm_omnis_head_run_with_the_memory_check() -> None:
    two = _fitting(2)
    assert fifo_that_fits(_recs([two] * 4), (), COST, 4) == (0, 1)           # memory stops it
    assert fifo_that_fits(_recs([512, 512, 1024, 512]), (), COST, 4) == (0, 1)  # the key stops it
    assert fifo_that_fits(_recs([512] * 6), (), COST, 4) == (0, 1, 2, 3)     # max_num_seqs stops it
    assert fifo_that_fits(_recs([4608, 4608]), (), COST, 4) == (0,)          # fits nothing: the head alone
    assert fifo_that_fits(_recs([512] * 4), (), COST, 4, alone={1}) == (0,)
    assert fifo_that_fits(_recs([512] * 4), (), COST, 4, alone={0}) == (0,)


def test_step_mode_keeps_the_running_batch_and_joins_what_fits() -> None:
    two = _fitting(2)
    running = _recs([two], start=10)
    assert fifo_that_fits(_recs([two] * 3), running, COST, 4) == (10, 0)
    assert fifo_that_fits(_recs([512] * 3), _recs([two] * 2, start=10), COST, 4) == (10, 11)  # key differs
    assert fifo_that_fits(_recs([two] * 3), _recs([two] * 2, start=10), COST, 4) == (10, 11)  # full


def test_fifo_that_fits_reads_at_most_cap_plus_one_records() -> None:
    """Bounded work however deep the queue (an endless queue here)."""
    recs = itertools.cycle(_recs([512]))
    read = []

    def counted():
        for rec in recs:
            read.append(rec)
            yield rec
    fifo_that_fits(counted(), (), COST, 4)
    assert len(read) <= 5


# ------------------------------------------------------------------ split_oom
def test_an_oom_sends_a_batch_back_unless_it_was_one_requests_alone() -> None:
    recs = _recs([1536] * 3)
    split = split_oom(recs, set())
    assert split.retry == tuple(recs) and not split.failed and not split.alone
    split = split_oom(recs, {1})
    assert split.retry == tuple(recs) and split.alone == (recs[1],)
    assert split_oom(recs[:1], set()).failed == (recs[0],)
    assert split_oom(recs, set(), fail_all=True).failed == tuple(recs)
    split = split_oom(recs, {0, 1, 2}, alone={1})  # 1 was to go alone: whoever batched it, it is not sent back
    assert split.retry == (recs[0], recs[2]) and split.failed == (recs[1],)


def test_a_simulator_that_does_not_keep_a_request_alone_still_ends() -> None:
    """Retrying without the memory check (a simulator told ``retry_oom`` whose decisions nothing cuts): a
    request to go alone that fails in a batch again is failed, not sent back forever."""
    reqs = [make_request(i, size=1024) for i in range(4)]
    sim = Simulator(reqs, COST, ServingConfig("request", 4, 0.0), truth=scaled(COST, memory_scale=20.0),
                    memory_check=False)
    sim.run(make_policy("fifo"))
    assert _statuses(sim) == ["failed_oom"] * 4 and sim.oom_retries == 8 and sim.oom_batches == 3


# ------------------------------------------------------------------ the simulator
def _statuses(sim):
    return [r.status for r in sim.records.values()]


def test_a_simulated_deployment_never_starts_a_batch_its_belief_refuses() -> None:
    """``fifo`` on a GPU with 2.5x the profile's memory: the OOM raises the belief, and the batch that follows
    holds what the raised belief says fits. Without a truth the simulator is the model, where ``fifo`` is
    vLLM-Omni's memory-blind FIFO."""
    reqs = [make_request(i, size=1536) for i in range(3)]
    sim = Simulator(reqs, COST, ServingConfig("request", 4, 0.0), truth=scaled(COST, memory_scale=2.5))
    sim.run(make_policy("fifo"))
    assert _statuses(sim) == ["completed"] * 3 and sim.oom_batches == 1 and sim.memory_trims >= 1
    big = _fitting(2)
    model = Simulator([make_request(i, size=big) for i in range(3)], COST, ServingConfig("request", 4, 0.0))
    model.run(make_policy("fifo"))
    assert model.oom_batches == 1 and model.memory_trims == 0


class _Started:
    """Wraps a policy; records the size of each batch the simulator starts (as its memory check cuts it)."""

    def __init__(self, policy) -> None:
        self.policy, self.sizes = policy, []

    def reset(self, state) -> None:
        self.policy.reset(state)

    def decide(self, state):
        decision = self.policy.decide(state)
        if decision.batch:
            self.sizes.append(len(state.admitted_batch(tuple(decision.batch))))
        return decision


def test_a_request_fails_only_alone_and_goes_back_at_most_twice() -> None:
    """A GPU that holds none of them (memory 20x; the belief stops at ``HIGH``, where four still fit): four go
    back, go out together again (the belief cannot rise further), go back alone, and fail each alone, once.
    Caught: a batch sent back at every OOM while the belief stood still (no end), or failed in a batch."""
    reqs = [make_request(i, size=1024) for i in range(4)]
    sim = Simulator(reqs, COST, ServingConfig("request", 4, 0.0), truth=scaled(COST, memory_scale=20.0))
    started = _Started(make_policy("fifo"))
    sim.run(started)
    assert _statuses(sim) == ["failed_oom"] * 4
    assert started.sizes == [4, 4, 1, 1, 1, 1] and sim.oom_batches == 6 and sim.oom_retries == 8


def test_an_oom_the_belief_already_explains_moves_nothing() -> None:
    """A request no GPU of the profile holds, run alone (nothing else could), fails out of memory: that tells
    nothing new, so the memory scale stays. Caught by hand (issue 47): without the rule in
    ``CostCalibrator.observe_oom`` the scale drops (the bound it computes is below the scale held), and the
    eight requests after it are believed to fit together when they do not."""
    giant = COST.record(make_request(0, size=4608))
    assert not COST.fits([giant])
    cal = CostCalibrator(COST)
    assert not cal.observe_oom([giant]) and cal.version == 0 and cal.scales() == {}
    eight = _fitting(7)
    reqs = [make_request(0, size=4608)] + [make_request(i, t=1.0, size=eight) for i in range(1, 9)]
    sim = Simulator(reqs, COST, ServingConfig("request", 8, 0.0), truth=scaled(COST, memory_scale=1.0))
    sim.run(make_policy("fifo"))
    assert sim.oom_batches == 1 and sim.records[0].status == "failed_oom"
    assert all(sim.records[i].status == "completed" for i in range(1, 9))
    assert sim.calibrator.scales().get("qwen-image", (1.0, 1.0, 1.0))[2] == pytest.approx(1.0)
