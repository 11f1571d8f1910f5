"""Each measurement-set and ``profile predict`` message of docs/errors.md, triggered by the row or flag
that earns it and naming its file and line or flag (``tests/test_errors_doc.py`` checks every
message has such a test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.errors import ConfigError, TraceFormatError
from rlsched.profiling.measurements import read_measurements
from rlsched.profiling.predict import _cfg_flag, int_flag, predict_request, resolve_profile
from rlsched.sim import load_profile

HEADER = "model,gpu,stack,height,width,frames,batch,steps,cfg,metric,value,use,source\n"
GOOD = ["qwen-image", "H200", "x", "512", "512", "1", "1", "50", "true", "step_s", "0.1", "fit", "paper"]


def _row(**changes: str) -> str:
    cols = HEADER.strip().split(",")
    return ",".join(changes.get(c, v) for c, v in zip(cols, GOOD)) + "\n"


@pytest.mark.parametrize("body, message", [
    ("model,gpu\nq,H\n", "missing columns ['stack'"),
    (HEADER + _row(height="tall"), "column 'height': not a number: 'tall'"),
    (HEADER + _row(metric="speed"), "column 'metric': 'speed' is not one of"),
    (HEADER + _row(use="maybe"), "column 'use': 'maybe' is not 'fit' or 'check'"),
    (HEADER + _row(cfg="2"), "column 'cfg': '2' is not true/false"),
    (HEADER + _row(source=""), "column 'source' is empty: every number names its source"),
])
def test_a_bad_measurement_row_names_file_line_and_column(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "measurements.csv"
    path.write_text(body)
    with pytest.raises(TraceFormatError) as err:
        read_measurements(path)
    line = 1 if "missing columns" in message else 2
    assert str(err.value).startswith(f"{path}:{line}: ") and message in str(err.value), err.value


@pytest.mark.parametrize("flag, value, message", [
    ("--steps", "ten", "must be a whole number, not 'ten'"),
    ("--batch", "0", "must be between 1 and 65536, not 0"),
])
def test_a_bad_predict_flag_is_named(flag: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=flag) as err:
        int_flag(flag, value)
    assert message in str(err.value)


def test_predict_names_its_profile_model_and_cfg_degree() -> None:
    with pytest.raises(ConfigError, match="--cfg-parallel") as err:
        _cfg_flag("3")
    assert "must be 1 or 2 (one GPU group per guidance branch), not '3'" in str(err.value)
    with pytest.raises(ConfigError, match="PROFILE") as err:
        resolve_profile("nosuch")
    assert "is neither a shipped profile" in str(err.value)
    with pytest.raises(ConfigError, match="--model") as err:
        predict_request(load_profile("qwen-image-h200"), height=512, width=512, steps=4, model="flux")
    assert "'flux' is not in profile 'qwen-image-h200'" in str(err.value)
