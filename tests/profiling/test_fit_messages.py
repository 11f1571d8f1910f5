"""Each ``profile fit`` message of docs/errors.md, triggered by a copy of a shipped measurement set with one
thing wrong in its ``fit.yaml`` or rows (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlsched.errors import ConfigError
from rlsched.profiling.fit import fit_profile
from rlsched.resources import data_dir

SETS = data_dir("envs") / "profiles" / "measurements"


def edited(tmp_path: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of every shipped set (a ``derive`` reads its neighbours), ``name``'s fit.yaml edited."""
    root = tmp_path / "measurements"
    shutil.copytree(SETS, root)
    spec = root / name / "fit.yaml"
    data = yaml.safe_load(spec.read_text())
    edit(data)
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return root / name


def _model(data: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    return data["models"][name or next(iter(data["models"]))]


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("qwen-image-h200", lambda d: d.__setitem__("models", {"other": _model(d) | {"fit": []}}),
     "rows name models not in fit.yaml"),
    ("qwen-image-h200", lambda d: _model(d)["start"].pop("floor_s"), "start: missing ['floor_s']"),
    ("qwen-image-h200", lambda d: _model(d).__setitem__("fit", ["nosuch"]), "fit: unknown coefficients ['nosuch']"),
    ("flux1-dev-h100", lambda d: _model(d)["sp"]["start"].__setitem__("nosuch", 1),
     "start: unknown coefficients ['nosuch']"),
    ("flux1-dev-h100", lambda d: _model(d)["sp"].__setitem__("fit", ["nosuch"]),
     "fit: unknown coefficients ['nosuch']"),
    ("flux1-dev-h100", lambda d: _model(d)["sp"].__setitem__("fit", ["b_s_per_mtok"]),
     "are already fitted at degree 1"),
    ("flux1-dev-h100", lambda d: _model(d)["sp"]["start"].pop("ring_sync_s_per_degree"),
     "fit: ['ring_sync_s_per_degree'] need a start value"),
    ("omni-h200", lambda d: _model(d)["derive"]["scale"].__setitem__("nosuch", 1), "derive.scale: unknown coefficient"),
]


@pytest.mark.parametrize("name, edit, message", CASES)
def test_a_bad_fit_yaml_names_the_model_and_key(tmp_path: Path, name: str, edit: Any, message: str) -> None:
    folder = edited(tmp_path, name, edit)
    with pytest.raises(ConfigError) as err:
        fit_profile(folder)
    assert message in str(err.value), err.value


def test_too_few_rows_for_the_coefficients(tmp_path: Path) -> None:
    folder = edited(tmp_path, "qwen-image-h200", lambda d: None)
    lines = (folder / "measurements.csv").read_text().splitlines()
    fit_rows = [line for line in lines[1:] if ",fit," in line]
    (folder / "measurements.csv").write_text("\n".join([lines[0], *fit_rows[:2]]) + "\n")
    with pytest.raises(ConfigError) as err:
        fit_profile(folder)
    assert "coefficients to fit but only 2 'fit' rows" in str(err.value)


def test_sp_coefficients_without_multi_gpu_rows(tmp_path: Path) -> None:
    folder = edited(tmp_path, "flux1-dev-h100", lambda d: None)
    lines = (folder / "measurements.csv").read_text().splitlines()
    header = lines[0].split(",")
    degree = [header.index("ulysses"), header.index("ring")]
    keep = [line for line in lines[1:] if all((line.split(",") + [""] * 2)[i].strip() in ("", "1") for i in degree)]
    (folder / "measurements.csv").write_text("\n".join([lines[0], *keep]) + "\n")
    with pytest.raises(ConfigError) as err:
        fit_profile(folder)
    assert "coefficients to fit but no 'fit' rows of degree > 1" in str(err.value)
