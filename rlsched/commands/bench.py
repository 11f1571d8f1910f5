"""``rlsched bench``: speed benchmarks (the registry and the benches: ``rlsched.bench``)."""

from __future__ import annotations

import argparse

from rlsched import bounds
from rlsched.argtypes import flag
from rlsched.bench import MODULES, TEXT, VLLM_TIER, check_tier, load
from rlsched.commands.args import command, print_json

_VLLM = ", ".join(VLLM_TIER)


@command("bench", f"Speed benchmarks: {', '.join(MODULES)} ({_VLLM}: the vLLM tier).")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=tuple(MODULES),
                   help=f"what to measure (plugin: schedule() in vLLM-Omni's schedulers; {_VLLM} need .venv-vllm)")
    p.add_argument("--policies", default="", help="backlog, plugin: comma-separated policies (default: every "
                                                  "built-in / every shipped one); decision: the policy to time "
                                                  "(default: rl:checkpoints/default)")
    p.add_argument("--repeats", type=flag(bounds.COUNT), default=5, help="timed repetitions (the median is reported)")
    p.add_argument("--calls", type=flag(bounds.CALLS), default=None,
                   help="plugin: timed schedule() calls per cell and round (default 400); router: requests "
                        "per replica count (default the larger of 4000 and ten per replica)")
    p.add_argument("--rounds", type=flag(bounds.COUNT), default=1,
                   help="plugin: run the whole grid this many times, queue depths in alternating order, and pool "
                        "each cell's calls (a drifting machine then does not favour the depths run first)")
    p.add_argument("--queues", default="", help="plugin: comma-separated waiting-queue depths "
                                                "(default 16,256,1024,4096); central: requests parked in "
                                                "one burst (default 200)")
    p.add_argument("--modes", default="request,step", help="plugin: request, step or both")
    p.add_argument("--decision-threads", default="auto",
                   help="plugin: comma-separated PluginConfig.decision_thread values to time side by side, "
                        "interleaved (auto, engine, worker; default auto, as served)")
    p.add_argument("--calibrate", choices=("on", "off"), default="on",
                   help="plugin: online calibration as users deploy it (on, the default: the fake GPU's batch "
                        "durations drift, so new calibration versions keep coming) or off (the shipped profile)")
    p.add_argument("--replicas", default="", help="router: comma-separated fake replica counts "
                                                   "(default 8,64,1024)")
    p.add_argument("--fleet-load", type=flag(bounds.SCALE), default=None,
                   help="router: arrivals as a share of the fake fleet's capacity in full batches (default 0.8)")
    p.add_argument("--load-threads", type=flag(bounds.COUNT), default=1,
                   help="central: Python threads computing beside the orchestrator's (the API server's other work)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    check_tier(args.what)
    fn = load(args.what)
    if fn is None:
        raise SystemExit(f"rlsched bench {args.what}: not available in this install (an optional extra is missing)")
    result = fn(args)
    if args.json:
        print_json(result)
    elif args.what in TEXT:
        print(TEXT[args.what](result))
    else:
        for key, value in result.items():
            print(f"{key:>24}: {value}")
    return 0
