"""``rlsched learn`` says when its chosen policy scored exactly as the heuristic it started from in every
validation cell (issue 48: a tiny budget ended with "chosen: imitation@4", +0.0, and no word that the
policy decides as ``static`` does). The recipe itself is replaced by a stand-in returning its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlsched.cli import main
from rlsched.commands.label import as_heuristic

SAME = {"mean": 0.0, "ci95": 0.0, "default": 0.0, "worst_cell": 0.0}
BETTER = {"mean": 0.29, "ci95": 0.26, "default": 0.25, "worst_cell": 0.0}


class _Config:
    def check_inputs(self, where: str) -> None:
        pass


def _stand_in(monkeypatch: pytest.MonkeyPatch, validation: dict[str, dict[str, float]], chosen: str) -> None:
    import rlsched.agents.recipe as recipe

    def learn(cfg: Any, run: Path, out: Path | None, progress: bool) -> dict[str, Any]:
        return {"chosen": chosen, "validation": validation, "total_s": 1.0}

    monkeypatch.setattr(recipe, "recipe_of", lambda path: (lambda *a, **k: _Config(), learn))


@pytest.mark.parametrize("chosen, same", [("imitation@4", True), ("imitation@1", False)])
def test_learn_says_when_its_policy_scored_as_the_heuristic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str], chosen: str,
                                                            same: bool) -> None:
    _stand_in(monkeypatch, {"imitation@4": SAME, "imitation@1": BETTER}, chosen)
    assert main(["learn", "--agent", "agents/pick.yaml", "--run-dir", str(tmp_path / "run")]) == 0
    text = capsys.readouterr().out
    assert f"chosen:      {chosen}" in text
    assert ("decides as that heuristic does" in text) is same
    assert main(["learn", "--agent", "agents/pick.yaml", "--run-dir", str(tmp_path / "run2"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["same_as_heuristic"] is same


def test_only_every_cell_at_zero_is_the_heuristic() -> None:
    assert as_heuristic(SAME)
    assert not as_heuristic({"mean": 0.0, "ci95": 0.4})  # gains and losses that cancel: not the same
    assert not as_heuristic(BETTER) and not as_heuristic({})
