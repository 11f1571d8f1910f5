"""The plugin's own classes (``extras.rlsched.classes``, issue 48) are validated like the rest of its settings:
each refusal a ``ConfigError`` naming the setting."""

from __future__ import annotations

from typing import Any

import pytest

from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig


@pytest.mark.parametrize(("values", "where", "why"), [
    ({"classes": ["paid"]}, "extras.rlsched.classes", "must be a mapping of class names, not"),
    ({"classes": {f"c{i}": {"slo_scale": 2} for i in range(9)}}, "extras.rlsched.classes", "9 classes; at most 8"),
    ({"classes": {"9x": {"slo_scale": 2}}}, "extras.rlsched.classes", "a class name is a letter"),
    ({"classes": {"paid": {"weight": 2}}}, "extras.rlsched.classes.paid",
     "must be a mapping with slo_scale (and optional weight, tier, quota)"),
    ({"classes": {"paid": {"slo_scale": 2, "share": 1}}}, "extras.rlsched.classes.paid", "unknown keys ['share']"),
    ({"classes": {"paid": {"slo_scale": 2, "quota": 0}}}, "extras.rlsched.classes.paid.quota",
     "must be a finite number > 0 and <= 1, not 0"),
    ({"classes": {"paid": {"slo_scale": 2, "quota": 1.5}}}, "extras.rlsched.classes.paid.quota", "not 1.5"),
    ({"classes": {"paid": {"slo_scale": 2, "quota": "half"}}}, "extras.rlsched.classes.paid.quota", "not 'half'"),
    ({"quota_window_s": 0}, "extras.rlsched.quota_window_s", "must be a finite number > 0 and <= 86400, not 0"),
    ({"classes": {"paid": {"slo_scale": 2, "weight": -1}}}, "extras.rlsched.classes.paid.weight", "must be"),
    ({"classes": {"paid": {"slo_scale": 2, "tier": "gold"}}, "default_priority": "paid"},
     "extras.rlsched.classes.paid.tier", "must be one of ('realtime', 'batch', 'background'), not 'gold'"),
    ({"classes": {"paid": {"slo_scale": 2}}}, "extras.rlsched.default_priority",
     "must be one of ('paid',), not 'batch'"),
    ({"classes": {"paid": {"slo_scale": 2}}, "default_priority": "paid", "slo_scales": {"free": 3}},
     "extras.rlsched.slo_scales", "unknown class 'free'"),
])
def test_bad_classes_name_the_setting(values: dict[str, Any], where: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        PluginConfig.from_extras({"rlsched": values})
    assert str(err.value).startswith(f"{where}: ") and why in str(err.value), str(err.value)


def test_the_shipped_classes_stay_the_default() -> None:
    cfg = PluginConfig()
    assert list(cfg.class_table) == ["realtime", "batch", "background"] and cfg.class_of(" RealTime ") == "realtime"
    assert "classes" not in cfg.to_extras()["rlsched"]


def test_quotas_are_read_and_written_back() -> None:
    cfg = PluginConfig.from_extras({"rlsched": {"classes": {"paid": {"slo_scale": 2}, "bulk": {"slo_scale": 20,
                                                                                               "quota": 0.2}},
                                                "default_priority": "paid", "quota_window_s": 120}})
    assert cfg.quotas == (("bulk", 0.2),) and cfg.quota_window_s == 120
    assert PluginConfig.from_extras(cfg.to_extras()) == cfg
    assert PluginConfig().quotas == () and "quota_window_s" not in PluginConfig().to_extras()["rlsched"]
