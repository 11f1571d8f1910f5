"""Late binding's look-ahead teachers (``POLICY@central-lookahead``, ``@central-hindsight``): specs, the
options they try (the central policy's candidate batches and holding the freed replica), their choice."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlsched.errors import ConfigError
from rlsched.policies import make_policy
from rlsched.routing.routers import central_policies, check_spec, is_late, router_kind, run_spec
from rlsched.routing.teachers import CentralLookahead
from rlsched.sim import Request, ServingConfig, load_profile
from rlsched.sim.stage import Hold, ReplicaSpec, Stage
from tests.sim.test_stage import outcome, replicas, workload

STATIC = "static:agents/tuned/default.json"


def slow_then_fast() -> list[ReplicaSpec]:
    """An A100 (replica 0, first served) and an H200: two kinds, two central views."""
    serving = ServingConfig("request", 4)
    return [ReplicaSpec("a100", load_profile("qwen-image-a100-vllm-omni"), serving),
            ReplicaSpec("h200", load_profile("qwen-image-h200"), serving)]


def test_holding_a_freed_slow_replica_for_a_faster_one_saves_the_urgent_request() -> None:
    # X keeps the A100 busy to 5.2 s, Y the H200 to 9.0 s; C (realtime, due at 16 s) waits centrally. At 5.2 s
    # EDF hands C to the freed A100 (18.3 s there: late); held, the A100 leaves C to the H200 (5.2 s: met)
    reqs = [Request(0, 0.0, "qwen-image", "image", 512, 512, 1, 20, True, "batch", 600.0),
            Request(1, 0.01, "qwen-image", "image", 1328, 1328, 1, 20, True, "batch", 600.0),
            Request(2, 1.0, "qwen-image", "image", 1024, 1024, 1, 20, True, "realtime", 15.0)]
    base = run_spec(Stage(reqs, slow_then_fast()), "edf@central")
    assert base.routed == {0: 0, 1: 1, 2: 0} and not base.records[2].slo_met
    teachers: list[CentralLookahead] = []
    made = central_policies("central-lookahead:60", "edf")

    def make() -> Any:
        teachers.append(made())  # type: ignore[arg-type]
        return teachers[-1]

    stage = Stage(reqs, slow_then_fast()).run([make_policy("fifo"), make_policy("fifo")], central=make)
    assert stage.routed == {0: 0, 1: 1, 2: 1} and all(r.slo_met for r in stage.records.values())
    assert sum(t.held for t in teachers) == 1 and sum(t.changed for t in teachers) == 1
    # without the hold option the teacher has nothing else to try behind EDF: it is EDF
    plain = run_spec(Stage(reqs, slow_then_fast()), "edf@central-lookahead:60;hold=0")
    assert outcome(plain.records) == outcome(base.records)


class Probe(CentralLookahead):
    """The realizable teacher recording, at each look, its options, their scores and its choice."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.looks: list[tuple[list[Any], list[float], Any]] = []

    def value(self, stage: Stage, decision: Any) -> float:
        score = super().value(stage, decision)
        if not self.looks or self.looks[-1][2] is not None:
            self.looks.append(([], [], None))
        self.looks[-1][0].append(decision)
        self.looks[-1][1].append(score)
        return score

    def decide(self, state: Any) -> Any:
        decision = super().decide(state)
        if self.looks and self.looks[-1][2] is None:
            self.looks[-1] = (self.looks[-1][0], self.looks[-1][1], decision)
        return decision


def test_the_teacher_starts_the_best_scoring_option_ties_to_the_proposal() -> None:
    reqs = workload(120, seed=3, rate=1.6)
    probes: list[Probe] = []

    def make() -> Probe:
        probes.append(Probe(STATIC, horizon_s=90.0, hold_s=5.0))
        return probes[-1]

    Stage(reqs, replicas(3)).run([make_policy("fifo") for _ in range(3)], central=make)
    looks = probes[0].looks
    assert len(looks) > 10
    for options, scores, chosen in looks:
        assert isinstance(options[-1], Hold) and not options[-1].batch  # holding is always an option
        assert chosen == options[int(np.argmax(scores))]
    assert probes[0].changed == sum(chosen != options[0] for options, _, chosen in looks) > 0
    assert probes[0].forks == sum(len(options) for options, _, _ in looks)


def test_specs_name_what_is_wrong() -> None:
    assert is_late("central-lookahead:60;hold=2") and is_late("central") and not is_late("rlsched")
    assert router_kind("central-hindsight") == "teacher" and router_kind("central") == "central"
    check_spec(f"{STATIC}@central-hindsight:30")
    check_spec(f"{STATIC}@central-replay:30;hold=0")
    assert router_kind("central-replay") == "teacher" and is_late("central-replay")
    with pytest.raises(ConfigError, match=r"takes only the option hold=SECONDS \(got top\)"):
        check_spec("edf@central-lookahead;top=3")
    with pytest.raises(ConfigError, match="the horizon must be a number of seconds, not 'x'"):
        check_spec("edf@central-lookahead:x")
    with pytest.raises(ConfigError, match=r"hold must be a number of seconds >= 0 \(0: never hold\), not -1"):
        check_spec("edf@central-lookahead:60;hold=-1")
    with pytest.raises(ConfigError, match="the horizon must be a number of seconds > 0"):
        check_spec("edf@central-hindsight:0")
