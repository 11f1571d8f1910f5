"""What every subcommand module shares: the registry decorator and argument types.

Subcommands register with ``command``; ``rlsched.cli`` builds the parser from the
registry, so the command modules never import the CLI (no import circle).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], str]] = {}
"""Subcommand name -> (its argument builder, its help line), in registration order."""


def command(name: str, help: str) -> Callable[[Callable[[argparse.ArgumentParser], None]], Any]:
    def deco(add_args: Callable[[argparse.ArgumentParser], None]) -> Callable[[argparse.ArgumentParser], None]:
        COMMANDS[name] = (add_args, help)
        return add_args
    return deco


def print_json(obj: Any) -> None:
    from rlsched.sim.metrics import json_safe

    print(json.dumps(json_safe(obj), default=_jsonable))


def _jsonable(obj: Any) -> Any:
    return str(obj)
