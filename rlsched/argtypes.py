"""Command-line argument types shared by the subcommands and the benches."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from rlsched.errors import ConfigError


def int_list(text: str, field: str, minimum: int = 0) -> list[int]:
    """``"1,2,3"`` as integers >= ``minimum``; anything else is a ``ConfigError`` naming ``field``."""
    try:
        values = [int(s) for s in text.split(",")]
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, not {text!r}") from None
    if min(values) < minimum:
        raise ConfigError(field, f"values must be >= {minimum}, not {min(values)}")
    return values


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer in [``minimum``, ``maximum``]; else ``ArgumentTypeError``
    (argparse prints ``argument --flag: must be an integer >= 1, not -5``, status 2)."""
    want = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, not {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {want}, not {value}")
        return value

    parse.__name__ = "int"
    return parse


def finite_float(minimum: float = 0.0, *, inclusive: bool = False,
                 maximum: float | None = None) -> Callable[[str], float]:
    """argparse type: a finite number > ``minimum`` (>= with ``inclusive``), <= ``maximum``;
    NaN and inf are refused (a NaN compares false everywhere and would pass a later check)."""
    want = f"a finite number {'>=' if inclusive else '>'} {minimum:g}"
    if maximum is not None:
        want += f" and <= {maximum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, not {text!r}") from None
        low_ok = value >= minimum if inclusive else value > minimum
        if not math.isfinite(value) or not low_ok or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {want}, not {text}")
        return value

    parse.__name__ = "float"
    return parse


positive_int = int_at_least(1)
positive_float = finite_float(0.0)
nonnegative_float = finite_float(0.0, inclusive=True)


seed_arg = int_at_least(0)
"""argparse type of a seed: numpy's generators take integers >= 0 only."""
