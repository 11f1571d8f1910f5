"""``make help`` lists every target of the Makefile, each with its rough duration (issue 48: it left out
``test-e2e``, and no page said how long ``make test`` takes)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"(~|< ?)?\d+(-\d+)? (s|min)\b|\(not timed\)")


def _targets() -> list[str]:
    """Every target a user runs: ``name:`` rules (a file rule such as ``$(VENV)/.installed`` is not one)."""
    text = (ROOT / "Makefile").read_text()
    return [m for m in re.findall(r"^([a-z][a-z0-9-]*):(?!=)", text, flags=re.MULTILINE) if m != "help"]


def _help() -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def test_help_lists_every_target_with_its_duration() -> None:
    lines = {line.split()[1]: line for line in _help().splitlines() if line.startswith("make ")}
    targets = _targets()
    assert "test-e2e" in targets
    missing, unknown = sorted(set(targets) - set(lines)), sorted(set(lines) - set(targets))
    assert missing == [], f"targets missing from make help: {missing}"
    assert unknown == [], f"make help names targets the Makefile lacks: {unknown}"
    untimed = [t for t, line in lines.items() if not DURATION.search(line)]
    assert untimed == [], f"no duration in make help for {untimed}"


def test_make_test_duration_is_documented() -> None:
    assert re.search(r"`make test` takes ~\d+-\d+ min", (ROOT / "docs" / "architecture.md").read_text())
