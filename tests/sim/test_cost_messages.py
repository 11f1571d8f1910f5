"""Each cost-profile message of docs/errors.md (parallel layouts, ``sp`` and ``cfg_parallel`` blocks,
models), triggered by the smallest input that earns it (``tests/test_errors_doc.py`` checks every
message has such a test)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from rlsched.errors import ConfigError, InvalidRequest
from rlsched.sim.cost import PROFILE_DIR, SPLayout, load_profile, profile_from_dict

OMNI = "qwen-image-h200-vllm-omni"
PLAIN = "qwen-image-h200"
"""A profile without ``sp`` or ``cfg_parallel`` blocks."""


@pytest.mark.parametrize("text, message", [
    ("zz", "'zz' is not D, ulyssesD, ringD or ulyssesUxringR (u2r2), each with an optional CFG-parallel degree "
           "(u2c2, 2c2, c2)"),
    ("u0", "'u0': degrees must be >= 1"),
    ("u2c3", "must be one of (1, 2) (one GPU group per guidance branch), not 3"),
])
def test_a_bad_parallel_layout_names_it(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        SPLayout.parse(text)
    assert message in str(err.value)


def test_a_layout_needs_the_profile_blocks_that_model_it() -> None:
    plain = next(iter(load_profile(PLAIN).models.values()))
    with pytest.raises(ConfigError, match=r"no 'sp' block in its profile: sequence parallelism \(degree 2\)"):
        plain.sp_layout(2)
    with pytest.raises(ConfigError, match=r"no 'cfg_parallel' block in its profile: CFG parallelism \(layout"):
        plain.sp_layout("c2")
    omni = next(iter(load_profile(OMNI).models.values()))  # ulysses coefficients only
    with pytest.raises(ConfigError, match="its profile's 'sp' block has no ring coefficients"):
        omni.sp_layout("r2")
    with pytest.raises(ConfigError, match=r"degrees must be >= 1, not "):
        omni.sp_layout(SPLayout(0, 1, 1))


def test_comm_without_coefficients_is_refused() -> None:
    omni = next(iter(load_profile(OMNI).models.values()))
    sp = copy.copy(omni.sp)
    object.__setattr__(sp, "ulysses_comm_s_per_mtok", None)
    with pytest.raises(ConfigError, match=r"no ulysses coefficients \(layout"):
        sp.overhead_s(1.0, 1, SPLayout(2, 1, 1))
    object.__setattr__(sp, "ring_comm_s_per_mtok", None)
    with pytest.raises(ConfigError, match=r"no ring coefficients \(layout"):
        sp.overhead_s(1.0, 1, SPLayout(1, 2, 1))


def _omni(edit: Any) -> dict[str, Any]:
    data = yaml.safe_load((PROFILE_DIR / f"{OMNI}.yaml").read_text())
    model = next(iter(data["models"].values()))
    edit(model)
    return data


def test_bad_sp_and_cfg_parallel_blocks_name_the_key() -> None:
    data = _omni(lambda m: m["sp"].__setitem__("ulysses_comm_s_per_mtok", -1))
    with pytest.raises(ConfigError, match=r"ulysses_comm_s_per_mtok must be a finite number in \[0, 1e6\], not -1"):
        profile_from_dict(data, "p.yaml")
    data = _omni(lambda m: m["cfg_parallel"].__setitem__("source", "measured"))
    with pytest.raises(ConfigError) as err:
        profile_from_dict(data, "p.yaml")
    assert "source must be a string starting 'derived' (no CFG-parallel measurement is calibrated), not" in str(
        err.value)


def test_a_model_not_in_the_profile_is_named() -> None:
    with pytest.raises(InvalidRequest, match="not in profile 'qwen-image-h200'"):
        load_profile(PLAIN).model("nosuch")
