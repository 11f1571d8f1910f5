"""``rlsched loadgen`` against a stub image server on 127.0.0.1 (stdlib; stops by itself)."""

from __future__ import annotations

import base64
import json
import math
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rlsched import loadgen
from rlsched.sim import load_scenario
from rlsched.sim.request import Request
from tests.conftest import take_ctrl_c


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
                if stub.mode in ("huge", "huge-unsized", "trickle"):
                    return stub.misbehave(self)
                if stub.mode == "slow":
                    time.sleep(0.3)
                status, reply = stub.reply(self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:  # the client is gone (e.g. a loadgen stopped with Ctrl-C)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def misbehave(self, handler: BaseHTTPRequestHandler) -> None:
        """``huge``: a 3 MB reply (declared); ``huge-unsized``: the same without Content-Length
        (read to the close); ``trickle``: one byte every 0.1 s of a 1000-byte reply."""
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        size = 1000 if self.mode == "trickle" else 3 * 2**20
        if self.mode != "huge-unsized":
            handler.send_header("Content-Length", str(size))
        handler.end_headers()
        try:
            if self.mode == "trickle":
                for _ in range(size):
                    handler.wfile.write(b" ")
                    handler.wfile.flush()
                    time.sleep(0.1)
            else:
                handler.wfile.write(b" " * size)
        except OSError:  # the client gave up: what the test wants
            pass

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if path != "/v1/images/generations":
            return 404, {"error": path}
        if self.mode == "error" and body["seed"] % 2:
            return 500, {"error": "boom"}
        w, h = map(int, body["size"].split("x"))
        if self.mode == "wrong-size":
            w += 8
        image = png(w, h)
        if self.mode == "header-only":  # a reply that is a PNG's header and nothing else
            image = image[:33]
        item = {"b64_json": base64.b64encode(image).decode()}
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


@pytest.mark.parametrize("stub", ["error", "wrong-size", "header-only"], indirect=True)
def test_errors_and_wrong_images_are_counted_as_misses(stub: StubServer) -> None:
    results = loadgen.run(stub.url, loadgen.plan(requests(4), time_scale=1e6), timeout_s=10)
    s = loadgen.summarize(results)
    expected = sum(r.index % 2 for r in results) if stub.mode == "error" else 4
    assert s["errors"] == expected and s["completed"] == 4 - expected
    assert s["slo_attainment"]["all"] == (4 - expected) / 4 and s["error_samples"]
    if stub.mode == "header-only":  # a header and nothing else: not a completed image
        assert all(r.images == 0 and r.error.endswith("PNGs in the reply (expected 1): image 0: truncated "
                                                      "(no IEND chunk)") for r in results)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _adam7_png(width: int, height: int) -> bytes:
    """A valid interlaced (Adam7) gray PNG, which Pillow reads but does not write."""
    raw = b""
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        pw, ph = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if pw > 0 and ph > 0:
            raw += (b"\x01" + b"\x07" * pw) * ph  # filter Sub
    return (loadgen.PNG_MAGIC + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 1))
            + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))


def _broken_pngs(w: int, h: int) -> dict[str, bytes]:
    """PNG-looking bytes that do not decode to a whole ``w``x``h`` image, by what is wrong."""
    good = png(w, h)
    idat = good.index(b"IDAT") - 4
    body = good[idat + 8:good.index(b"IEND") - 8]
    raw = zlib.decompress(body)
    return {
        "header only": good[:33],
        "truncated IDAT": good[:idat + 20],
        "no IEND": good[:-12],
        "bad CRC": good[:idat + 9] + bytes([good[idat + 9] ^ 1]) + good[idat + 10:],
        "short image data": good[:idat] + _chunk(b"IDAT", zlib.compress(raw[:-1])) + _chunk(b"IEND", b""),
        "long image data": good[:idat] + _chunk(b"IDAT", zlib.compress(raw + b"\x00")) + _chunk(b"IEND", b""),
        "unended stream": good[:idat] + _chunk(b"IDAT", zlib.compress(raw)[:-4]) + _chunk(b"IEND", b""),
        "bad filter": good[:idat] + _chunk(b"IDAT", zlib.compress(b"\x09" + raw[1:])) + _chunk(b"IEND", b""),
        "palette without PLTE": loadgen.PNG_MAGIC + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0))
        + _chunk(b"IDAT", zlib.compress((b"\x00" + b"\x00" * w) * h))
        + _chunk(b"IEND", b""),
        "wrong size": png(w + 1, h),
        "not a PNG": b"GIF89a" + b"\x00" * 40,
    }


