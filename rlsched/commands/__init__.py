"""Subcommands; each module registers itself with ``rlsched.cli.command``."""

from rlsched.commands import bench, deploy, evaluate, label, loadgen, simulate, train, tune  # noqa: F401
