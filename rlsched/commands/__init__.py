"""Subcommands; each module registers itself with ``rlsched.commands.args.command``."""

from rlsched.commands import (  # noqa: F401
    bench,
    deploy,
    evaluate,
    label,
    loadgen,
    plan,
    profile,
    serve_cpu,
    simulate,
    train,
    tune,
)
from rlsched.commands.args import COMMANDS

__all__ = ["COMMANDS"]
