"""A stage spec is parsed in one place (``rlsched.routing.spec.StageSpec.parse``) and travels parsed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rlsched.errors import ConfigError
from rlsched.evaluation import RunSpec
from rlsched.planning import Layout, deploy_command
from rlsched.routing import routers, spec
from rlsched.routing.spec import StageSpec
from rlsched.sim import ServingConfig

ROOT = Path(__file__).resolve().parents[1] / "rlsched"


def _calls(name: str) -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called == name:
                    out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    return out


def test_the_split_rule_is_in_the_spec_module_only() -> None:
    # the package passes StageSpec: split_pair is kept for scripts, and only the spec module calls the rule
    assert _calls("split_pair") == []
    assert {c.split(":")[0] for c in _calls("_split")} == {"rlsched/routing/spec.py"}
    splits = [c for c in _calls("rpartition") if "spec.py" not in c]
    assert not any("routers.py" in c or "runs.py" in c or "planning.py" in c for c in splits), splits


def test_one_stage_spec_everywhere() -> None:
    import rlsched.evaluation as evaluation

    assert evaluation.StageSpec is StageSpec
    assert routers.ROUTERS is spec.ROUTERS and routers.split_view is spec.split_view


def test_a_run_parses_its_spec_once() -> None:
    run = RunSpec("default", "edf@rlsched;view=replica")
    assert run.stage is run.stage
    assert (run.stage.policy, run.stage.router, run.stage.view, run.staged) == ("edf", "rlsched;view=replica",
                                                                                "replica", True)
    assert run.stage.router_spec is run.stage.router_spec


def test_plan_takes_the_parsed_spec() -> None:
    serving = ServingConfig("step", 8)
    parsed = deploy_command(Layout(2, 2), 4, StageSpec.parse("edf@least-work"), "p", serving)
    assert parsed == deploy_command(Layout(2, 2), 4, "edf@least-work", "p", serving)
    assert "--policy edf --router least-work" in parsed


def test_split_pair_keeps_its_answers_and_errors() -> None:
    assert spec.split_pair("static:runs/v@2/t.json") == ("static:runs/v@2/t.json", "round-robin")
    with pytest.raises(ConfigError, match="expected POLICY@ROUTER"):
        StageSpec.parse("fifo@")
    with pytest.raises(ConfigError, match="unknown router 'nope'"):
        StageSpec.parse("fifo@nope")
