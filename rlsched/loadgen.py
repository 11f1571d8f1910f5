"""Load generator for a vLLM-Omni image server (``/v1/images/generations``); stdlib only.

A seeded rlsched workload (a scenario or a trace, the simulator's exact ``Request`` stream)
becomes HTTP requests sent at their arrival times (÷ ``time_scale``), each carrying its
class and SLO in ``extra_params`` (``{"priority": ..., "slo_ms": ...}``), which vLLM-Omni
copies into ``sampling_params.extra_args`` for the rlsched plugin. ``run`` sends them from
a thread pool, bounded in count (``max_requests``), time (``timeout_s`` per whole request,
connect to last byte, so the run ends ``timeout_s`` after the last send) and reply size
(``max_reply_bytes``), checks each reply holds exactly one whole, decodable PNG of the requested size,
and ``summarize`` reports the seed design's metric set: RPS/IPS, latency p50/p90/p99, SLO
attainment per class (end-to-end, client side: ``SLO_MEASURE``), errors, and queueing vs processing delay
where the server reports it (``--stage-metrics``: vLLM-Omni's ``stage_durations``).

Times are wall seconds; with ``time_scale`` ≠ 1 (a time-scaled replay against
``CostProfileExecutor``), latencies and SLO checks are also given in the profile's seconds
(wall × ``time_scale``), the unit of ``slo_ms``.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import queue
import socket
import struct
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlsched.sim.request import PRIORITY_CLASSES, Request

PROMPT_PREFIX = "rlsched-loadgen request "
"""Each prompt is this plus the request's index, so a server-side log can name requests."""
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Planned:
    """One HTTP request: when to send it (wall seconds after start) and its JSON body."""

    index: int
    send_s: float
    priority: str
    slo_s: float
    """SLO in the profile's seconds (what ``slo_ms`` carries)."""
    height: int
    width: int
    body: dict[str, Any]


@dataclass
class Result:
    """What happened to one request (wall seconds after start)."""

    index: int
    priority: str
    slo_s: float
    sent_s: float = math.nan
    done_s: float = math.nan
    status: int = 0
    """HTTP status; 0: no reply (connection error or timeout)."""
    images: int = 0
    """Valid PNGs of the requested size in the reply."""
    error: str = ""
    server_metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.images == 1 and not self.error

    @property
    def latency_s(self) -> float:
        return self.done_s - self.sent_s


def request_body(req: Request, model: str | None = None, stage_metrics: bool = False) -> dict[str, Any]:
    """The ``/v1/images/generations`` body of an rlsched ``Request`` (class and SLO in ``extra_params``)."""
    body: dict[str, Any] = {
        "prompt": f"{PROMPT_PREFIX}{req.id}", "n": 1, "size": f"{req.width}x{req.height}",
        "num_inference_steps": req.num_inference_steps, "seed": req.id,
        # Qwen-Image's CFG knob; the plugin reads true_cfg_scale > 1 as CFG
        "true_cfg_scale": 4.0 if req.cfg else 1.0, "guidance_scale": 1.0,
        "extra_params": {"priority": req.priority, "slo_ms": round(req.slo_s * 1e3, 3)},
    }
    if model:
        body["model"] = model
    if stage_metrics:
        body["return_stage_metrics"] = True
    return body


