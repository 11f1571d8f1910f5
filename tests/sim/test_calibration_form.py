"""The calibration's fixed scale: a GPU whose costs differ in *form* from the profile (issue 46)."""

from __future__ import annotations

import numpy as np
import pytest

from rlsched.profiling.calibrated import calibrated_profile, scales_from_log
from rlsched.routing.views import ReplicaState, replica_state
from rlsched.sim.cost import load_profile, profile_from_dict
from rlsched.sim.online import CostCalibrator
from rlsched.sim.truth import Truth, rescaled
from tests.conftest import make_request

H200, A100 = load_profile("qwen-image-h200-vllm-omni"), load_profile("qwen-image-a100-vllm-omni")
SIZES = (512, 1024, 1536, 768)


def _calibrated(belief, true, batches: int, noise: float = 0.05, seed: int = 0) -> CostCalibrator:
    rng, cal = np.random.default_rng(seed), CostCalibrator(belief)
    for i in range(batches):
        rec = cal.cost.record(make_request(i, size=SIZES[i % len(SIZES)]))
        seconds = true.batch_duration([true.record(rec.request)]) * rng.lognormal(0.0, noise)
        cal.observe("qwen-image", cal.parts([rec], False, 0.0, 0.0, [0]), seconds)
    return cal


def test_an_a100_under_the_h200_profile_is_learned_in_its_fixed_term_too() -> None:
    """The A100 profile is the H200's with its FLOP terms x3.2-3.8 but the same per-forward cost: no pair of
    (time, attention) scales fits it; with the fixed scale every size comes within 12 % inside 100 batches."""
    cal = _calibrated(H200, A100, 100)
    (time, quad, memory, fixed), = cal.scales().values()
    assert time == pytest.approx(3.8, rel=0.05) and fixed == pytest.approx(1 / 3.8, rel=0.25)
    for size in (512, 768, 1024, 1536):
        req = make_request(0, size=size)
        assert cal.cost.standalone_s(req) == pytest.approx(A100.standalone_s(req), rel=0.12), size
    two_scales = rescaled(H200, {"qwen-image": (time, quad, memory)}, "without the fixed scale")
    small = make_request(0, size=512)
    assert abs(two_scales.standalone_s(small) / A100.standalone_s(small) - 1) > 0.25  # what it adds


def test_a_uniformly_slower_gpu_publishes_three_scales_as_before() -> None:
    cal = _calibrated(H200, Truth(time_scale=1.3).apply(H200), 60, noise=0.0)
    assert {m: len(s) for m, s in cal.scales().items()} == {"qwen-image": 3}
    assert cal.scales()["qwen-image"][0] == pytest.approx(1.3, rel=0.01)


def test_the_fixed_scale_travels_in_the_published_state_and_the_log_and_the_written_profile() -> None:
    cal = _calibrated(H200, A100, 100)
    version, scales = cal.published
    wire = replica_state(1, 0.0, [], calibration=cal.published)
    assert ReplicaState.read(wire).calibration == (version, scales) and len(scales[0]) == 5
    t, q, mem, fixed = cal.scales()["qwen-image"]
    line = (f"rlsched: cost profile qwen-image-h200-vllm-omni calibrated, version {version}: qwen-image time "
            f"x{t:.3f}, attention x{q:.3f}, memory x{mem:.3f}, fixed x{fixed:.3f}")
    _, _, logged = scales_from_log(line, "server.log")
    # the log line carries 3 decimals: a fixed scale near 0.26 reads back up to 0.5e-3 / 0.26 = 1.9e-3 off
    assert logged["qwen-image"] == pytest.approx((t, q, mem, fixed), rel=2e-3)
    written = profile_from_dict(calibrated_profile("qwen-image-h200-vllm-omni", logged, "test"), "calibrated")
    assert written.model("qwen-image").a_s == pytest.approx(cal.cost.model("qwen-image").a_s, rel=2e-3)
