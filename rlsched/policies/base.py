"""The ``SchedulingPolicy`` protocol, the policy-spec grammar and a lazy registry.

A policy is named on the CLI, in YAML and in the plugin's config by a spec::

    NAME[:ARG][;KEY=VALUE]...      e.g. fifo · drr:5 · static:agents/tuned/default.json;shed_lost=true
                                        pick:checkpoints/pick;static=agents/tuned/default.json

``parse_spec`` is the one parser of that grammar. The registry maps a name to an entry
point ``"module:factory"`` (as Gymnasium registers environments), imported only when a
policy of that name is built: the policy layer does not import the learned policies,
and building ``fifo`` imports no checkpoint code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from rlsched.errors import ConfigError
from rlsched.resources import portable
from rlsched.sim.view import Decision as Decision  # the seam is declared in rlsched.sim.view; re-exported here
from rlsched.sim.view import SchedulingPolicy as SchedulingPolicy


@dataclass(frozen=True)
class PolicySpec:
    """A parsed ``NAME[:ARG][;KEY=VALUE]...``."""

    name: str
    arg: str = ""
    """Everything between ``:`` and the first ``;`` (a path, a number), stripped."""
    options: Mapping[str, str] = field(default_factory=dict)
    """``KEY=VALUE`` pairs in order; keys are unique."""

    def __str__(self) -> str:
        text = f"{self.name}:{self.arg}" if self.arg else self.name
        return text + "".join(f";{k}={v}" for k, v in self.options.items())


def split_options(text: str, where: str = "policy") -> tuple[str, dict[str, str]]:
    """``ARG;KEY=VALUE;...`` → (ARG, {KEY: VALUE}); a key twice or a pair without ``=`` is an error."""
    arg, *pairs = text.split(";")
    options: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(f"{where} option {pair!r}", "expected KEY=VALUE")
        if key in options:
            raise ConfigError(f"{where} option {key!r}", "given twice")
        options[key] = value.strip()
    return arg.strip(), options


def parse_spec(spec: str) -> PolicySpec:
    """The one parser of policy specs (see the module docstring)."""
    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    if ";" in name:  # "fifo;x=1": options without an argument
        name, _, opts = name.partition(";")
        rest = ";" + opts + rest
    if not name:
        raise ConfigError("policy", f"empty policy name in {spec!r}")
    arg, options = split_options(rest, f"policy {name!r}")
    return PolicySpec(name.strip(), arg, options)


def portable_spec(spec: str) -> str:
    """``spec`` with the files it names (its argument, an option's value) as a process started in any
    folder reads them (``rlsched.resources.portable``): what ``deploy`` and ``plan`` write for a server."""
    parsed = parse_spec(spec)
    moved = replace(parsed, arg=portable(parsed.arg), options={k: portable(v) for k, v in parsed.options.items()})
    return spec if moved == parsed else str(moved)


Factory = Callable[[PolicySpec], SchedulingPolicy]
T = TypeVar("T")

ENTRY_POINTS: dict[str, str] = {
    "fifo": "rlsched.policies.baselines:fifo",
    "sjf": "rlsched.policies.baselines:sjf",
    "edf": "rlsched.policies.baselines:edf",
    "priority": "rlsched.policies.baselines:strict_priority",
    "drr": "rlsched.policies.baselines:drr",
    "seed-memory": "rlsched.policies.seed:seed_memory",
    "seed-priority": "rlsched.policies.seed:seed_priority",
    "seed-composite": "rlsched.policies.seed:seed_composite",
    "static": "rlsched.policies.static:static_policy",
    "lookahead": "rlsched.policies.lookahead:lookahead",
    "hindsight": "rlsched.policies.lookahead:hindsight",
    "rl": "rlsched.learned.knob:knob_policy",
    "pick": "rlsched.learned.pick:pick_from_spec",
}
"""Built-in policies: name → ``"module:factory"``, each factory ``f(PolicySpec) -> policy``."""

POLICY_KINDS: dict[str, str] = {
    "fifo": "heuristic",
    "sjf": "heuristic",
    "edf": "heuristic",
    "priority": "heuristic",
    "drr": "heuristic",
    "seed-memory": "seed",
    "seed-priority": "seed",
    "seed-composite": "seed",
    "static": "tuned",
    "lookahead": "teacher",
    "hindsight": "teacher",
    "pick": "learned",
    "rl": "learned",
}
"""Each policy's kind, which reports ask instead of matching names: ``heuristic`` (the plain ones a
user could switch on without rlsched), ``seed`` (the seed design's heuristics), ``tuned`` (a fixed
action tuned offline), ``teacher`` (simulates forks: a ceiling, offline only), ``learned``. Within a
kind, earlier entries come first in a report's headline (the candidate ``pick`` before the knob ``rl``)."""

_REGISTRY: dict[str, str | Factory] = dict(ENTRY_POINTS)


def register(name: str, factory: str | Factory, kind: str = "other") -> None:
    """Add a policy under ``name``: an entry point ``"module:factory"`` or a factory ``f(PolicySpec)``,
    of ``kind`` (``POLICY_KINDS``; ``other``: none the reports single out)."""
    _REGISTRY[name] = factory
    POLICY_KINDS[name] = kind


def policy_kind(name: str) -> str:
    """The kind of the policy named ``name`` (``POLICY_KINDS``); ``other`` for a name it lacks."""
    return POLICY_KINDS.get(name, "other")


def policy_names() -> list[str]:
    return sorted(_REGISTRY)


CALIBRATE = "calibrate"
"""The option every policy takes: ``calibrate=on`` (the default) decides on the cost profile refitted
online from what the GPU takes (``rlsched.sim.online``), ``calibrate=off`` on the profile as shipped."""


def calibrates(spec: str | PolicySpec) -> bool:
    """Whether ``spec``'s ``calibrate`` option is on (the default); ``ConfigError`` for a value other than
    on or off."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    value = parsed.options.get(CALIBRATE, "on")
    if value not in ("on", "off"):
        raise ConfigError(f"policy {parsed.name!r} option {CALIBRATE}", f"{value!r}: on or off")
    return value == "on"


def make_policy(spec: str | PolicySpec) -> SchedulingPolicy:
    """Build a policy from its spec (e.g. ``fifo``, ``rl:checkpoints/default``); the ``calibrate`` option is
    the state's to read (``calibrates``), not the policy's."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    if CALIBRATE in parsed.options:
        calibrates(parsed)
        parsed = replace(parsed, options={k: v for k, v in parsed.options.items() if k != CALIBRATE})
    factory = _REGISTRY.get(parsed.name)
    if factory is None:
        raise ConfigError("policy", f"unknown policy {str(spec)!r} (known: {', '.join(policy_names())})")
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = _REGISTRY[parsed.name] = getattr(importlib.import_module(module), attr)
    return factory(parsed)


def without_arguments(build: Callable[[], T], kind: str = "policy") -> Callable[[PolicySpec], T]:
    """The factory of a ``kind`` (policy, router) that takes neither an argument nor options."""
    def factory(spec: PolicySpec) -> T:
        no_options(spec)
        if spec.arg:
            raise ConfigError(f"{kind} {spec}", f"{spec.name} takes no argument")
        return build()
    return factory


def no_options(spec: PolicySpec) -> None:
    """Raise when ``spec`` carries ``;KEY=VALUE`` options its policy does not take."""
    if spec.options:
        raise ConfigError(f"policy {spec.name!r}", f"takes no options (got {', '.join(spec.options)})")
