"""Every pinned published measurement is reproduced within 10 %."""

from pathlib import Path

import pytest
import yaml

from rlsched.sim import Request, load_profile

PINS = yaml.safe_load((Path(__file__).parents[1] / "data" / "calibration_pins.yaml").read_text())
TOL = 0.10


def _req(model: str, h: int, w: int, frames: int, steps: int, cfg: bool, rid: int = 0) -> Request:
    return Request(rid, 0.0, model, "image", h, w, frames, steps, cfg, "batch", 1e9)


@pytest.mark.parametrize("height,batch,seconds", PINS["qwen_image_h200_step_s"]["table"])
def test_qwen_image_batch_table(height: int, batch: int, seconds: float) -> None:
    pin = PINS["qwen_image_h200_step_s"]
    cost = load_profile(pin["profile"])
    recs = [cost.record(_req(pin["model"], height, height, 1, 50, True, i)) for i in range(batch)]
    assert cost.batch_step_time(recs) == pytest.approx(seconds, rel=TOL)


@pytest.mark.parametrize("pin", PINS["per_step_totals"], ids=lambda p: p["profile"])
def test_single_request_per_step(pin: dict) -> None:
    cost = load_profile(pin["profile"])
    rec = cost.record(_req(pin["model"], pin["height"], pin["width"], pin["frames"], pin["steps"], pin["cfg"]))
    assert rec.work_s / pin["steps"] == pytest.approx(pin["per_step_s"], rel=TOL)
    if "peak_gb" in pin:
        assert cost.batch_memory_gb([rec]) == pytest.approx(pin["peak_gb"], rel=TOL)


@pytest.mark.parametrize("name", ["qwen-image-h200", "flux1-dev-h100", "wan21-t2v-14b-h100",
                                  "hunyuanvideo-h100", "omni-h200"])
def test_every_profile_names_sources(name: str) -> None:
    assert load_profile(name).sources


def test_batching_pays_only_for_small_images() -> None:
    cost = load_profile("qwen-image-h200")
    small = [cost.record(_req("qwen-image", 512, 512, 1, 50, True, i)) for i in range(4)]
    big = [cost.record(_req("qwen-image", 1024, 1024, 1, 50, True, i)) for i in range(2)]
    assert cost.batch_step_time(small) < 2 * cost.batch_step_time(small[:1])
    assert cost.batch_step_time(big) > 1.8 * cost.batch_step_time(big[:1])
