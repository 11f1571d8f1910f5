"""The plugin's two input surfaces, property-tested without vLLM (issue 34):

* ``extras.rlsched`` (a deploy config's settings, ``PluginConfig.from_extras``): every numeric
  setting drawn just inside, at and just outside its range in the table of bounds, of the wrong
  kind, with unknown keys and non-mapping sections. Refused with a ``ConfigError`` that names
  ``extras.rlsched`` and the setting, or a config whose every number lies in its bound and
  that reproduces itself through ``to_extras``.
* HTTP requests (vLLM sampling params and their ``extra_args``: ``read_request``, ``make_request``,
  ``PluginState.add``): every field hostile. A request is never refused and never raises: each
  unusable field takes its default and is counted in ``invalid``, every request is tracked, and
  each one ends exactly once (``on_finish`` once per completed or failed request, none left)."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlsched import bounds
from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import NUMBERS, PluginConfig
from rlsched.integrations.vllm_omni.state import PARKED_KEY, PluginState, make_request, read_request
from rlsched.sim import ServingConfig, load_profile
from rlsched.sim.request import COMPLETED
from tests.property.hostile import WRONG_KIND, around, edges

COST = load_profile("qwen-image-h200")
SETTINGS = sorted([*NUMBERS, "slo_scales", "default_slo_scale", "policy", "default_priority", "decision_thread",
                   "late_binding", "publish_state", "telemetry", "stray"])


def setting(name: str) -> st.SearchStrategy[Any]:
    if name in NUMBERS:
        return around(NUMBERS[name])
    if name == "slo_scales":
        return st.dictionaries(st.sampled_from(["batch", "realtime", "background", "vip"]),
                               around(bounds.SLO_SCALE), max_size=3)
    if name == "default_slo_scale":
        return around(bounds.SLO_SCALE)
    return st.one_of(st.sampled_from(["fifo", "edf", "batch", "realtime", "engine", "worker", "auto", "", "x"]),
                     WRONG_KIND)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(SETTINGS), unique=True, min_size=1, max_size=3), st.data())
def test_hostile_extras_are_refused_naming_the_setting_or_configure_within_bounds(
        names: list[str], data: st.DataObject) -> None:
    section = {name: data.draw(setting(name), label=name) for name in names}
    try:
        cfg = PluginConfig.from_extras({"rlsched": section}, {})
    except ConfigError as exc:
        assert exc.where.startswith("extras.rlsched"), exc
        assert any(name in str(exc) for name in names), (section, exc)
        event("refused")
        return
    for name, bound in NUMBERS.items():
        assert bound.holds(getattr(cfg, name)) and not isinstance(getattr(cfg, name), bool), name
    assert all(bounds.SLO_SCALE.holds(v) for v in cfg.slo_scales.values())
    assert PluginConfig.from_extras(cfg.to_extras(), {}) == cfg
    event("configured")


@settings(max_examples=25, deadline=None)
@given(st.one_of(WRONG_KIND, st.lists(st.text(max_size=3), max_size=2)))
def test_an_extras_section_that_is_not_a_mapping_is_refused(section: Any) -> None:
    try:
        PluginConfig.from_extras({"rlsched": section}, {})
    except ConfigError as exc:
        assert exc.where == "extras.rlsched", exc
    else:
        assert section is None or section == {}  # no settings: the defaults


class Hostile:
    """Sampling params whose every attribute read raises (a broken or proxied object)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"cannot read {name}")


def _field(bound: bounds.Bound) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.sampled_from(edges(bound)), WRONG_KIND)


SAMPLING = st.builds(
    lambda extra, **kw: SimpleNamespace(extra_args=extra, **kw),
    extra=st.one_of(WRONG_KIND, st.fixed_dictionaries({}, optional={
        "priority": st.one_of(st.sampled_from(["batch", " Realtime ", "vip", ""]), WRONG_KIND),
        "slo_ms": _field(bounds.POSITIVE), PARKED_KEY: _field(bounds.MILLIS)})),
    height=_field(bounds.SIDE_PX), width=_field(bounds.SIDE_PX), num_frames=_field(bounds.FRAMES),
    num_inference_steps=_field(bounds.STEPS),
    timesteps=st.one_of(st.none(), st.lists(st.floats(allow_nan=True), max_size=4), st.just(3.0)),
    sigmas=st.one_of(st.none(), st.lists(st.integers(), max_size=3)),
    do_classifier_free_guidance=st.one_of(st.booleans(), WRONG_KIND),
    guidance_scale=_field(bounds.CFG_PASSES), true_cfg_scale=_field(bounds.CFG_PASSES),
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(SAMPLING, st.just(Hostile()), st.none()), min_size=1, max_size=6), st.booleans(),
       st.lists(st.sampled_from(["completed", "failed", "aborted"]), min_size=6, max_size=6))
def test_hostile_requests_are_each_tracked_with_defaults_and_end_exactly_once(
        requests: list[Any], late_binding: bool, outcomes: list[str]) -> None:
    state = PluginState(COST, ServingConfig("request", 4), PluginConfig(telemetry=False, late_binding=late_binding),
                        lambda: 100.0)
    finished: Counter[str] = Counter()
    state.on_finish.append(lambda rec: finished.update([state_names[rec.request.id]]))
    state_names: dict[int, str] = {}
    for i, sampling in enumerate(requests):
        rec, bad = state.add(f"r{i}", sampling, key=i % 2)
        state_names[rec.request.id] = f"r{i}"
        req = rec.request
        assert bounds.SIDE_PX.holds(req.height) and bounds.SIDE_PX.holds(req.width), (sampling, req)
        assert bounds.FRAMES.holds(req.num_frames) and req.num_inference_steps >= 1, (sampling, req)
        assert math.isfinite(rec.deadline_s) and rec.deadline_s >= req.arrival_s >= 0, (sampling, rec)
        assert make_request(i, 100.0, sampling, state.settings, COST).height == req.height
        if sampling is not None and not isinstance(sampling, Hostile):
            assert bad == read_request(sampling, state.settings)[1]
    assert len(state.records) == len(state.waiting) == len(requests)
    state.follow([f"r{i}" for i in range(0, len(requests), 2)])  # some start
    for i in range(len(requests)):
        assert state.finish(f"r{i}", outcomes[i]) is not None
        assert state.finish(f"r{i}", outcomes[i]) is None  # a second report of the same request: nothing
    assert not state.records and not state.waiting and not state.running
    ended = {f"r{i}" for i in range(len(requests)) if outcomes[i] in ("completed", "failed")}
    assert set(finished) == ended and all(n == 1 for n in finished.values()), finished
    event(f"{sum(rec == COMPLETED for rec in outcomes[:len(requests)])} completed")