def plan(requests: Sequence[Request], time_scale: float = 1.0, model: str | None = None,
         max_requests: int | None = None, stage_metrics: bool = False) -> list[Planned]:
    """Requests in arrival order with wall send times (arrival ÷ ``time_scale``), at most ``max_requests``."""
    if not time_scale > 0:
        raise ValueError(f"time_scale must be > 0, not {time_scale}")
    reqs = sorted(requests, key=lambda r: (r.arrival_s, r.id))[:max_requests]
    return [Planned(r.id, r.arrival_s / time_scale, r.priority, r.slo_s, r.height, r.width,
                    request_body(r, model, stage_metrics)) for r in reqs]


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) in a PNG's header, or None if ``data`` does not start as one (the header
    alone: ``png_problem`` says whether the whole image decodes)."""
    if len(data) < 24 or not data.startswith(PNG_MAGIC) or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# A reply counts as an image only if the whole PNG decodes, not its header alone (a reply that was
# a header and nothing else counted as a completed image). Checked with zlib, not Pillow: loadgen
# is stdlib-only (it runs on a client host from a core install, whose dependencies have no Pillow;
# no extra brings it), and a decoder present on one host and absent on another would count the
# same reply two ways. The check is a decode in all but the unfiltering, which cannot fail: every
# chunk's CRC, the IHDR fields, the palette a palette image needs, the IDAT stream inflated to its
# end and to exactly the bytes the header's size, colour type, bit depth and interlacing give, and
# every scanline's filter type (0..4). tests/test_loadgen.py checks that Pillow decodes every
# image it counts; it is stricter than Pillow, which reads leniently, where a reply is cut short
# or malformed (no IEND, an unended zlib stream, extra image data, a palette image without PLTE).
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
"""Adam7 passes: (x start, y start, x step, y step)."""


def png_problem(data: bytes, width: int, height: int) -> str | None:
    """None when ``data`` is a whole PNG of ``width``×``height`` that decodes; else why not."""
    if not data.startswith(PNG_MAGIC):
        return "not a PNG"
    chunks, pos = [], len(PNG_MAGIC)
    while pos < len(data):
        if pos + 12 > len(data):
            return "truncated (a chunk cut short)"
        length, kind = struct.unpack(">I", data[pos:pos + 4])[0], data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if len(body) < length or pos + 12 + length > len(data):
            return f"truncated (in its {kind.decode('latin-1')} chunk)"
        if struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0] != zlib.crc32(kind + body):
            return f"corrupt (its {kind.decode('latin-1')} chunk fails its CRC)"
        chunks.append((kind, body))
        pos += 12 + length
        if kind == b"IEND":
            break
    kinds = [k for k, _ in chunks]
    if not kinds or kinds[0] != b"IHDR" or len(chunks[0][1]) != 13:
        return "no header (IHDR) chunk first"
    if kinds[-1] != b"IEND":
        return "truncated (no IEND chunk)"
    w, h, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if (w, h) != (width, height):
        return f"{w}x{h}, not the {width}x{height} asked for"
    if depth not in _DEPTHS.get(colour, ()) or compression or filtering or interlace > 1:
        return f"an invalid header (colour type {colour}, bit depth {depth})"
    if colour == 3 and b"PLTE" not in kinds[:kinds.index(b"IDAT") if b"IDAT" in kinds else None]:
        return "a palette image without its palette"
    if b"IDAT" not in kinds:
        return "no image data (IDAT)"
    return _inflate_problem(b"".join(b for k, b in chunks if k == b"IDAT"), w, h, depth * _CHANNELS[colour],
                            bool(interlace))


def _inflate_problem(stream: bytes, width: int, height: int, bits: int, interlaced: bool) -> str | None:
    rows = []  # (row bytes, rows) per pass
    for x0, y0, dx, dy in _ADAM7 if interlaced else ((0, 0, 1, 1),):
        pw, ph = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if pw > 0 and ph > 0:
            rows.append((-(-pw * bits // 8), ph))
    expected = sum((1 + rb) * n for rb, n in rows)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(stream, expected + 1)  # bounded: never more than the image's own size
        if len(raw) == expected and not inflater.eof:  # the stream's end (last block, checksum) not read yet
            raw += inflater.decompress(inflater.unconsumed_tail, 1)
    except zlib.error as exc:
        return f"corrupt image data ({exc})"
    if len(raw) > expected:
        return "image data longer than its size"
    if len(raw) < expected or not inflater.eof:
        return f"truncated image data ({len(raw)} of {expected} bytes{'' if inflater.eof else ', stream unended'})"
    pos = 0
    for row_bytes, n in rows:
        for _ in range(n):
            if raw[pos] > 4:
                return f"corrupt image data (filter type {raw[pos]})"
            pos += 1 + row_bytes
    return None


def count_images(reply: Any, width: int, height: int) -> int:
    """Whole, decodable PNGs of ``width``×``height`` in an OpenAI images reply (``data[].b64_json``)."""
    return image_check(reply, width, height)[0]


def image_check(reply: Any, width: int, height: int) -> tuple[int, list[str]]:
    """(how many images of the reply are whole PNGs of ``width``×``height``, why each other is not)."""
    items = reply.get("data") if isinstance(reply, dict) else None
    n, problems = 0, []
    for i, item in enumerate(items if isinstance(items, list) else []):
        try:
            data = base64.b64decode(item.get("b64_json") or "", validate=True)
        except (ValueError, AttributeError):
            problems.append(f"image {i}: not base64")
            continue
        why = png_problem(data, width, height)
        if why is None:
            n += 1
        else:
            problems.append(f"image {i}: {why}")
    return n, problems


DEFAULT_MAX_REPLY_BYTES = 64 * 2**20
"""Replies above this are refused unread (``--max-reply-mb``): one 1024x1024 PNG in base64 is a
few MB, and an unbounded read of a 1.5 GB reply took 4.3 GB of memory."""
_CHUNK = 1 << 16


class ReplyTooLarge(OSError):
    """A reply over the size cap; its request fails, the run goes on."""


class RequestTimeout(TimeoutError):
    """No complete reply within the whole-request deadline."""


def post_json(url: str, body: dict[str, Any], timeout_s: float, max_bytes: int = DEFAULT_MAX_REPLY_BYTES,
              clock: Callable[[], float] = time.monotonic) -> tuple[int, Any]:
    """POST ``body``; (status, parsed JSON or text). ``timeout_s`` bounds the whole request,
    connecting to the last byte (a server trickling a byte a second used to keep one open
    forever: a socket timeout only bounds each read); ``max_bytes`` bounds the reply.
    Raises ``OSError`` (``RequestTimeout``, ``ReplyTooLarge``, connection errors) on no usable reply."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    data = json.dumps(body).encode()
    deadline = clock() + timeout_s
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    port = parts.port or (443 if parts.scheme == "https" else 80)  # explicit: a bare IPv6 host has colons
    conn = conn_cls(parts.hostname, port, timeout=timeout_s)
    expired = threading.Event()

    def expire() -> None:
        # wakes a read blocked on a silent or trickling server: shutdown ends it at once
        expired.set()
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        if expired.is_set():
            raise RequestTimeout(f"no reply within the {timeout_s:g} s request deadline")
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        declared = resp.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise ReplyTooLarge(f"reply of {int(declared)} bytes exceeds the {_mib(max_bytes)} cap (--max-reply-mb)")
        raw = bytearray()
        while True:
            chunk = resp.read1(_CHUNK)
            if not chunk:
                break
            raw += chunk
            if len(raw) > max_bytes:
                raise ReplyTooLarge(f"reply exceeds the {_mib(max_bytes)} cap (--max-reply-mb); stopped reading")
            if clock() > deadline:
                raise RequestTimeout(f"reply not complete within the {timeout_s:g} s request deadline")
        if expired.is_set():  # the read ended because the deadline shut the socket
            raise RequestTimeout(f"reply not complete within the {timeout_s:g} s request deadline")
        status = resp.status
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set() and not isinstance(exc, (RequestTimeout, ReplyTooLarge)):
            raise RequestTimeout(f"no complete reply within the {timeout_s:g} s request deadline") from exc
        if isinstance(exc, http.client.HTTPException):
            raise ConnectionError(f"{type(exc).__name__}: {exc}") from exc
        raise
    finally:
        timer.cancel()
        conn.close()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, bytes(raw).decode(errors="replace")[:200]


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def images_url(base: str) -> str:
    """``http://host:port`` or a full endpoint URL → the images endpoint; anything but an
    http(s) URL with a host is a ``ValueError``."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL with a host, not {base!r}")
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number or out of range)
    except ValueError as exc:
        raise ValueError(f"{base!r}: {exc}") from None
    base = base.rstrip("/")
    return base if base.endswith("/images/generations") else f"{base}/v1/images/generations"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during ``run``: ``results`` holds the requests that finished (plan order), ``in_flight``
    and ``unsent`` count the others. Sending stops at once; replies in flight are not awaited."""

    def __init__(self, results: list[Result], in_flight: int, unsent: int) -> None:
        super().__init__(f"interrupted: {len(results)} finished, {in_flight} in flight, {unsent} not sent")
        self.results, self.in_flight, self.unsent = results, in_flight, unsent


