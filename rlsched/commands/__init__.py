"""Subcommands; each module registers itself with ``rlsched.commands.args.command``."""

from rlsched.commands import bench, deploy, evaluate, label, loadgen, plan, profile, simulate, train, tune  # noqa: F401
from rlsched.commands.args import COMMANDS

__all__ = ["COMMANDS"]
