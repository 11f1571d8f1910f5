"""The observation encoder on hand-built states: counts, scaling, ordering, bounds."""

from __future__ import annotations

import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from rlsched.learned.observation import (
    FEATURE_NAMES,
    OBS_DIM,
    SCHEMA_VERSION,
    TOP_K,
    WAIT_SCALE_S,
    WORK_SCALE_S,
    ClassHistory,
    ObservationEncoder,
)
from rlsched.sim import Request, RequestRecord, ServingConfig, load_profile
from rlsched.sim.request import RUNNING
from rlsched.sim.view import Journal
from rlsched.telemetry import UNKNOWN, TelemetrySample

COST = load_profile("omni-h200")
GPU = TelemetrySample(memory_used_gb=70.5, memory_total_gb=141.0, compute_util=0.5, membw_util=0.25)
IX = {name: i for i, name in enumerate(FEATURE_NAMES)}


def rec(rid: int, t: float, priority: str = "batch", modality: str = "image", size: int = 512,
        slo_scale: float = 3.0, step_mode: bool = False) -> RequestRecord:
    """A queued record as the simulator holds it (deadline and key filled in)."""
    model = {"image": "qwen-image", "audio": "stable-audio-open"}[modality]
    h, w, frames = (size, size, 1) if modality == "image" else (1, 1, 1024)
    work = COST.standalone_s(Request(0, 0.0, model, modality, h, w, frames, 50, True, priority, math.inf))
    q = Request(rid, t, model, modality, h, w, frames, 50, True, priority, slo_scale * work)
    r = COST.record(q)
    r.deadline_s, r.key = t + q.slo_s, q.key(step_mode)
    return r


def state(recs: list[RequestRecord], now: float, mode: str = "request", running: list | None = None) -> SimpleNamespace:
    return SimpleNamespace(now=now, waiting={r.request.id: r for r in recs}, running=running or [],
                           config=ServingConfig(mode=mode, max_num_seqs=4), cost=COST, step_mode=mode == "step",
                           journal=Journal(), can_reject=True)


def f32(x: float) -> float:
    return float(np.float32(x))


def test_layout_is_named_and_pinned() -> None:
    assert OBS_DIM == len(FEATURE_NAMES) == 149 == len(set(FEATURE_NAMES))
    assert SCHEMA_VERSION == "dit-batch-obs/2"
    assert FEATURE_NAMES[0] == "queue/realtime/image" and FEATURE_NAMES[36] == "gpu_known"
    assert FEATURE_NAMES[37] == "top0/class_realtime" and FEATURE_NAMES[-1] == f"top{TOP_K - 1}/valid"


def test_queue_counts_work_slack_and_wait() -> None:
    recs = [rec(0, 0.0, "realtime"), rec(1, 1.0, "realtime", size=1024), rec(2, 2.0, "background", "audio"),
            rec(3, 3.0, "batch", slo_scale=1.5)]
    now = 4.0
    obs = ObservationEncoder().encode(state(recs, now), GPU)
    assert obs.dtype == np.float32 and obs.shape == (OBS_DIM,)
    assert obs[IX["queue/realtime/image"]] == f32(math.log1p(2))
    assert obs[IX["queue/background/audio"]] == f32(math.log1p(1))
    assert obs[IX["queue/batch/image"]] == f32(math.log1p(1))
    assert obs[IX["queue/batch/video"]] == 0.0
    work_rt = recs[0].work_s + recs[1].work_s
    assert obs[IX["work/realtime"]] == pytest.approx(math.log1p(work_rt / WORK_SCALE_S), rel=1e-6)
    slack = [(r.deadline_s - now - r.work_s) / r.work_s for r in recs[:2]]
    assert obs[IX["min_slack/realtime"]] == pytest.approx(math.asinh(min(slack)), rel=1e-6)
    assert obs[IX["oldest_wait/realtime"]] == pytest.approx(math.log1p(now / WAIT_SCALE_S), rel=1e-6)
    assert obs[IX["candidates"]] == f32(math.log1p(4)) and obs[IX["running"]] == 0.0
    assert obs[IX["distinct_keys"]] == f32(math.log1p(3))
    assert obs[IX["gpu_memory"]] == 0.5 and obs[IX["gpu_compute"]] == 0.5 and obs[IX["gpu_known"]] == 1.0


