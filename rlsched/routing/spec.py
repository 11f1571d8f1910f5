"""A stage spec, ``POLICY[@ROUTER][;view=V]``: its grammar and the router names it knows.

``StageSpec.parse`` is the one parser of the string (the split rule: what follows the last ``@`` is
a router unless it is a path); everything past the command line and the recipe files passes the
parsed ``StageSpec``. The router registries live here as names (``"module:factory"``, imported
lazily by ``rlsched.routing.routers``), so the grammar knows every router without importing one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rlsched.errors import ConfigError
from rlsched.policies.base import PolicySpec, parse_spec, policy_kind

ROUTERS: dict[str, str] = {
    "round-robin": "rlsched.routing.routers:round_robin",
    "random": "rlsched.routing.routers:random_router",
    "least-queue": "rlsched.routing.routers:least_queue",
    "least-work": "rlsched.routing.routers:least_work",
    "affinity": "rlsched.routing.routers:affinity",
    "rlsched": "rlsched.routing.routers:rlsched_router",
    "router": "rlsched.learned.router:learned_router",
}
"""Router name -> ``"module:factory"`` (``f(PolicySpec) -> Router``), lazily imported."""

TEACHERS: dict[str, str] = {
    "lookahead": "rlsched.routing.teachers:lookahead",
    "hindsight": "rlsched.routing.teachers:hindsight",
}
"""Routers that simulate the stage's replica policy on forks (``POLICY@lookahead``): name ->
``"module:factory"`` (``f(PolicySpec, policy spec) -> Router``), lazily imported. Offline only."""

CENTRAL_TEACHERS: dict[str, str] = {
    "central-lookahead": "rlsched.routing.teachers:central_lookahead",
    "central-hindsight": "rlsched.routing.teachers:central_hindsight",
    "central-replay": "rlsched.routing.teachers:central_replay",
}
"""Central policies that simulate the stage on forks (late binding's teachers, ``POLICY@central-lookahead``,
``@central-replay`` and ``@central-hindsight``): name -> ``"module:factory"`` (``f(PolicySpec, policy spec)
-> central policy``), lazily imported. Offline only."""

ROUTER_KINDS: dict[str, str] = {
    "round-robin": "heuristic",
    "random": "heuristic",
    "least-queue": "heuristic",
    "least-work": "heuristic",
    "affinity": "heuristic",
    "rlsched": "predictive",
    "router": "learned",
    "lookahead": "teacher",
    "hindsight": "teacher",
    "central-lookahead": "teacher",
    "central-hindsight": "teacher",
    "central-replay": "teacher",
}
"""Each router's kind, which reports ask instead of matching names: ``heuristic`` (vLLM-Omni's and the
plain routers a user could switch on), ``predictive`` (rlsched's, on the cost model), ``learned``,
``teacher`` (simulates forks of the true state: a ceiling, offline only)."""

VIEW_OPTIONS = ("view", "delay_ms")
"""The router options that choose its information (``make_router``), not the router."""


def router_kind(name: str) -> str:
    """The kind of the router named ``name`` (``ROUTER_KINDS``); ``central`` (late binding) is
    ``central``, a router registered without a kind ``heuristic``."""
    return "central" if name == "central" else ROUTER_KINDS.get(name, "heuristic")


def is_late(router: str) -> bool:
    """``router`` binds late (one central queue): ``central``, or a central teacher (``CENTRAL_TEACHERS``)."""
    return router == "central" or parse_spec(router).name in CENTRAL_TEACHERS


def split_view(spec: PolicySpec) -> tuple[PolicySpec, dict[str, str]]:
    """The view rule: ``spec`` without its view options (``VIEW_OPTIONS``), and those options as given
    (unchecked; ``make_router`` checks them)."""
    options = dict(spec.options)
    given = {k: options.pop(k) for k in VIEW_OPTIONS if k in options}
    return PolicySpec(spec.name, spec.arg, options), given


def _split(spec: str) -> tuple[str, str]:
    """The split rule: ``POLICY@ROUTER`` -> (policy spec, router spec); a bare policy routes ``round-robin``,
    as vLLM-Omni does. ``@`` because policy arguments are paths, which may hold an ``@`` themselves: what
    follows the last ``@`` is a router only when it is not a path (``static:runs/v@2/t.json`` is a bare
    policy; its ``@2/t.json`` was read as a router and the file as ``runs/v``)."""
    policy, at, router = spec.rpartition("@")
    if not at or _a_path(router):
        return spec, "round-robin"
    if not policy or not router:
        raise ConfigError("policy", f"{spec!r}: expected POLICY@ROUTER")
    name = parse_spec(router).name
    if name not in (*ROUTERS, *TEACHERS, *CENTRAL_TEACHERS, "central"):
        hint = f"; a policy whose path holds '@' is given with its router: {spec}@round-robin" if ":" in policy else ""
        raise ConfigError("router", f"unknown router {router!r} in {spec!r} (known: "
                                    f"{', '.join(sorted([*ROUTERS, *TEACHERS]))}, or central for late binding){hint}")
    return policy, router


def _a_path(text: str) -> bool:
    """``text`` (what follows a spec's last ``@``) names a file, not a router: its name (before ``:`` and
    ``;``) has a folder separator or a suffix. Router names are words (``least-work``, ``router:DIR``)."""
    name = text.split(";")[0].split(":")[0]
    return "/" in name or "\\" in name or "." in name


@dataclass(frozen=True)
class StageSpec:
    """A ``POLICY[@ROUTER]`` spec parsed once (the split rule; each part by ``parse_spec``, at its
    first use): the replica policy and its router. A bare policy is routed ``round-robin``, as
    vLLM-Omni does; ``@central`` is late binding (the policy picks for every replica from one queue)."""

    text: str
    """The spec as written (what a report's rows are keyed by)."""
    policy: str
    """The replica policy's spec."""
    router: str
    """The router's spec (``round-robin`` when ``text`` names none)."""
    routed: bool
    """``text`` names its router (``POLICY@ROUTER``)."""

    @classmethod
    def parse(cls, text: str) -> StageSpec:
        """The one parser of a ``POLICY[@ROUTER]`` string (an unknown router is a ``ConfigError``)."""
        policy, router = _split(text)
        return cls(text, policy, router, policy != text)

    @classmethod
    def of(cls, spec: StageSpec | str) -> StageSpec:
        """``spec`` parsed, unless it already is (for callers that still hold the string)."""
        return spec if isinstance(spec, StageSpec) else cls.parse(spec)

    @property
    def late(self) -> bool:
        """Late binding (``@central``, or its teacher ``@central-lookahead``)."""
        return self.routed and is_late(self.router)

    @cached_property
    def policy_spec(self) -> PolicySpec:
        return parse_spec(self.policy)

    @cached_property
    def router_spec(self) -> PolicySpec:
        return parse_spec(self.router)

    @property
    def policy_kind(self) -> str:
        """The replica policy's kind (``rlsched.policies.base.POLICY_KINDS``)."""
        return policy_kind(self.policy_spec.name)

    @property
    def router_kind(self) -> str:
        """The router's kind (``ROUTER_KINDS``; ``central``)."""
        return router_kind(self.router_spec.name)

    @property
    def view(self) -> str | None:
        """The router's ``view`` option as written (None: its default)."""
        return None if self.late else split_view(self.router_spec)[1].get("view")

    @property
    def is_ceiling(self) -> bool:
        """A router on the replicas' true state (``;view=replica``, or a teacher, which decides on
        forks of it): a ceiling no deployed router reaches."""
        return self.routed and (self.view == "replica" or self.router_kind == "teacher")

    @property
    def on_default_view(self) -> str:
        """``POLICY@ROUTER;view=V`` -> ``POLICY@ROUTER`` (the router on its default view)."""
        return f"{self.policy}@{split_view(self.router_spec)[0]}" if self.routed else self.text

    @property
    def plain(self) -> bool:
        """A plain heuristic behind a plain router, both as bare names: what a user could switch on
        without rlsched (``POLICY_KINDS`` / ``ROUTER_KINDS`` ``heuristic``)."""
        return (self.routed and policy_kind(self.policy) == "heuristic"
                and ROUTER_KINDS.get(self.router) == "heuristic")

    def behind(self, router: str) -> str:
        """The same replica policy behind ``router`` (the spec as a report's rows key it)."""
        return f"{self.policy}@{router}"


def split_pair(spec: str) -> tuple[str, str]:
    """``POLICY@ROUTER`` -> (policy spec, router spec), for scripts that still hold the string
    (``StageSpec.parse`` is the parser)."""
    stage = StageSpec.parse(spec)
    return stage.policy, stage.router


__all__ = ["CENTRAL_TEACHERS", "ROUTERS", "ROUTER_KINDS", "TEACHERS", "VIEW_OPTIONS", "StageSpec", "is_late",
           "router_kind", "split_pair", "split_view"]
