"""``rlsched`` command line: parse, load config, call the library, print."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rlsched import __version__
from rlsched.commands import COMMANDS
from rlsched.commands.args import HelpFormatter
from rlsched.errors import MissingExtra, RlschedError

EXAMPLES: dict[str, tuple[str, ...]] = {
    "simulate": ("rlsched simulate --scenario default --compare fifo,edf,static:agents/tuned/default.json",
                 "rlsched simulate --scenario my-workload.yaml --policy edf --seed 0 --json",
                 "rlsched simulate --scenario qwen-image-8gpu --replicas 8 --policy edf@rlsched",
                 "rlsched simulate --scenario default --truth time_scale=1.3 --compare "
                 "'static:agents/tuned/default.json,static:agents/tuned/default.json;calibrate=off'"),
    "eval": ("rlsched eval --scenarios default,bursty --policies fifo,edf,rl:checkpoints/default --out results/mine",),
    "tune": ("rlsched tune --scenario default --trials 40 --seeds 0,1,2,3,4,5 --loads 0.5,1,1.5 "
             "--out agents/tuned/mine.json",),
    "plan": ("rlsched plan --scenario qwen-image-8gpu --gpus 8 --policy edf@rlsched --out plan",),
    "label": ("rlsched label --episodes 8 --out runs/labels.npz",),
    "learn": ("rlsched learn --agent agents/pick.yaml --run-dir runs/pick --out checkpoints/mine",),
    "train": ("rlsched train --agent agents/ppo.yaml --run-dir runs/default",),
    "export": ("rlsched export runs/default --out checkpoints/default",),
    "deploy": ("rlsched deploy --policy edf --profile qwen-image-h200-vllm-omni --max-num-seqs 4 --out deploy.yaml",
               "rlsched deploy --replicas 2 --devices 0,1 --policy edf --router rlsched "
               "--profile qwen-image-h200-vllm-omni --out deploy.yaml"),
    "serve-cpu": ("rlsched serve-cpu --config deploy.yaml --port 8000",),
    "loadgen": ("rlsched loadgen http://127.0.0.1:8000 --scenario default --duration 600 --max-requests 50",),
    "profile": ("rlsched profile predict qwen-image-h800-sdpa --height 2048 --width 2048 --steps 50 --cfg",
                "rlsched profile fit envs/profiles/measurements/wan21-t2v-14b-h100 --out /tmp/wan.yaml"),
    "bench": ("rlsched bench sim --json",),
}
"""Each subcommand's ``--help`` epilog (tests/cli/test_cli_conventions.py parses every one)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsched", description="Learned batch scheduling for vLLM-Omni's diffusion stage.",
        formatter_class=HelpFormatter,
        epilog="Start with: rlsched simulate --scenario default --compare fifo,edf. "
               "Each command's --help ends with examples.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_args, help_text) in COMMANDS.items():
        examples = "\n".join(f"  {line}" for line in EXAMPLES.get(name, ()))
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter,
                           epilog=f"examples:\n{examples}" if examples else None)
        add_args(p)
    return parser


EXTRA_OF = {"torch": "rl", "gymnasium": "rl", "stable_baselines3": "rl", "sb3_contrib": "rl", "tensorboard": "rl",
            "matplotlib": "rl", "scipy": "rl", "tqdm": "rl", "optuna": "tune",
            "ray": "ray", "pynvml": "nvml", "prometheus_client": "serve", "diffusers": "profile"}
"""Top-level module -> the extra that installs it (pyproject.toml's optional-dependencies): a serving-only
install (``pip install rlsched``) asked for ``train`` says what to install, not an import traceback."""


INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C: the shell's own (128 + SIGINT)."""


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except RlschedError as exc:
        print(f"rlsched: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in EXTRA_OF:
            raise
        print(f"rlsched: error: {MissingExtra(f'rlsched {args.command}', top, EXTRA_OF[top])}", file=sys.stderr)
        return 2
    except BaseException as exc:
        if not interrupted(exc):
            raise
        # every output is written whole or not at all (rlsched.atomic), so one line says it all
        print(f"rlsched: interrupted: rlsched {args.command} stopped; each file it wrote is whole, the rest "
              "were not written", file=sys.stderr)
        return INTERRUPTED


def interrupted(exc: BaseException | None) -> bool:
    """Ctrl-C: a ``KeyboardInterrupt``, also one that landed inside a lock's release or a library's
    handler, which then raised something else while handling it (CPython's ``RuntimeError: cannot
    release un-acquired lock``)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__context__
    return False


if __name__ == "__main__":
    raise SystemExit(main())