def test_a_reply_counts_only_when_its_png_decodes_whole() -> None:
    """Bug: a reply whose PNG was only a header counted as a completed image."""
    assert loadgen.png_problem(png(16, 8), 16, 8) is None and loadgen.png_problem(_adam7_png(13, 9), 13, 9) is None
    reasons = {name: loadgen.png_problem(data, 16, 8) for name, data in _broken_pngs(16, 8).items()}
    assert reasons == {  # docs/errors.md, `rlsched loadgen`
        "header only": "truncated (no IEND chunk)", "truncated IDAT": "truncated (in its IDAT chunk)",
        "no IEND": "truncated (no IEND chunk)", "bad CRC": "corrupt (its IDAT chunk fails its CRC)",
        "short image data": "truncated image data (391 of 392 bytes)",
        "long image data": "image data longer than its size",
        "unended stream": "truncated image data (392 of 392 bytes, stream unended)",
        "bad filter": "corrupt image data (filter type 9)",
        "palette without PLTE": "a palette image without its palette",
        "wrong size": "17x8, not the 16x8 asked for", "not a PNG": "not a PNG"}
    for name, data in _broken_pngs(16, 8).items():
        reply = {"data": [{"b64_json": base64.b64encode(data).decode()}]}
        assert loadgen.image_check(reply, 16, 8) == (0, [f"image 0: {reasons[name]}"]), name
        assert loadgen.count_images(reply, 16, 8) == 0
    assert loadgen.image_check({"data": [{"b64_json": "&&"}]}, 16, 8) == (0, ["image 0: not base64"])


def test_the_png_check_agrees_with_pillow() -> None:
    """What loadgen counts is what a decoder decodes (Pillow, where it is installed)."""
    import io

    pil = pytest.importorskip("PIL.Image")

    def decodes(data: bytes, w: int, h: int) -> bool:
        try:
            with pil.open(io.BytesIO(data)) as im:
                im.load()
                return im.size == (w, h)
        except Exception:  # noqa: BLE001 (any failure to decode is "does not decode")
            return False

    made = {}
    for mode in ("RGB", "RGBA", "L", "P", "1", "I;16"):
        buf = io.BytesIO()
        pil.new(mode, (24, 10)).save(buf, format="PNG")
        made[mode] = buf.getvalue()
    cases = {**made, "ours": png(24, 10), "adam7": _adam7_png(24, 10), **_broken_pngs(24, 10)}
    # Pillow reads leniently: it stops once it has the pixels and invents a missing palette; these
    # replies are cut short or malformed, so loadgen does not count them
    stricter = {"no IEND", "unended stream", "long image data", "palette without PLTE"}
    ours = {name for name, data in cases.items() if loadgen.png_problem(data, 24, 10) is None}
    pillows = {name for name, data in cases.items() if decodes(data, 24, 10)}
    assert ours == {*made, "ours", "adam7"} and ours <= pillows and pillows - ours == stricter


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


# ------------------------------------------------------------------ issue 18: errors, caps, deadline, Ctrl-C


