"""``rlsched loadgen``: send a seeded rlsched workload to a vLLM-Omni image server over HTTP."""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path
from typing import Any

from rlsched import loadgen
from rlsched.argtypes import seed_arg
from rlsched.commands.args import command, print_json
from rlsched.errors import ConfigError
from rlsched.sim import load_scenario


@command("loadgen", "Send a scenario's (or a trace's) seeded requests to a vLLM-Omni server and report metrics.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="server base URL (http://127.0.0.1:8000) or the images endpoint")
    p.add_argument("--scenario", default="default", help="scenario (envs/NAME.yaml) or path: arrivals, shapes, SLOs")
    p.add_argument("--trace", help="replay a trace (Azure CSV, Hetu-DiT text, or rlsched CSV) instead")
    p.add_argument("--seed", type=seed_arg, default=0, help="workload seed (integer >= 0)")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply the arrival rate by X")
    p.add_argument("--duration", type=float, help="arrival window in the scenario's seconds (default: the scenario's)")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="send X times faster than the workload's clock (match the server's rlsched time_scale)")
    p.add_argument("--max-requests", type=int, default=1000, help="send at most this many requests")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one reply")
    p.add_argument("--workers", type=int, default=64, help="concurrent connections at most")
    p.add_argument("--model", help="the `model` field of each request (default: the server's)")
    p.add_argument("--stage-metrics", action="store_true",
                   help="ask the server for per-request stage metrics (queueing vs processing)")
    p.add_argument("--records", metavar="PATH", help="write one CSV row per request")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.max_requests < 1:
        raise ConfigError("--max-requests", "must be >= 1")
    if not args.time_scale > 0 or not args.timeout > 0:
        raise ConfigError("--time-scale/--timeout", "must be > 0")
    scenario = load_scenario(args.scenario)
    reqs = scenario.requests(args.seed, args.rate_scale, args.duration, args.trace)
    planned = loadgen.plan(reqs, args.time_scale, args.model, args.max_requests, args.stage_metrics)
    results = loadgen.run(args.url, planned, args.timeout, args.workers)
    summary = loadgen.summarize(results, args.time_scale)
    if args.records:
        write_records(results, args.records, args.time_scale)
    if args.json:
        print_json(summary)
    else:
        print(format_summary(summary))
    return 0 if summary["errors"] == 0 else 1


def format_summary(s: dict[str, Any]) -> str:
    unit = f" (x{s['time_scale']:g}: profile s)" if s["time_scale"] != 1 else ""
    lines = [f"requests {s['requests']}, completed {s['completed']}, errors {s['errors']} "
             f"in {s['duration_s']:.2f} s",
             f"throughput: {s['rps']:.3f} req/s, {s['ips']:.3f} images/s (wall)",
             "latency (wall s): " + ", ".join(f"p{q} {s[f'latency_p{q}_s']:.3f}" for q in (50, 90, 99))]
    if s["time_scale"] != 1:
        lines.append("latency" + unit + ": " + ", ".join(
            f"p{q} {s[f'latency_p{q}_s'] * s['time_scale']:.2f}" for q in (50, 90, 99)))
    att = s["slo_attainment"]
    lines.append("SLO attainment: " + ", ".join(f"{k} {v:.3f}" for k, v in att.items()))
    if "queue_delay_p50_s" in s or "processing_p50_s" in s:
        lines.append(f"server split (p50 wall s): queueing {s.get('queue_delay_p50_s', math.nan):.3f}, "
                     f"processing {s.get('processing_p50_s', math.nan):.3f}")
    else:
        lines.append("queueing vs processing: not reported by the server (try --stage-metrics)")
    for err in s["error_samples"]:
        lines.append(f"error: {err}")
    return "\n".join(lines)


def write_records(results: list[loadgen.Result], path: str, time_scale: float) -> None:
    out = Path(path)
    if not out.parent.is_dir():
        raise ConfigError("--records", f"folder {out.parent} does not exist")
    with out.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "priority", "slo_s", "sent_s", "done_s", "latency_s", "status", "images", "slo_met",
                    "error"])
        for r in results:
            met = r.ok and r.latency_s * time_scale <= r.slo_s
            w.writerow([r.index, r.priority, r.slo_s, f"{r.sent_s:.6f}", f"{r.done_s:.6f}", f"{r.latency_s:.6f}",
                        r.status, r.images, int(met), r.error])


