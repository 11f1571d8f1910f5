"""Each ``extras.rlsched`` message of docs/errors.md, triggered by the setting that earns it and naming
it (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import pytest

from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.sim import load_profile


@pytest.mark.parametrize("section, where, message", [
    ({"slo_scales": {"vip": 2}}, "extras.rlsched.slo_scales", "unknown class 'vip'"),
    ({"metrics_port": 65535, "metrics_ports": 2}, "extras.rlsched.metrics_ports",
     "must be an integer >= 1 with metrics_port + metrics_ports - 1 <= 65535, not 2"),
    ({"policy": ""}, "extras.rlsched.policy", "must be a policy spec, not ''"),
    ("edf", "extras.rlsched", "must be a mapping, not str"),
])
def test_a_bad_setting_is_named(section: object, where: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        PluginConfig.from_extras({"rlsched": section}, {})
    assert err.value.where == where and message in str(err.value)


def test_a_default_shape_no_gpu_holds_is_refused() -> None:
    cfg = PluginConfig(telemetry=False, default_height=60000, default_width=60000)
    with pytest.raises(ConfigError, match="extras.rlsched.default_height") as err:
        cfg.check_defaults(load_profile("qwen-image-h200"))
    assert "GB left after the model weights" in str(err.value)


@pytest.mark.parametrize("section, where, message", [
    ({"telemetry": "false"}, "extras.rlsched.telemetry", "must be true or false, not 'false'"),  # was on: truthy
    ({"freeze_gc": 0}, "extras.rlsched.freeze_gc", "must be true or false, not 0"),
    ({"profile": 5}, "extras.rlsched.profile", "Input should be a valid string, not 5"),
    ({"slo_scales": [2.0]}, "extras.rlsched.slo_scales", "Input should be a valid dictionary"),  # was AttributeError
    ({"default_width": "512"}, "extras.rlsched.default_width", "must be an integer >= 1 and <= 1000000, not '512'"),
    ({"polcy": "edf", "metrics_prot": 1}, "extras.rlsched", "unknown keys ['metrics_prot', 'polcy']"),
])
def test_the_model_refuses_what_the_hand_written_checks_let_through(section: dict, where: str, message: str) -> None:
    """The pydantic model checks every setting's type (a string "false" turned NVML telemetry on, a
    list of scales failed with an AttributeError) and refuses unknown keys in the constructor too;
    each refusal is a ConfigError naming the setting, never a pydantic ValidationError."""
    for build in (lambda: PluginConfig.from_extras({"rlsched": section}, {}), lambda: PluginConfig(**section)):
        with pytest.raises(ConfigError) as err:
            build()
        assert err.value.where == where and message in str(err.value)
