"""``rlsched serve-cpu``: a real ``vllm serve --omni`` with the plugin on a machine without a GPU, until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlsched import bounds
from rlsched.argtypes import flag
from rlsched.commands.args import command
from rlsched.integrations.vllm_omni import cpu_server

INTERRUPTED = 130
"""The exit status after Ctrl-C: the shell's own (128 + SIGINT)."""
TRY_REQUEST = {"prompt": "a lighthouse at dusk", "size": "512x512", "num_inference_steps": 20,
               "extra_params": {"priority": "realtime", "slo_ms": 60000}}


@command("serve-cpu", "Serve a `rlsched deploy --cpu` config with vLLM-Omni on this machine, no GPU, until Ctrl-C.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="the deploy YAML `rlsched deploy --cpu ... --out FILE` wrote")
    p.add_argument("--port", type=flag(bounds.PORT), default=8000, help="the HTTP port of the API server")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="where to build the tiny model the server loads (configs only, no weights; default "
                        "$XDG_CACHE_HOME/rlsched/tiny-qwen-image); its folder name is the served model's name")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = Path(args.config).resolve()
    sid, stage = cpu_server.read_cpu_stage(config)
    cpu_server.check_port_free(args.port, "--port")
    for port in cpu_server.metrics_ports(stage):
        cpu_server.check_port_free(port, f"{config}: extras.rlsched.metrics_port")
    vllm = cpu_server.vllm_executable()
    model = cpu_server.build_tiny_model((args.model_dir or cpu_server.default_model_dir()).resolve())
    url = f"http://127.0.0.1:{args.port}"
    section = stage["extras"]["rlsched"]
    print(f"rlsched serve-cpu: vllm serve {model} --omni on {url}: policy {section.get('policy', 'fifo')}, profile "
          f"{section.get('profile')}, {stage.get('num_replicas', 1)} replica(s), executor "
          f"{cpu_server.EXECUTOR.rsplit('.', 1)[1]} (no GPU); starting (30-90 s), its log follows on stderr",
          flush=True)
    cmd = cpu_server.serve_command(vllm, model, args.port, {sid: stage})
    with _sigterm_as_interrupt():
        proc = cpu_server.start(cmd, cpu_server.server_env(), Path.cwd(), sys.stderr.fileno())
        try:
            cpu_server.wait_healthy(proc, url)
            print(ready_lines(url, stage, proc.pid), flush=True)
            status = proc.wait()
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
            cpu_server.stop_group(proc)
            left = cpu_server.group_members(proc.pid)
            print(f"\nrlsched: interrupted: serve-cpu stopped vllm serve (process group {proc.pid}"
                  + (f"; {len(left)} process(es) still alive: {left}" if left else ", no process left") + ")",
                  file=sys.stderr)
            return INTERRUPTED
        except BaseException:
            cpu_server.stop_group(proc)
            raise
    cpu_server.stop_group(proc)  # whatever the API server left behind
    print(f"rlsched serve-cpu: vllm serve exited with status {status}", file=sys.stderr)
    return status or 1


def ready_lines(url: str, stage: dict[str, Any], pgid: int) -> str:
    """What to try once the server answers: a request, the metrics, a seeded workload."""
    section = stage["extras"]["rlsched"]
    scale = float(section.get("time_scale", 1.0) or 1.0)
    lines = [f"rlsched serve-cpu: ready on {url} (process group {pgid}); Ctrl-C stops it", "try:",
             f"  curl -s {url}/v1/images/generations -H 'Content-Type: application/json' "
             f"-d '{json.dumps(TRY_REQUEST)}' | head -c 200; echo"]
    ports = cpu_server.metrics_ports(stage)
    if ports:
        lines.append(f"  curl -s http://127.0.0.1:{ports[0]}/metrics | grep '^rlsched_'")
    lines.append(f"  rlsched loadgen {url} --scenario default --duration 600 --max-requests 50"
                 + (f" --time-scale {scale:g}" if scale != 1 else ""))
    return "\n".join(lines)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Ctrl-C stops the server, also where the shell started this command with SIGINT ignored (``cmd &``), and
    SIGTERM (a supervisor, ``timeout``) does the same; the old handlers come back after."""
    old = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
