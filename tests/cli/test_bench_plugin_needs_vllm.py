"""``rlsched bench plugin`` without vLLM-Omni: says how to get the vLLM tier, no traceback."""

import importlib.util
import subprocess
import sys

import pytest


@pytest.mark.skipif(importlib.util.find_spec("vllm_omni") is not None, reason="vLLM-Omni is installed here")
def test_bench_plugin_names_the_vllm_tier() -> None:
    res = subprocess.run([sys.executable, "-m", "rlsched", "bench", "plugin", "--policies", "fifo", "--calls", "1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "make .venv-vllm/.installed" in res.stderr and ".venv-vllm/bin/rlsched bench plugin" in res.stderr
    assert "Traceback" not in res.stderr and not res.stdout


@pytest.mark.skipif(importlib.util.find_spec("vllm_omni") is not None, reason="vLLM-Omni is installed here")
@pytest.mark.parametrize("name", ["central", "router"])
def test_every_vllm_tier_bench_is_named_so(name: str) -> None:
    """The help's list of vLLM-tier benches (``VLLM_TIER``) holds every bench that needs it."""
    from rlsched.bench import VLLM_TIER

    assert name in VLLM_TIER
    res = subprocess.run([sys.executable, "-m", "rlsched", "bench", name, "--calls", "1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "vLLM tier" in res.stderr and "Traceback" not in res.stderr
