"""docs/simulator.md's fidelity table is what ``scripts/fidelity_table.py`` prints today: every row of
every shipped measurement set, multi-GPU rows with their parallelism."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_holds_the_scripts_table() -> None:
    spec = importlib.util.spec_from_file_location("fidelity_table", ROOT / "scripts" / "fidelity_table.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.markdown()
    assert table in (ROOT / "docs" / "simulator.md").read_text()
    assert "Ulysses" in table and len(table.splitlines()) > 60
