"""``extras.rlsched.publish_state`` and the replica's published state (``publish.StatePublisher``), without
vLLM (the engine side: tests/vllm/test_publish.py)."""

from __future__ import annotations

import pytest

from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.publish import CARRIER_KEY, StatePublisher
from rlsched.routing.views import MAX_LISTED, ReplicaState


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_publish_state_is_off_by_default_and_must_be_a_bool() -> None:
    assert PluginConfig().publish_state is False
    assert PluginConfig.from_extras({"rlsched": {"publish_state": True}}, {}).publish_state is True
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigError, match=r"extras\.rlsched\.publish_state"):
            PluginConfig(publish_state=bad)  # type: ignore[arg-type]
    assert PluginConfig(publish_state=True).to_extras() == {"rlsched": {"publish_state": True}}


def test_remaining_is_taken_on_the_plugin_clock_when_the_message_is_built() -> None:
    clock = Clock(50.0)
    pub = StatePublisher(clock)
    assert pub.message() is None
    state = pub.update([("a", 3), ("b", 0)], end_s=52.0)
    msg = pub.message()
    assert msg == {"v": 1, "seq": 0, "remaining_s": 2.0, "running": [["a", 3], ["b", 0]], "finished": [],
                   "preempted": []}
    clock.t = 51.5
    assert pub.message(state, carrier=True) == {**msg, "remaining_s": 0.5, CARRIER_KEY: True}
    clock.t = 60.0
    assert pub.message()["remaining_s"] == 0.0  # past the predicted end
    assert pub.update([], end_s=60.0, finished=["a", "b"]).seq == 1
    assert pub.message()["remaining_s"] == 0.0
    assert ReplicaState.read(pub.message(carrier=True)).finished == ("a", "b")


def test_what_an_unsent_state_listed_travels_with_the_next() -> None:
    pub = StatePublisher(Clock())
    pub.update([("b", 2)], 1.0, finished=["a"], preempted=[("c", 4)])  # replaced before any output carried it
    pub.update([("d", 0)], 1.0, finished=["b"], preempted=[("c", 5)])
    msg = pub.message()
    assert (msg["seq"], msg["finished"], msg["preempted"]) == (1, ["a", "b"], [["c", 5]])
    pub.update([], 1.0, finished=["d"])  # the one before was sent: only its own news
    msg = pub.message()
    assert (msg["seq"], msg["finished"], msg["preempted"]) == (2, ["d"], [])


def test_a_state_never_lists_more_than_the_router_reads() -> None:
    pub = StatePublisher(Clock())
    for i in range(3):  # never sent: the lists grow, capped at the newest MAX_LISTED
        pub.update([], 0.0, finished=[f"r{i}-{j}" for j in range(MAX_LISTED)])
    msg = pub.message()
    assert len(msg["finished"]) == MAX_LISTED and msg["finished"][-1] == f"r2-{MAX_LISTED - 1}"
    ReplicaState.read(msg)


def test_the_calibration_taken_with_a_state_travels_with_it() -> None:
    pub = StatePublisher(Clock(0.0))
    cal = (2, (("qwen-image", 1.3, 1.0, 1.0),))
    pub.update([("a", 0)], end_s=1.0, calibration=cal)
    msg = pub.message()
    assert msg is not None and msg["cal"] == {"version": 2, "scales": {"qwen-image": [1.3, 1.0, 1.0]}}
    assert ReplicaState.read(msg).calibration == cal
    pub.update([("b", 0)], end_s=2.0)
    assert "cal" not in (pub.message() or {})  # as shipped: nothing to say
