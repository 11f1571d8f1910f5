"""Subcommands; each module registers itself with ``rlsched.cli.command``."""

from rlsched.commands import bench, simulate  # noqa: F401
