"""``extras.rlsched_router`` (``RouterConfig.from_extras``), property-tested as ``extras.rlsched`` is
(tests/property/test_plugin_surface.py; issue 47): every numeric setting drawn just inside, at and just
outside its range in the table of bounds, of the wrong kind, with unknown and non-string keys. Refused
with a ``ConfigError`` naming ``extras.rlsched_router`` and a setting drawn, or a config whose every number
lies in its bound and whose budget is at most its deadline."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import ROUTER_NUMBERS, RouterConfig
from tests.property.hostile import WRONG_KIND, around

SETTINGS = [*sorted([*ROUTER_NUMBERS, "router", "policy", "decision_thread", "stray"]), 7]  # 7: a key not a string


def setting(name: Any) -> st.SearchStrategy[Any]:
    if name in ROUTER_NUMBERS:
        return around(ROUTER_NUMBERS[name])
    return st.one_of(st.sampled_from(["rlsched", "least-work", "central", "round-robin", "edf", "fifo", "engine",
                                      "worker", "", "x", "rlsched;view=replica"]), WRONG_KIND)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(SETTINGS), unique=True, min_size=1, max_size=3), st.data())
def test_hostile_router_extras_are_refused_naming_a_setting_or_configure_within_bounds(
        names: list[Any], data: st.DataObject) -> None:
    section = {name: data.draw(setting(name), label=str(name)) for name in names}
    try:
        cfg = RouterConfig.from_extras({"rlsched_router": section}, {})
    except ConfigError as exc:
        assert exc.where.startswith("extras.rlsched_router"), exc
        assert any(str(name) in str(exc) for name in [*names, "router", "deadline_ms"]), (section, exc)
        event("refused")
        return
    if cfg is None:
        assert not section
        return
    for name, bound in ROUTER_NUMBERS.items():
        assert bound.holds(getattr(cfg, name)) and not isinstance(getattr(cfg, name), bool), name
    assert cfg.budget_ms <= cfg.deadline_ms
    event("configured")
