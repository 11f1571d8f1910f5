"""Each arrival-count and shape-size message of docs/errors.md, triggered by the smallest workload that
earns it and naming the field (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlsched.errors import ConfigError
from rlsched.sim import workload as wl
from rlsched.sim.scenario import ClassSpec, scenario_from_dict

GOOD: dict[str, Any] = {
    "name": "x", "profile": "qwen-image-h200", "duration_s": 60,
    "arrival": {"process": "poisson", "rate_rps": 0.5},
    "classes": {"batch": {"share": 1, "slo_scale": 3}},
    "mix": [{"model": "qwen-image", "modality": "image", "height": 512, "width": 512, "steps": 4}],
}


def test_too_many_arrivals_are_refused_before_drawing() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="arrival.rate_rps") as err:
        wl.poisson(rng, 1e9, 1e9)
    assert "requests (more than 20,000,000)" in str(err.value)
    data = copy.deepcopy(GOOD) | {"duration_s": 1e9, "arrival": {"process": "poisson", "rate_rps": 1e6}}
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(data, "x.yaml").requests(seed=0)
    assert "requests (more than 20,000,000)" in str(err.value)


def test_servegen_rates_past_the_arrival_bound(tmp_path: Path) -> None:
    path = tmp_path / "sg.csv"
    path.write_text("0,1000,1,gamma\n")
    with pytest.raises(ConfigError, match="arrival.rate_scale") as err:
        wl.servegen(np.random.default_rng(0), path, 1e6, rate_scale=1e3)
    assert "requests (more than 20,000,000)" in str(err.value)


def test_a_renewal_process_that_never_covers_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wl, "MAX_DRAWN", 100)
    monkeypatch.setattr(wl, "_gaps", lambda rng, dist, cv, n: np.zeros(n))  # gaps that never add up
    with pytest.raises(ConfigError, match="arrival.cv") as err:
        wl.renewal(np.random.default_rng(0), 1.0, 5.0, cv=100.0, dist="gamma")
    assert "gaps without covering" in str(err.value)


def test_onoff_and_diurnal_settings_in_the_library() -> None:
    with pytest.raises(ConfigError, match="arrival.on_s") as err:
        wl.check_periods(1e9, 1e-3, 1e-3)
    assert "on/off sojourns in" in str(err.value)
    with pytest.raises(ConfigError, match="arrival.amplitude: must be in \\[0, 1]"):
        wl.diurnal(np.random.default_rng(0), 1.0, 10.0, amplitude=2.0)


def test_a_shape_no_gpu_holds_is_refused_up_front() -> None:
    data = copy.deepcopy(GOOD)
    data["mix"][0] |= {"height": 20000, "width": 20000}
    with pytest.raises(ConfigError, match=r"x\.yaml: mix\[0\]: invalid request field 'shape'") as err:
        scenario_from_dict(data, "x.yaml").requests(seed=0)
    assert "GB of GPU memory left after the model weights" in str(err.value)


def test_an_slo_past_float_range_names_the_class() -> None:
    """Reachable from the library only (the schema bounds slo_scale at 1e6)."""
    data = copy.deepcopy(GOOD)
    data["mix"][0] |= {"height": 1024, "width": 1024, "steps": 50}  # a standalone time over 1 s
    sc = scenario_from_dict(data, "x.yaml")
    sc = dataclasses.replace(sc, classes={"batch": ClassSpec(1.0, 1e308)})
    with pytest.raises(ConfigError, match="classes.batch.slo_scale") as err:
        sc.requests(seed=0)
    assert "s (must be finite and > 0" in str(err.value)
