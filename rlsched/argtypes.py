"""Command-line argument types, each built from one bound of ``rlsched.bounds`` (the table the
scenario schema and the plugin's settings use too): ``type=flag(bounds.REPLICAS)``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rlsched import bounds
from rlsched.bounds import Bound
from rlsched.errors import ConfigError


def flag(bound: Bound) -> Callable[[str], Any]:
    """argparse type: a number in ``bound``; else ``ArgumentTypeError`` (argparse prints
    ``argument --replicas: must be an integer >= 1 and <= 1024, not 5000``, status 2). NaN and inf are
    refused where a finite number is needed (a NaN compares false everywhere and would pass a later
    check). The parser keeps the bound as ``.bound`` (a test walks every flag for one)."""

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if bound.integer or bound.values else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {bound.describe()}, not {text!r}") from None
        if not bound.holds(value):
            raise argparse.ArgumentTypeError(f"must be {bound.describe()}, not {text.strip()}")
        return value

    parse.__name__ = "int" if bound.integer or bound.values else "float"
    vars(parse)["bound"] = bound  # a function attribute (mypy types none on a def)
    return parse


def flag_list(bound: Bound) -> Callable[[str], list[Any]]:
    """argparse type: comma-separated numbers, each as ``flag(bound)`` reads one (``plan --gpus 1,2,4``); the
    same argparse error, naming the first value out of ``bound``. Keeps ``.bound`` like ``flag``."""
    one = flag(bound)

    def parse(text: str) -> list[Any]:
        return [one(part) for part in text.split(",")]

    parse.__name__ = f"{one.__name__} list"
    vars(parse)["bound"] = bound  # a function attribute (mypy types none on a def)
    return parse


def int_list(text: str, field: str, bound: Bound = bounds.SEED) -> list[int]:
    """``"1,2,3"`` as integers in ``bound``; anything else is a ``ConfigError`` naming ``field``."""
    try:
        values = [int(s) for s in text.split(",")]
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, not {text!r}") from None
    for v in values:
        if not bound.holds(v):
            raise ConfigError(field, f"each value must be {bound.describe()}, not {v}")
    return values


def number_list(text: str, field: str, bound: Bound = bounds.SCALE) -> list[float]:
    """``"0.5,1"`` as numbers in ``bound``; anything else is a ``ConfigError`` naming ``field`` (as the CLI
    says a flag's error, not ``invalid request field '--loads'``)."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ConfigError(field, f"expected comma-separated numbers, not {text!r}") from None
        if not bound.holds(value):
            raise ConfigError(field, f"each value must be {bound.describe()}, not {part.strip()}")
        values.append(value)
    return values


def distinct(values: list[Any], field: str) -> list[Any]:
    """``values`` when none repeats; a repeated one is a ``ConfigError`` naming ``field`` (a grid ran it
    twice and reported the repeats as agreement: ``± 0.0`` over one seed given twice)."""
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        raise ConfigError(field, f"{seen[0]!r} is given twice; each value once")
    return values


seed_arg = flag(bounds.SEED)
"""argparse type of a seed: numpy's generators take integers >= 0 only."""
