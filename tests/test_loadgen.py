"""``rlsched loadgen`` against a stub image server on 127.0.0.1 (stdlib; stops by itself)."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rlsched import loadgen
from rlsched.sim import load_scenario
from rlsched.sim.request import Request


def png(width: int, height: int) -> bytes:
    """A valid gray RGB PNG (stdlib only)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x80" * (3 * width) for _ in range(height))
    return (loadgen.PNG_MAGIC + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class StubServer:
    """Answers ``/v1/images/generations`` with one PNG of the asked size; ``mode`` breaks replies."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode, self.bodies = mode, []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.bodies.append(body)
                status, reply = stub.reply(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path != "/v1/images/generations":
            return 404, {"error": path}
        if self.mode == "error" and body["seed"] % 2:
            return 500, {"error": "boom"}
        w, h = map(int, body["size"].split("x"))
        if self.mode == "wrong-size":
            w += 8
        item = {"b64_json": base64.b64encode(png(w, h)).decode()}
        # the shape vLLM-Omni 0.30 returns with return_stage_metrics
        metrics = {"stage_durations": {"queue_wait_ms": 2.0, "stage_0_gen_ms": 5.0}, "peak_memory_mb": None}
        return 200, {"data": [item], "metrics": metrics}


@pytest.fixture
def stub(request: pytest.FixtureRequest) -> Iterator[StubServer]:
    server = StubServer(getattr(request, "param", "ok"))
    thread = threading.Thread(target=server.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        thread.join(timeout=5)


def requests(n: int = 6) -> list[Request]:
    return load_scenario("default").requests(seed=0, duration_s=3600)[:n]


def test_png_size_reads_the_header_and_refuses_other_bytes() -> None:
    assert loadgen.png_size(png(16, 8)) == (16, 8)
    assert loadgen.png_size(b"GIF89a" + b"\x00" * 30) is None


def test_body_carries_class_slo_shape_and_cfg() -> None:
    r = requests(1)[0]
    body = loadgen.request_body(r, model="m")
    assert body["extra_params"] == {"priority": r.priority, "slo_ms": round(r.slo_s * 1e3, 3)}
    assert body["size"] == f"{r.width}x{r.height}" and body["num_inference_steps"] == r.num_inference_steps
    assert body["true_cfg_scale"] == (4.0 if r.cfg else 1.0) and body["model"] == "m"


def test_plan_is_seeded_scaled_and_bounded() -> None:
    reqs = requests(10)
    p = loadgen.plan(reqs, time_scale=100, max_requests=4)
    assert [x.index for x in p] == [r.id for r in reqs[:4]]
    assert [x.send_s for x in p] == pytest.approx([r.arrival_s / 100 for r in reqs[:4]])
    assert loadgen.plan(requests(10), time_scale=100, max_requests=4) == p


def test_run_sends_every_request_once_and_checks_images(stub: StubServer) -> None:
    planned = loadgen.plan(requests(6), time_scale=1e6)
    results = loadgen.run(stub.url, planned, timeout_s=10)
    assert all(r.ok for r in results), [r.error for r in results]
    assert sorted(b["seed"] for b in stub.bodies) == [p.index for p in planned]
    s = loadgen.summarize(results, time_scale=1e6)
    assert (s["requests"], s["completed"], s["errors"]) == (6, 6, 0)
    assert s["latency_p50_s"] <= s["latency_p90_s"] <= s["latency_p99_s"] < 10
    assert s["queue_delay_p50_s"] == pytest.approx(0.002) and s["processing_p50_s"] == pytest.approx(0.005)
    # wall latency x 1e6 exceeds every SLO: nothing attained
    assert s["slo_attainment"]["all"] == 0.0
    assert loadgen.summarize(results)["slo_attainment"]["all"] == 1.0


@pytest.mark.parametrize("stub", ["error", "wrong-size"], indirect=True)
def test_errors_and_wrong_images_are_counted_as_misses(stub: StubServer) -> None:
    results = loadgen.run(stub.url, loadgen.plan(requests(4), time_scale=1e6), timeout_s=10)
    s = loadgen.summarize(results)
    expected = sum(r.index % 2 for r in results) if stub.mode == "error" else 4
    assert s["errors"] == expected and s["completed"] == 4 - expected
    assert s["slo_attainment"]["all"] == (4 - expected) / 4 and s["error_samples"]


def test_no_server_is_an_error_not_a_hang() -> None:
    results = loadgen.run("http://127.0.0.1:9", loadgen.plan(requests(2), time_scale=1e6), timeout_s=2)
    assert [r.status for r in results] == [0, 0] and all(r.error for r in results)


def test_cli_prints_json_and_writes_records(stub: StubServer, tmp_path) -> None:
    out = tmp_path / "records.csv"
    res = subprocess.run([sys.executable, "-m", "rlsched", "loadgen", stub.url, "--max-requests", "3",
                          "--time-scale", "1e6", "--duration", "3600", "--timeout", "10", "--json",
                          "--records", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["completed"] == 3 and len(out.read_text().splitlines()) == 4
    text = subprocess.run([sys.executable, "-m", "rlsched", "loadgen", stub.url, "--max-requests", "2",
                           "--time-scale", "1e6", "--timeout", "10"], capture_output=True, text=True, timeout=120)
    assert "SLO attainment" in text.stdout and "p99" in text.stdout
