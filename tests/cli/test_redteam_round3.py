"""The third reliability round's command-line examples (scripts/redteam_round3.py) each end in a typed
refusal naming what was wrong, or a correct run: none in a traceback, a hang or a wrong result."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "redteam_round3", Path(__file__).resolve().parents[2] / "scripts" / "redteam_round3.py")
assert _SPEC is not None and _SPEC.loader is not None
redteam = sys.modules[_SPEC.name] = importlib.util.module_from_spec(_SPEC)  # its dataclasses look it up
_SPEC.loader.exec_module(redteam)


@pytest.mark.parametrize("case", redteam.CASES, ids=[c.name for c in redteam.CASES])
def test_each_example_is_refused_by_name_or_runs(case) -> None:  # type: ignore[no-untyped-def]
    outcome, _, line = redteam.run(case, timeout_s=120)
    assert outcome.startswith("ok"), (outcome, line)
