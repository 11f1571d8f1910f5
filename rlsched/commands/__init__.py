"""Subcommands; each module registers itself with ``rlsched.cli.command``."""

from rlsched.commands import bench, deploy, evaluate, label, loadgen, profile, simulate, train, tune  # noqa: F401
