"""``time_scale``: the plugin clock of time-scaled replays (deploy flag and setting)."""

from __future__ import annotations

import pytest
import yaml

from rlsched.cli import main
from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig


def test_deploy_writes_time_scale_only_when_set(tmp_path) -> None:
    out = tmp_path / "d.yaml"
    assert main(["deploy", "--policy", "fifo", "--time-scale", "25", "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["stages"][0]["extras"]["rlsched"]["time_scale"] == 25.0
    assert main(["deploy", "--policy", "fifo", "--out", str(out)]) == 0
    assert "time_scale" not in yaml.safe_load(out.read_text())["stages"][0]["extras"]["rlsched"]


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True])
def test_time_scale_must_be_a_positive_finite_number(bad) -> None:
    with pytest.raises(ConfigError, match="time_scale"):
        PluginConfig(time_scale=bad)
    assert PluginConfig.from_extras({"rlsched": {"time_scale": 50}}).time_scale == 50


def test_deploy_refuses_a_zero_time_scale(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["deploy", "--policy", "fifo", "--time-scale", "0", "--out", str(tmp_path / "d.yaml")])
    assert exc.value.code == 2 and "argument --time-scale" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [1e300, 1e4, 1e-6])
def test_time_scale_has_the_tables_range(bad, tmp_path, capsys) -> None:
    """Bug: ``deploy --time-scale 1e300`` and ``PluginConfig(time_scale=1e300)`` put every deadline at its arrival."""
    with pytest.raises(ConfigError, match=r"extras.rlsched.time_scale: must be a finite number >= 0.001 and <= 1000"):
        PluginConfig(time_scale=bad)
    with pytest.raises(SystemExit):
        main(["deploy", "--policy", "fifo", "--time-scale", str(bad), "--out", str(tmp_path / "d.yaml")])
    assert "argument --time-scale: must be a finite number >= 0.001 and <= 1000" in capsys.readouterr().err
