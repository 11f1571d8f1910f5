"""``rlsched loadgen``: send a seeded rlsched workload to a vLLM-Omni image server over HTTP."""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from rlsched import bounds, loadgen
from rlsched.argtypes import flag, seed_arg
from rlsched.commands.args import check_out_file, command, print_json, renamed, stream_open
from rlsched.errors import ConfigError
from rlsched.sim import load_scenario

MAX_WORKERS = bounds.MAX_PROCESSES
"""Concurrent connections above this are a typo (each is a thread and a socket)."""
RECORD_FIELDS = ("id", "priority", "slo_s", "sent_s", "done_s", "latency_s", "status", "images", "slo_met", "error")


@command("loadgen", "Send a scenario's (or a trace's) seeded requests to a vLLM-Omni server and report metrics.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="server base URL (http://127.0.0.1:8000) or the images endpoint")
    p.add_argument("--scenario", default="default", help="scenario (envs/NAME.yaml) or path: arrivals, shapes, SLOs")
    p.add_argument("--trace", help="replay a trace (Azure CSV, Hetu-DiT text, or rlsched CSV) instead")
    p.add_argument("--seed", type=seed_arg, default=0, help="workload seed (integer >= 0)")
    renamed(p, p.add_argument("--load", dest="rate_scale", metavar="X", type=flag(bounds.SCALE), default=1.0,
                              help="multiply the arrival rate by X"), "--rate-scale")
    p.add_argument("--duration", type=flag(bounds.DURATION_S),
                   help="arrival window in the scenario's seconds (default: the scenario's)")
    p.add_argument("--time-scale", type=flag(bounds.SCALE), default=1.0,
                   help="send X times faster than the workload's clock (match the server's rlsched time_scale)")
    p.add_argument("--max-requests", type=flag(bounds.REQUESTS), default=1000, help="send at most this many requests")
    p.add_argument("--timeout", type=flag(bounds.TIMEOUT_S), default=300.0,
                   help="seconds one request may take in all, from connecting to the reply's last byte "
                        "(a deadline, not a per-read timeout)")
    p.add_argument("--max-reply-mb", type=flag(bounds.REPLY_MB),
                   default=loadgen.DEFAULT_MAX_REPLY_BYTES / 2**20,
                   help="a larger reply fails its request unread (MiB)")
    renamed(p, p.add_argument("--connections", dest="workers", type=flag(bounds.WORKERS), default=64,
                              help=f"concurrent connections at most (1..{MAX_WORKERS})"), "--workers")
    p.add_argument("--model", help="the `model` field of each request (default: the server's)")
    p.add_argument("--stage-metrics", action="store_true",
                   help="ask the server for per-request stage metrics (queueing vs processing)")
    p.add_argument("--records", metavar="PATH",
                   help="write one CSV row per request, each as its reply ends (a stopped run keeps its rows)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        loadgen.images_url(args.url)
    except ValueError as exc:
        raise ConfigError("url", str(exc)) from None
    records = check_out_file(args.records, "--records") if args.records else None
    scenario = load_scenario(args.scenario)
    reqs = scenario.requests(args.seed, args.rate_scale, args.duration, args.trace)
    planned = loadgen.plan(reqs, args.time_scale, args.model, args.max_requests, args.stage_metrics)
    interrupted: loadgen.Interrupted | None = None
    with _records(records, args.time_scale) as write:
        try:
            results = loadgen.run(args.url, planned, args.timeout, args.workers, on_result=write,
                                  max_reply_bytes=int(args.max_reply_mb * 2**20))
        except loadgen.Interrupted as exc:
            interrupted, results = exc, exc.results
    summary = loadgen.summarize(results, args.time_scale)
    if interrupted is not None:
        summary.update(interrupted=True, in_flight=interrupted.in_flight, unsent=interrupted.unsent)
    if args.json:
        print_json(summary)
    else:
        print(format_summary(summary))
    if interrupted is not None:
        print(f"rlsched: interrupted: the summary covers the {len(results)} requests that finished; "
              f"{interrupted.in_flight} in flight and {interrupted.unsent} not sent are left out"
              + (f"; records in {records}" if records else ""), file=sys.stderr)
        return 130  # the shell's status for Ctrl-C
    return 0 if summary["errors"] == 0 else 1


@contextlib.contextmanager
def _records(path: Path | None, time_scale: float) -> Iterator[Any]:
    """A per-result writer of the records CSV, line-buffered: each row is on disk as soon as its
    request ends, so Ctrl-C or a crash keeps every row written so far."""
    if path is None:
        yield None
        return
    with stream_open(path, "w", "--records", newline="", buffering=1) as fh:
        w = csv.writer(fh)
        w.writerow(RECORD_FIELDS)
        yield lambda r: _write_row(w, fh, r, time_scale)


def _write_row(w: Any, fh: TextIO, r: loadgen.Result, time_scale: float) -> None:
    met = r.ok and r.latency_s * time_scale <= r.slo_s
    w.writerow([r.index, r.priority, r.slo_s, f"{r.sent_s:.6f}", f"{r.done_s:.6f}", f"{r.latency_s:.6f}",
                r.status, r.images, int(met), r.error])
    fh.flush()


def format_summary(s: dict[str, Any]) -> str:
    unit = f" (x{s['time_scale']:g}: profile s)" if s["time_scale"] != 1 else ""
    stopped = (f" (interrupted: {s['in_flight']} in flight and {s['unsent']} not sent left out)"
               if s.get("interrupted") else "")
    lines = [f"requests {s['requests']}, completed {s['completed']}, errors {s['errors']} "
             f"in {s['duration_s']:.2f} s{stopped}",
             f"throughput: {s['rps']:.3f} req/s, {s['ips']:.3f} images/s (wall)",
             "latency (wall s): " + ", ".join(f"p{q} {s[f'latency_p{q}_s']:.3f}" for q in (50, 90, 99))]
    if s["time_scale"] != 1:
        lines.append("latency" + unit + ": " + ", ".join(
            f"p{q} {s[f'latency_p{q}_s'] * s['time_scale']:.2f}" for q in (50, 90, 99)))
    att, met, n = s["slo_attainment"], s.get("slo_met", {}), s.get("slo_requests", {})
    per_class = [f"{k} {v:.3f}" + (f" ({met[k]}/{n[k]})" if k in met and k in n else "")
                 for k, v in att.items() if k != "all"]
    lines.append(f"SLO attainment per class ({loadgen.SLO_MEASURE}): " + ", ".join(per_class))
    if "all" in att:
        lines.append(f"  all classes {att['all']:.3f} (the server's rlsched_slo_attainment_ratio is per class only)")
    if "queue_delay_p50_s" in s or "processing_p50_s" in s:
        lines.append(f"server split (p50 wall s): queueing {s.get('queue_delay_p50_s', math.nan):.3f}, "
                     f"processing {s.get('processing_p50_s', math.nan):.3f}")
    else:
        lines.append("queueing vs processing: not reported by the server (try --stage-metrics)")
    for err in s["error_samples"]:
        lines.append(f"error: {err}")
    return "\n".join(lines)


def write_records(results: list[loadgen.Result], path: str, time_scale: float) -> None:
    """All of ``results`` at once (``run`` writes them as they come)."""
    out = check_out_file(path, "--records")
    with _records(out, time_scale) as write:
        for r in results:
            write(r)
