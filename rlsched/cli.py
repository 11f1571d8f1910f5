"""``rlsched`` command line: parse, load config, call the library, print."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rlsched.errors import ConfigError, RlschedError

Handler = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], str]] = {}


def command(name: str, help: str) -> Callable[[Callable[[argparse.ArgumentParser], None]], Any]:
    def deco(add_args: Callable[[argparse.ArgumentParser], None]) -> Callable[[argparse.ArgumentParser], None]:
        _COMMANDS[name] = (add_args, help)
        return add_args
    return deco


def build_parser() -> argparse.ArgumentParser:
    import rlsched.commands  # noqa: F401  (registers the subcommands)
    parser = argparse.ArgumentParser(
        prog="rlsched", description="Learned batch scheduling for vLLM-Omni's diffusion stage.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_args, help_text) in _COMMANDS.items():
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


def seed_arg(text: str) -> int:
    """argparse type of a seed: numpy's generators take integers >= 0 only."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, not {value}")
    return value


def int_list(text: str, field: str, minimum: int = 0) -> list[int]:
    """``"1,2,3"`` as integers >= ``minimum``; anything else is a ``ConfigError`` naming ``field``."""
    try:
        values = [int(s) for s in text.split(",")]
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, not {text!r}") from None
    if min(values) < minimum:
        raise ConfigError(field, f"values must be >= {minimum}, not {min(values)}")
    return values


def print_json(obj: Any) -> None:
    from rlsched.sim.metrics import json_safe

    print(json.dumps(json_safe(obj), default=_jsonable))


def _jsonable(obj: Any) -> Any:
    return str(obj)


if __name__ == "__main__":
    raise SystemExit(main())
