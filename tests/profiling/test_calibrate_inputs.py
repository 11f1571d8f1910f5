"""``rlsched profile calibrate --log/--scales``: a malformed number, a zero, a model given twice or a scale
past the bounds of a published calibration is refused, naming the flag (and the log's line) and the model
(issue 47: ``1.2.3`` in a log was a ValueError traceback; zero, duplicates and 1e9 wrote a profile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.cli import main
from rlsched.errors import ConfigError
from rlsched.profiling.calibrated import parse_scales, scales_from_log

PROFILE = "qwen-image-h200-vllm-omni"
LINE = "INFO rlsched: cost profile {p} calibrated, version {v}: qwen-image time x{t}, attention x{a}, memory x{m}\n"


def log(*rows: tuple[str, str, str]) -> str:
    return "INFO start\n" + "".join(LINE.format(p=PROFILE, v=i + 1, t=t, a=a, m=m) for i, (t, a, m) in enumerate(rows))


@pytest.mark.parametrize("text, message", [
    ("qwen-image=1.2.3,1", "qwen-image: time scale '1.2.3' must be a number >= 0.0625 and <= 16"),
    ("qwen-image=1_0,1", "time scale '1_0' must be a number"),
    ("qwen-image=0,1", "time scale '0' must be a number >= 0.0625"),
    ("qwen-image=1,0", "attention scale '0' must be"),
    ("qwen-image=1,1,-1", "memory scale '-1' must be a number >= 0.0625 and <= 4000"),
    ("qwen-image=1e9,1", "time scale '1e9' must be"),
    ("qwen-image=nan,1", "time scale 'nan' must be"),
    ("qwen-image=inf,1", "time scale 'inf' must be"),
    ("qwen-image=1.3,1;qwen-image=1.2,1",
     "'qwen-image=1.2,1': model 'qwen-image' is given twice (one entry per model)"),
])
def test_bad_scales_by_hand_are_refused_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^--scales: ") as err:
        parse_scales(text, "--scales")
    assert message in str(err.value)


@pytest.mark.parametrize("rows, line, message", [
    ([("1.2.3", "1.0", "1.0")], 2, "time scale '1.2.3' must be a number"),
    ([("1.3", "1.0", "1.0"), ("0", "1.0", "1.0")], 3, "time scale '0' must be a number >= 0.0625"),
    ([("1.3", "99", "1.0")], 2, "attention scale '99' must be a number >= 0.0625 and <= 16"),
    ([("1.3", "1.0", "5000")], 2, "memory scale '5000' must be"),
])
def test_bad_scales_in_a_log_are_refused_naming_the_line(rows: list, line: int, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^server.log:{line}: qwen-image: ") as err:
        scales_from_log(log(*rows), "server.log")
    assert message in str(err.value)


def test_the_command_refuses_them_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "server.log").write_text(log(("1.2.3", "1.0", "1.0")))
    out = tmp_path / "cal.yaml"
    assert main(["profile", "calibrate", "--log", str(tmp_path / "server.log"), "--out", str(out)]) == 2
    assert "server.log:2: qwen-image: time scale '1.2.3' must be a number" in capsys.readouterr().err
    assert main(["profile", "calibrate", "--profile", PROFILE, "--scales", "qwen-image=0,1", "--out", str(out)]) == 2
    assert "--scales: qwen-image: time scale '0'" in capsys.readouterr().err and not out.exists()
    scales = scales_from_log(log(("1.3", "1.0", "1.0"), ("1.301", "1.5", "1.0")), "server.log")[2]
    assert list(scales) == ["qwen-image"] and scales["qwen-image"][:3] == (1.301, 1.5, 1.0)  # the newest line holds
