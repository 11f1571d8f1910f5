"""Each candidate-scorer (``pick``) and learned-router checkpoint message of docs/errors.md, triggered by
a copy of a shipped checkpoint with one thing wrong, rehashed so the content hash passes
(``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlsched.errors import CheckpointError, ConfigError
from rlsched.learned.checkpoint import META, WEIGHTS, content_hash, read_safetensors, write_safetensors
from rlsched.learned.pick import load_scorer
from rlsched.learned.router import load_router
from rlsched.policies import make_policy
from rlsched.resources import data_dir

CHECKPOINTS = data_dir("checkpoints")


def copy(tmp_path: Path, name: str, meta_edit: Any = None, tensors_edit: Any = None) -> Path:
    folder = tmp_path / name
    shutil.copytree(CHECKPOINTS / name, folder)
    if tensors_edit is not None:
        tensors = read_safetensors(folder / WEIGHTS)
        tensors_edit(tensors)
        write_safetensors(folder / WEIGHTS, tensors)
    meta = json.loads((folder / META).read_text())
    if meta_edit is not None:
        meta_edit(meta)
    meta["content_sha256"] = content_hash((folder / WEIGHTS).read_bytes(), meta)
    (folder / META).write_text(json.dumps(meta))
    return folder


def test_a_checkpoint_of_another_kind_is_named() -> None:
    with pytest.raises(CheckpointError, match="kind None is not a candidate scorer \\('pick'\\)"):
        load_scorer(CHECKPOINTS / "default")
    with pytest.raises(CheckpointError, match="kind 'pick' is not a learned router \\('router'\\)"):
        load_router(CHECKPOINTS / "pick")


@pytest.mark.parametrize("value, message", [
    ("x", "base_action must be a list of 9 numbers, not 'x'"),
    ([0.0, 1.0], "base_action must hold 9 finite numbers, not [0.0, 1.0]"),
    ([2.0] + [0.0] * 8, "base_action[0] = 2 is outside the action space [-1, 1]"),
])
def test_a_bad_base_action_is_named(tmp_path: Path, value: Any, message: str) -> None:
    folder = copy(tmp_path, "pick", lambda m: m.__setitem__("base_action", value))
    with pytest.raises(CheckpointError) as err:
        load_scorer(folder)
    assert message in str(err.value)


def test_scorer_dimensions_and_bias_are_checked(tmp_path: Path) -> None:
    folder = copy(tmp_path, "pick", lambda m: m.__setitem__("global_dim", 3))
    with pytest.raises(CheckpointError, match="global_dim 3 != this rlsched's 37; retrain"):
        load_scorer(folder)
    folder = copy(tmp_path / "b", "pick", tensors_edit=lambda t: t.__setitem__("proposal_bias", np.array([np.nan])))
    with pytest.raises(CheckpointError, match="proposal_bias must be one finite number in policy.safetensors"):
        load_scorer(folder)


def test_pick_takes_only_a_static_option() -> None:
    with pytest.raises(ConfigError, match="pick takes only static=TUNED.json"):
        make_policy("pick;bogus=1")
