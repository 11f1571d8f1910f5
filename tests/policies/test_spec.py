"""The policy-spec grammar, the lazy registry and the bounded journal."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlsched.errors import ConfigError
from rlsched.policies import make_policy
from rlsched.policies.base import PolicySpec, parse_spec
from rlsched.sim.queue_index import QueueIndex, by_arrival, by_key
from rlsched.sim.request import Request
from rlsched.sim.view import ENQUEUED, Journal


@pytest.mark.parametrize("text, name, arg, options", [
    ("fifo", "fifo", "", {}),
    ("drr:5", "drr", "5", {}),
    ("static:agents/tuned/default.json;shed_lost=true", "static", "agents/tuned/default.json", {"shed_lost": "true"}),
    ("pick:checkpoints/pick;static=agents/tuned/default.json", "pick", "checkpoints/pick",
     {"static": "agents/tuned/default.json"}),
    ("rl;late_value=0.1", "rl", "", {"late_value": "0.1"}),
])
def test_parse_spec_round_trips(text, name, arg, options) -> None:
    spec = parse_spec(text)
    assert (spec.name, spec.arg, dict(spec.options)) == (name, arg, options)
    assert str(spec) == text and parse_spec(str(spec)) == spec


@pytest.mark.parametrize("text, field", [
    ("static:t.json;shed_lost=true;shed_lost=false", "given twice"),
    ("static:t.json;shed_lost", "expected KEY=VALUE"),
    (":x", "empty policy name"),
    ("nosuch", "unknown policy"),
    ("fifo:3", "takes no argument"),
    ("edf;x=1", "takes no options"),
    ("pick;bogus=1", "pick takes only static"),
])
def test_bad_specs_are_typed_errors(text, field) -> None:
    with pytest.raises(ConfigError, match=field):
        make_policy(text)


def test_a_bare_pick_loads_the_shipped_candidate_policy() -> None:
    """`rlsched simulate --policy pick` failed: a bare pick loaded checkpoints/default (a knob policy)."""
    assert make_policy("pick").name.endswith("checkpoints/pick")
    assert make_policy(PolicySpec("rl")).name.endswith("checkpoints/default")


def test_the_registry_imports_a_policy_only_when_it_is_built() -> None:
    code = ("import sys; from rlsched.policies import make_policy, policy_names\n"
            "assert 'pick' in policy_names(); make_policy('fifo')\n"
            "assert not any(m.startswith('rlsched.learned') for m in sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_reader_behind_a_trimmed_journal_rebuilds_to_the_same_index() -> None:
    from rlsched.sim import load_profile

    cost, journal = load_profile("qwen-image-h200"), Journal(keep=4)
    state = type("S", (), {})()
    state.journal, state.waiting = journal, {}
    index = QueueIndex(by_key, by_arrival)
    index.sync(state)
    for i in range(20):
        rec = cost.record(Request(i, float(i), "qwen-image", "image", 512 * (1 + i % 2), 512, 1, 4, True, "batch", 9.0))
        rec.key = rec.request.key()
        state.waiting[i] = rec
        journal.append(ENQUEUED, rec)
    assert len(journal) < 8 and journal.end == 20 and journal.since(0) is None  # trimmed past the reader
    index.sync(state)  # rebuilt from waiting
    assert len(index) == 20 and journal.since(index._cursor) == []
    fresh = QueueIndex(by_key, by_arrival)
    fresh.sync(state)
    assert {k: g.keys for k, g in index.groups.items()} == {k: g.keys for k, g in fresh.groups.items()}
