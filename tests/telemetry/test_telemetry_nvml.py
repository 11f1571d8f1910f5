"""``NvmlTelemetry``: real readings through (a fake) pynvml, one warning and NaNs otherwise."""

from __future__ import annotations

import math
import sys
import warnings
from types import ModuleType, SimpleNamespace

import pytest

from rlsched.telemetry import NvmlTelemetry


class FakeNvmlError(Exception):
    pass


def fake_pynvml(fail_init: bool = False, fail_read: bool = False) -> ModuleType:
    mod = ModuleType("pynvml")
    calls: list[str] = []

    def init() -> None:
        calls.append("init")
        if fail_init:
            raise FakeNvmlError("NVML Shared Library Not Found")

    def memory(handle: object) -> SimpleNamespace:
        if fail_read:
            raise FakeNvmlError("GPU is lost")
        return SimpleNamespace(used=40 * 1024**3, total=80 * 1024**3, free=40 * 1024**3)

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.append("shutdown")
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    mod.nvmlDeviceGetMemoryInfo = memory
    mod.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=75, memory=30)
    mod.calls = calls
    return mod


def test_reads_memory_and_utilisation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = NvmlTelemetry(device_index=1).read()
    assert s.known and (s.memory_used_gb, s.memory_total_gb) == (40.0, 80.0)
    assert (s.compute_util, s.membw_util, s.memory_frac) == (0.75, 0.30, 0.5)


def test_init_failure_warns_once_and_reads_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    with pytest.warns(RuntimeWarning, match="Library Not Found") as record:
        tel = NvmlTelemetry()
        samples = [tel.read() for _ in range(3)]
    assert len(record) == 1 and not tel.available
    assert all(not s.known and math.isnan(s.memory_used_gb) and math.isnan(s.compute_util) for s in samples)


def test_missing_pynvml_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.warns(RuntimeWarning, match="not installed") as record:
        tel = NvmlTelemetry()
        tel.read()
    assert len(record) == 1 and not tel.read().known


def test_read_failure_degrades_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml(fail_read=True)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    tel = NvmlTelemetry()
    with pytest.warns(RuntimeWarning, match="GPU is lost") as record:
        first, second = tel.read(), tel.read()
    assert len(record) == 1 and not first.known and not second.known
    assert fake.calls == ["init", "shutdown"]


def test_real_nvml_failure_path() -> None:
    """On a machine without a usable NVML (this CPU box): unknown readings, one warning."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works here: the failure path cannot be exercised")
    with pytest.warns(RuntimeWarning, match="NVML unavailable") as record:
        tel = NvmlTelemetry()
        s = tel.read()
    assert len(record) == 1 and not s.known and math.isnan(s.membw_util)


def test_a_gpu_or_mig_uuid_is_read_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Caught: a UUID or MIG entry of CUDA_VISIBLE_DEVICES (Kubernetes' default) silently read GPU 0."""
    mod = fake_pynvml()
    mod.nvmlDeviceGetHandleByIndex = lambda i: pytest.fail("read by index")
    mod.nvmlDeviceGetHandleByUUID = lambda u: ("uuid", u)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    for spec in ("GPU-1f2e3d4c", "MIG-5a6b7c8d"):
        tel = NvmlTelemetry(spec)
        assert tel.available and tel._handle == ("uuid", spec) and tel.read().known


def test_a_mig_instance_reports_memory_and_no_utilisation(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake_pynvml()
    mod.nvmlDeviceGetHandleByUUID = lambda u: ("uuid", u)

    def unsupported(handle: object) -> None:
        raise FakeNvmlError("Not Supported")

    mod.nvmlDeviceGetUtilizationRates = unsupported
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    s = NvmlTelemetry("MIG-5a6b7c8d").read()
    assert s.known and s.memory_used_gb == 40.0 and math.isnan(s.compute_util) and math.isnan(s.membw_util)


@pytest.mark.parametrize("order, names, warns", [("PCI_BUS_ID", ["H100", "A10"], False),
                                                 (None, ["H100", "H100"], False), (None, ["H100", "A10"], True)])
def test_an_index_warns_when_cuda_and_nvml_orders_can_differ(monkeypatch: pytest.MonkeyPatch, order: str | None,
                                                             names: list[str], warns: bool) -> None:
    mod = fake_pynvml()
    mod.nvmlDeviceGetCount = lambda: len(names)
    mod.nvmlDeviceGetName = lambda h: names[h[1]]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    if order is None:
        monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_ORDER", order)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        tel = NvmlTelemetry("1")
    assert tel._handle == ("handle", 1)
    assert any("CUDA_DEVICE_ORDER" in str(w.message) for w in record) == warns
