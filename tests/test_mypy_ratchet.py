"""``scripts/mypy_ratchet.py`` (``make typecheck``): the counts it reads and the rule it holds (mypy itself runs
in ``make typecheck``, not here)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("mypy_ratchet", ROOT / "scripts" / "mypy_ratchet.py")
ratchet = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(ratchet)  # type: ignore[union-attr]


def test_the_summary_line_is_read_and_anything_else_refused() -> None:
    summary = "a.py:1: error: x  [misc]\nFound 86 errors in 31 files (checked 155 source files)\n"
    assert ratchet.mypy_errors(summary) == 86
    assert ratchet.mypy_errors("Found 1 error in 1 file (checked 2 source files)\n") == 1
    assert ratchet.mypy_errors("Success: no issues found in 155 source files\n") == 0
    with pytest.raises(ValueError, match="not a mypy summary"):
        ratchet.mypy_errors("mypy: can't read file 'rlsched': No such file or directory\n")


def test_a_count_may_fall_but_not_rise(tmp_path: Path) -> None:
    base = {"errors": 86, "type_ignores": 69}
    assert ratchet.compare({"errors": 80, "type_ignores": 69}, base) == []
    rose = ratchet.compare({"errors": 87, "type_ignores": 60}, base)
    assert len(rose) == 1 and rose[0].startswith("errors: 87 > 86")
    (tmp_path / "m.py").write_text("x = 1  # type: ignore[assignment]\ny = 2  #type:ignore\nz = 'type: ignore'\n")
    assert ratchet.type_ignores(tmp_path) == 2


def test_the_baseline_holds_both_counts_and_the_pin_matches_it() -> None:
    base = json.loads(ratchet.BASELINE.read_text())
    assert set(base) == {"errors", "type_ignores"} and all(isinstance(v, int) and v >= 0 for v in base.values())
    assert ratchet.type_ignores(ROOT / "rlsched") <= base["type_ignores"], "more `type: ignore` than the baseline"
    assert '"mypy==' in (ROOT / "pyproject.toml").read_text()  # a count means the same with one mypy
