"""Command-line argument types shared by the subcommands and the benches."""

from __future__ import annotations

import argparse

from rlsched.errors import ConfigError


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