def run(url: str, planned: Sequence[Planned], timeout_s: float = 120.0, workers: int = 64,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
        on_result: Callable[[Result], None] | None = None,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> list[Result]:
    """Send every planned request at its time (never early); one ``Result`` each, in plan order.

    ``on_result`` is called with each request as it finishes (from a worker thread, one call
    at a time), so a caller can write records as they come. Every request ends within
    ``timeout_s`` of its send. On Ctrl-C, raises ``Interrupted`` with the finished ones."""
    endpoint, start = images_url(url), clock()
    results = [Result(p.index, p.priority, p.slo_s) for p in planned]
    lock = threading.Lock()
    done = threading.Condition(lock)
    finished: list[int] = []
    callback_errors: list[BaseException] = []
    jobs: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def send(i: int) -> None:
        p, res = planned[i], results[i]
        with lock:
            res.sent_s = clock() - start
        try:
            res.status, reply = post_json(endpoint, p.body, timeout_s, max_reply_bytes, clock)
            res.images, problems = image_check(reply, p.width, p.height)
            if res.status != 200:
                res.error = f"HTTP {res.status}: {str(reply)[:120]}"
            elif res.images != 1:
                res.error = (f"{res.images} whole {p.width}x{p.height} PNGs in the reply (expected 1)"
                             + (f": {'; '.join(problems[:3])}" if problems else ""))
            if isinstance(reply, dict) and isinstance(reply.get("metrics"), dict):
                res.server_metrics = reply["metrics"]
        except Exception as exc:  # noqa: BLE001 (any failure is this request's error, never a silent one)
            res.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            res.done_s = clock() - start
        with done:
            finished.append(i)
            if on_result is not None:
                try:
                    on_result(res)
                except Exception as exc:  # noqa: BLE001 (a failed record write must not hang the run)
                    callback_errors.append(exc)
            done.notify_all()

    def worker() -> None:
        while (i := jobs.get()) is not None:
            send(i)

    # daemon threads: on Ctrl-C the process exits without waiting for replies still in flight
    threads = [threading.Thread(target=worker, daemon=True, name=f"loadgen-{k}")
               for k in range(max(1, min(workers, len(planned) or 1)))]
    for t in threads:
        t.start()
    submitted = 0
    try:
        for i, p in enumerate(planned):
            delay = p.send_s - (clock() - start)
            if delay > 0:
                sleep(delay)
            jobs.put(i)
            submitted += 1
        with done:
            while len(finished) < len(planned) and not callback_errors:
                done.wait(0.5)
    except KeyboardInterrupt:
        with lock:
            got = sorted(finished)
        raise Interrupted([results[i] for i in got], submitted - len(got), len(planned) - submitted) from None
    finally:
        for _ in threads:
            jobs.put(None)
    if callback_errors:
        raise callback_errors[0]
    return results


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(results: Sequence[Result], time_scale: float = 1.0) -> dict[str, Any]:
    """RPS/IPS, latency percentiles (wall s; ``*_scaled`` in profile s), SLO attainment per class,
    errors, and the server's queueing/processing split when replies carried stage metrics."""
    ok = [r for r in results if r.ok]
    span = max((r.done_s for r in results), default=0.0) - min((r.sent_s for r in results), default=0.0)
    lat = [r.latency_s for r in ok]
    out: dict[str, Any] = {
        "requests": len(results), "completed": len(ok), "errors": len(results) - len(ok),
        "duration_s": span, "rps": len(ok) / span if span > 0 else math.nan,
        "ips": sum(r.images for r in ok) / span if span > 0 else math.nan,
        "time_scale": time_scale,
    }
    for q in (50, 90, 99):
        out[f"latency_p{q}_s"] = _pct(lat, q)
    out["slo_attainment"] = _attainment(results, time_scale)
    counts = _slo_counts(results, time_scale)
    out["slo_met"], out["slo_requests"] = ({cls: c[k] for cls, c in counts.items()} for k in (0, 1))
    out["slo_measure"] = SLO_MEASURE
    out.update(_server_split(ok))
    out["error_samples"] = sorted({r.error for r in results if r.error})[:5]
    return out


SLO_MEASURE = ("end-to-end, client side: send to the reply's last byte; an error or a timeout is a miss")
"""What loadgen's SLO attainment measures. The server's ``rlsched_slo_attainment_ratio{priority}`` counts the same
requests per class (an abort after the deadline, a client's timeout, is a miss there too) but times each inside the
diffusion stage, from its arrival there to its last step: without the HTTP, API-server and post-processing time
(multiplied by ``time_scale`` here), so it reads the same or higher (docs/e2e.md)."""


def classes_of(results: Sequence[Result]) -> list[str]:
    """The classes the requests name: the shipped ones first in their order, then any other by name."""
    named = {r.priority for r in results}
    return [c for c in PRIORITY_CLASSES if c in named] + sorted(named - set(PRIORITY_CLASSES))


def _attainment(results: Sequence[Result], time_scale: float) -> dict[str, float]:
    """Per class, and ``all`` over every class: the share of requests served within their SLO (``SLO_MEASURE``)."""
    return {cls: met / n for cls, (met, n) in _slo_counts(results, time_scale).items()}


def _slo_counts(results: Sequence[Result], time_scale: float) -> dict[str, tuple[int, int]]:
    """Per class, and ``all``: (requests within their SLO, requests)."""
    out = {}
    for cls in (*classes_of(results), "all"):
        rs = [r for r in results if cls in ("all", r.priority)]
        if rs:
            out[cls] = (sum(r.ok and r.latency_s * time_scale <= r.slo_s for r in rs), len(rs))
    return out


def _server_split(ok: Sequence[Result]) -> dict[str, float]:
    """Queueing vs processing delay (wall s, medians) from replies' stage metrics, if any.

    vLLM-Omni 0.30 (``return_stage_metrics``) reports ``stage_durations.queue_wait_ms`` (before the
    stage) and ``stage_N_gen_ms`` (the stage, including the wait in the diffusion scheduler's queue).
    """
    queue, proc = [], []
    for r in ok:
        durations = r.server_metrics.get("stage_durations")
        if not isinstance(durations, dict):
            continue
        wait = durations.get("queue_wait_ms")
        gen = [v for k, v in durations.items() if k.startswith("stage_") and k.endswith("_gen_ms")
               and isinstance(v, (int, float))]
        if isinstance(wait, (int, float)) and math.isfinite(wait):
            queue.append(wait / 1e3)
        if gen:
            proc.append(sum(gen) / 1e3)
    out = {}
    if queue:
        out["queue_delay_p50_s"] = _pct(queue, 50)
    if proc:
        out["processing_p50_s"] = _pct(proc, 50)
    return out


__all__ = ["DEFAULT_MAX_REPLY_BYTES", "PROMPT_PREFIX", "SLO_MEASURE", "Interrupted", "Planned", "ReplyTooLarge",
           "RequestTimeout", "Result", "classes_of", "count_images", "image_check", "images_url", "plan", "png_problem",
           "png_size", "request_body", "run", "summarize"]
