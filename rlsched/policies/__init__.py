"""Scheduling policies behind one protocol, built by name with ``make_policy``."""

from rlsched.policies.base import SchedulingPolicy, make_policy, policy_names, register

__all__ = ["SchedulingPolicy", "make_policy", "policy_names", "register"]
