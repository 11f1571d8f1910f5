"""``rlsched`` command line: parse, load config, call the library, print."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rlsched.commands import COMMANDS
from rlsched.errors import RlschedError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsched", description="Learned batch scheduling for vLLM-Omni's diffusion stage.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_args, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        add_args(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except RlschedError as exc:
        print(f"rlsched: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
