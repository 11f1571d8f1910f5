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
     "must be a mapping with slo_scale (and optional weight, tier"),
    ({"classes": {"paid": {"slo_scale": 2, "quota": 1}}}, "extras.rlsched.classes.paid", "unknown keys ['quota']"),
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
