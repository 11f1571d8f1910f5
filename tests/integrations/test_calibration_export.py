"""The full refit's form terms (fixed, encode, decode, comm) leave the plugin as they reach routers: in the
calibration log line and the ``rlsched_calibration_scale`` gauge, and ``rlsched profile calibrate --log`` reads
the line back (issue 46: the line and the gauge carried time, attention, memory and fixed alone)."""

from __future__ import annotations

import http.server
import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

prom = pytest.importorskip("prometheus_client")

from rlsched.cli import main  # noqa: E402
from rlsched.integrations.vllm_omni.batch_clock import BatchClock  # noqa: E402
from rlsched.integrations.vllm_omni.metrics import PluginMetrics  # noqa: E402
from rlsched.profiling.calibrated import scales_from_log  # noqa: E402
from rlsched.sim.cost import load_profile  # noqa: E402
from rlsched.sim.truth import rescaled  # noqa: E402

PROFILE = "qwen-image-h200-vllm-omni"


def _clock_of(scales: tuple[float, ...]) -> tuple[BatchClock, SimpleNamespace]:
    """A ``BatchClock`` over a plugin state whose calibrator is at version 2 with ``scales`` for qwen-image."""
    cal = SimpleNamespace(version=2, scales=lambda: {"qwen-image": scales})
    st = SimpleNamespace(calibrator=cal, settings=SimpleNamespace(model="qwen-image"),
                         shipped=SimpleNamespace(name=PROFILE, models={"qwen-image": None}))
    metrics = PluginMetrics(prom.CollectorRegistry())
    return BatchClock(False, lambda: st, lambda: None, lambda: 0.0, metrics), st


def test_a_decode_and_comm_refit_is_logged_and_read_back(caplog: pytest.LogCaptureFixture) -> None:
    scales = (1.3, 1.02, 1.0, 0.5, 1.0, 2.0, 1.5)
    clock, st = _clock_of(scales)
    with caplog.at_level(logging.INFO, logger="rlsched.integrations.vllm_omni.batch_clock"):
        clock.calibrated(st)
    line, = [r.getMessage() for r in caplog.records if "calibrated, version" in r.getMessage()]
    assert line.endswith("memory x1.000, fixed x0.500, encode x1.000, decode x2.000, comm x1.500")
    assert scales_from_log(f"INFO {line}\n", "server.log") == (PROFILE, 2, {"qwen-image": scales})


def test_the_gauge_has_a_label_per_term_one_when_not_published() -> None:
    clock, st = _clock_of((1.3, 1.0, 1.0, 0.5, 1.0, 2.0))
    clock.calibrated(st)
    got = {t: clock.metrics.sample("rlsched_calibration_scale", {"term": t})
           for t in ("time", "attention", "memory", "fixed", "encode", "decode", "comm")}
    assert got == {"time": 1.3, "attention": 1.0, "memory": 1.0, "fixed": 0.5, "encode": 1.0, "decode": 2.0,
                   "comm": 1.0}
    clock.metrics.set_calibration(3, (1.1, 1.0, 1.0))  # a later version of the profile's form: the terms back to 1
    assert clock.metrics.sample("rlsched_calibration_scale", {"term": "decode"}) == 1.0


def test_profile_calibrate_reads_the_gauges_from_the_metrics_endpoint(tmp_path: Path) -> None:
    """What the plugin exports, served over HTTP as a replica's /metrics, is what ``--metrics`` writes."""
    scales = (1.3, 1.02, 1.0, 0.5, 1.0, 2.0, 1.5)
    clock, st = _clock_of(scales)
    clock.calibrated(st)
    body = prom.generate_latest(clock.metrics.registry)

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url, out = f"http://127.0.0.1:{server.server_port}/metrics", tmp_path / "cal.yaml"
        assert main(["profile", "calibrate", "--metrics", url, "--profile", PROFILE, "--out", str(out)]) == 0
    finally:
        server.shutdown()
    want = rescaled(load_profile(PROFILE), {"qwen-image": scales}, "check").model("qwen-image")
    written = load_profile(out)
    assert written.model("qwen-image").decode_s_per_mpx == pytest.approx(want.decode_s_per_mpx, rel=1e-5)
    assert written.sources[-1].endswith(f"version 2 of {PROFILE} (rlsched plugin), from {url}; form terms refit: "
                                        "fixed, decode, comm")