def test_top_k_is_most_urgent_first_with_one_hots() -> None:
    recs = [rec(i, float(i), "background", slo_scale=10.0) for i in range(10)]
    recs.append(rec(10, 9.0, "realtime", slo_scale=2.0))  # the tightest slack
    encoder = ObservationEncoder()
    st = state(recs, 9.0)
    obs = encoder.encode(st, GPU)
    n = min(TOP_K, len(encoder.policy.candidates(st)[0]))  # per key the first `cap` of each class
    assert n >= 4
    slot = obs[IX["top0/class_realtime"]:].reshape(TOP_K, -1)
    assert slot[0, :3].tolist() == [1, 0, 0] and slot[0, 3:7].tolist() == [1, 0, 0, 0]
    assert (slot[1:n, 2] == 1).all()  # then background, oldest (least slack) first
    waits = slot[1:n, 9]
    assert (np.diff(waits) <= 0).all()
    assert (slot[:n, -1] == 1).all() and (slot[n:, -1] == 0).all()  # the candidates' slots are valid
    assert obs[IX["top0/key_count"]] == f32(math.log1p(11)) and obs[IX["top3/same_key_as_top0"]] == 1.0


def test_late_requests_rank_after_savable_ones() -> None:
    late = rec(0, 0.0, "realtime")
    fresh = rec(1, 99.0, "background", slo_scale=10.0)
    obs = ObservationEncoder().encode(state([late, fresh], 100.0), GPU)
    assert obs[IX["top0/class_background"]] == 1.0 and obs[IX["top1/class_realtime"]] == 1.0
    assert obs[IX["top1/slack"]] < 0 < obs[IX["top0/slack"]]


def test_empty_queue_and_unknown_telemetry() -> None:
    obs = ObservationEncoder().encode(state([], 5.0), UNKNOWN)
    assert np.array_equal(obs, ObservationEncoder().encode(state([], 5.0)))
    assert np.isfinite(obs).all()
    assert obs[IX["min_slack/batch"]] == 5.0 and obs[IX["slo_ewma/batch"]] == 1.0
    assert obs[IX["gpu_known"]] == 0.0 and obs[IX["gpu_memory"]] == 0.0
    assert not obs[IX["top0/class_realtime"]:].any()


def test_step_mode_marks_running_candidates() -> None:
    running = rec(0, 0.0, step_mode=True)
    running.status, running.steps_done = RUNNING, 20
    waiting = rec(1, 1.0, step_mode=True)
    enc = ObservationEncoder()
    obs = enc.encode(state([waiting], 2.0, "step", [running]), GPU)
    assert obs[IX["step_mode"]] == 1.0 and obs[IX["running"]] == f32(math.log1p(1))
    assert obs[IX["queue/batch/image"]] == f32(math.log1p(2))
    slot = obs[IX["top0/class_realtime"]:].reshape(TOP_K, -1)
    assert sorted(slot[:2, 11].tolist()) == [0.0, 1.0]
    assert enc.slack_s[1] == running.deadline_s - 2.0 - running.remaining_s  # bit for bit


def test_bounds_hold_for_extreme_states() -> None:
    recs = [rec(i, 0.0, "realtime") for i in range(300)] + [rec(300, 0.0, slo_scale=math.inf)]
    bad = TelemetrySample(math.nan, 0.0, math.inf, -math.inf)
    obs = ObservationEncoder().encode(state(recs, 1e7), bad)
    assert np.isfinite(obs).all() and obs.min() >= -5 and obs.max() <= 5
    assert obs[IX["queue/realtime/image"]] == 5.0  # log1p(300) saturates


def test_history_is_order_independent_and_decays() -> None:
    a, b = ClassHistory(), ClassHistory()
    a.note_arrival(10.0, 0, 30.0)
    a.note_arrival(20.0, 0, 60.0)
    b.note_arrival(20.0, 0, 60.0)
    b.note_arrival(10.0, 0, 30.0)
    assert a.features(50.0)[0] == pytest.approx(b.features(50.0)[0], rel=1e-12)
    assert a.features(50.0)[0] > a.features(5000.0)[0] > 0
    a.note_finish(2, met=False)
    assert a.features(5000.0)[5] == pytest.approx(0.95)


def test_encoder_imports_without_gymnasium_or_torch() -> None:
    code = ("import sys; sys.modules['gymnasium'] = None; sys.modules['torch'] = None\n"
            "from rlsched.learned.observation import ObservationEncoder, OBS_DIM\n"
            "import rlsched.envs; assert 'rlsched.envs.dit_batch' not in sys.modules\n"
            "print(OBS_DIM)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(OBS_DIM)
