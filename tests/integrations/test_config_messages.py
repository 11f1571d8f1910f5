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


# ------------------------------------------------------------------ extras.rlsched_router (issue 47)
@pytest.mark.parametrize("section, where, message", [
    # a typo of `router` silently left the stage unrouted
    ({"routr": "least-work"}, "extras.rlsched_router", "unknown keys ['routr']"),
    ({"budget_ms": 3.0}, "extras.rlsched_router.router", "missing: the section sets ['budget_ms'] but names no router "
                                                         "(or set RLSCHED_ROUTER); without one the stage would not be "
                                                         "routed"),
    # keys of mixed types: sorting them raised a TypeError
    ({"router": "rlsched", 1: "x", "oops": 2}, "extras.rlsched_router", "unknown keys [1, 'oops']"),
    ({1: "x", "oops": 2}, "extras.rlsched_router", "unknown keys [1, 'oops']"),
    ({"router": "rlsched", "budget_ms": 80.0}, "extras.rlsched_router.budget_ms",
     "80 exceeds deadline_ms 50: a decision is cut off at the deadline, so the budget must be <= it"),
    ({"router": "rlsched", "budget_ms": 10, "deadline_ms": 5}, "extras.rlsched_router.budget_ms",
     "10 exceeds deadline_ms 5"),
    ({"router": "leastwork"}, "extras.rlsched_router.router", "unknown router 'leastwork'"),
    ({"router": "central", "policy": "edff"}, "extras.rlsched_router.policy", "unknown policy 'edff'"),
    ({"router": 7}, "extras.rlsched_router.router", "must be a router spec, not 7"),
    ({"router": "central", "policy": ["edf"]}, "extras.rlsched_router.policy", "must be a policy spec, not ['edf']"),
])
def test_the_router_section_is_validated_like_the_plugins(section: dict, where: str, message: str) -> None:
    from rlsched.integrations.vllm_omni.config import RouterConfig

    with pytest.raises(ConfigError) as err:
        RouterConfig.from_extras({"rlsched_router": section}, {})
    assert err.value.where == where and message in str(err.value)


def test_a_missing_router_checkpoint_names_its_key(tmp_path) -> None:
    from rlsched.errors import CheckpointError
    from rlsched.integrations.vllm_omni.config import RouterConfig

    for section, key in (({"router": f"router:{tmp_path}"}, "router"),
                         ({"router": "central", "policy": f"rl:{tmp_path}/none"}, "policy")):
        with pytest.raises(CheckpointError, match=f"^extras.rlsched_router.{key}: "):
            RouterConfig.from_extras({"rlsched_router": section}, {})


def test_the_router_section_reads_as_before() -> None:
    from rlsched.integrations.vllm_omni.config import RouterConfig

    assert RouterConfig.from_extras({"rlsched_router": {}}, {}) is None
    assert RouterConfig.from_extras({}, {"RLSCHED_ROUTER": "least-work"}).router == "least-work"
    cfg = RouterConfig.from_extras({"rlsched_router": {"router": "central", "policy": "edf", "budget_ms": 50}}, {})
    assert (cfg.central, cfg.policy, cfg.budget_ms, cfg.deadline_ms) == (True, "edf", 50.0, 50.0)
    with pytest.raises(ConfigError, match="extras.rlsched_router"):  # the constructor refuses as from_extras does
        RouterConfig(router="rlsched", oops=1)


@pytest.mark.parametrize("section", [{"decision_budget_ms": 200.0}, {"decision_deadline_ms": 2.0},
                                     {"decision_budget_ms": 10, "decision_deadline_ms": 9}])
def test_a_plugin_budget_above_its_deadline_is_refused(section: dict) -> None:
    with pytest.raises(ConfigError) as err:
        PluginConfig.from_extras({"rlsched": section}, {})
    assert err.value.where == "extras.rlsched.decision_budget_ms" and "exceeds decision_deadline_ms" in str(err.value)
