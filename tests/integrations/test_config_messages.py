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