def test_any_exception_is_recorded_with_its_reason_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: an exception other than OSError in a worker left an empty reason and a NaN duration."""
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("decoder exploded")

    monkeypatch.setattr(loadgen, "post_json", broken)
    results = loadgen.run("http://127.0.0.1:9", loadgen.plan(requests(2), time_scale=1e6), timeout_s=2)
    assert [r.error for r in results] == ["RuntimeError: decoder exploded"] * 2
    assert all(math.isfinite(r.latency_s) and r.latency_s >= 0 for r in results)
    assert loadgen.summarize(results)["error_samples"] == ["RuntimeError: decoder exploded"]


@pytest.mark.parametrize("stub", ["huge", "huge-unsized"], indirect=True)
def test_a_reply_over_the_cap_fails_its_request(stub: StubServer) -> None:
    """Bug: replies had no size cap (one 1.5 GB reply: 4.3 GB RSS)."""
    results = loadgen.run(stub.url, loadgen.plan(requests(2), time_scale=1e6), timeout_s=10,
                          max_reply_bytes=2**20)
    assert all(r.status == 0 and "ReplyTooLarge" in r.error and "1 MiB cap (--max-reply-mb)" in r.error
               for r in results), [r.error for r in results]


@pytest.mark.parametrize("stub", ["trickle"], indirect=True)
def test_timeout_is_a_deadline_for_the_whole_request(stub: StubServer) -> None:
    """Bug: ``--timeout`` bounded each read, so a server trickling a byte at a time held a request
    (and the run) open for as long as it liked."""
    t0 = time.monotonic()
    results = loadgen.run(stub.url, loadgen.plan(requests(1), time_scale=1e6), timeout_s=1.0)
    took = time.monotonic() - t0
    assert took < 3, took
    assert "RequestTimeout" in results[0].error and "1 s request deadline" in results[0].error
    assert 0.9 < results[0].latency_s < 3


def test_ctrl_c_returns_the_finished_requests(stub: StubServer) -> None:
    """Ctrl-C while waiting to send: sending stops, ``Interrupted`` carries the finished requests."""
    def interrupting_sleep(s: float) -> None:
        time.sleep(0.5)  # the three sends due now finish meanwhile
        raise KeyboardInterrupt

    late = [loadgen.Planned(p.index, 10.0 if k >= 3 else 0.0, p.priority, p.slo_s, p.height, p.width, p.body)
            for k, p in enumerate(loadgen.plan(requests(6), time_scale=1e6))]
    seen: list[int] = []
    with pytest.raises(loadgen.Interrupted) as exc:
        loadgen.run(stub.url, late, timeout_s=10, sleep=interrupting_sleep, on_result=lambda r: seen.append(r.index))
    assert sorted(r.index for r in exc.value.results) == sorted(seen) == [p.index for p in late[:3]]
    assert (exc.value.in_flight, exc.value.unsent) == (0, 3) and all(r.ok for r in exc.value.results)


@pytest.mark.parametrize("stub", ["slow"], indirect=True)
def test_cli_ctrl_c_keeps_the_records_and_prints_a_summary(stub: StubServer, tmp_path: Path) -> None:
    """Bug: Ctrl-C gave a traceback and no ``--records`` (they were written at the end)."""
    out = tmp_path / "records.csv"
    proc = subprocess.Popen([sys.executable, "-m", "rlsched", "loadgen", stub.url, "--max-requests", "200",
                             "--time-scale", "50", "--duration", "36000", "--timeout", "10", "--workers", "2",
                             "--records", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=take_ctrl_c)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
            time.sleep(0.1)  # two rows are on disk while the run goes on: written as they come
        assert len(out.read_text().splitlines()) >= 3
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    assert "interrupted" in stdout and "SLO attainment" in stdout and "rlsched: interrupted:" in stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("id,priority") and len(rows) - 1 == int(stdout.split("requests ")[1].split(",")[0])


def test_slo_attainment_is_per_class_and_says_what_it_measures() -> None:
    """loadgen's attainment is end-to-end and client side, per class with its counts (the server's
    rlsched_slo_attainment_ratio is per class, stage side); "all" is said to have no server counterpart; a
    scenario's own class names are reported by name; an error or a timeout is a miss, as on the server."""
    from rlsched.commands.loadgen import format_summary

    def res(i: int, cls: str, latency_s: float, status: int = 200, error: str = "") -> loadgen.Result:
        return loadgen.Result(i, cls, 10.0, 0.0, latency_s, status, int(status == 200), error)

    s = loadgen.summarize([res(0, "realtime", 1), res(1, "realtime", 20), res(2, "batch", 2),
                           res(3, "batch", 1, 0, "RequestTimeout: no reply"), res(4, "paid", 30)])
    assert s["slo_attainment"] == {"realtime": 0.5, "batch": 0.5, "paid": 0.0, "all": 0.4}
    assert s["slo_met"] == {"realtime": 1, "batch": 1, "paid": 0, "all": 2}
    assert s["slo_requests"] == {"realtime": 2, "batch": 2, "paid": 1, "all": 5}
    assert s["slo_measure"] == loadgen.SLO_MEASURE
    text = format_summary(s)
    assert ("SLO attainment per class (end-to-end, client side: send to the reply's last byte; an error or a "
            "timeout is a miss): realtime 0.500 (1/2), batch 0.500 (1/2), paid 0.000 (0/1)") in text
    assert "all classes 0.400 (the server's rlsched_slo_attainment_ratio is per class only)" in text
