"""A scenario's priority classes: names of its own, each with a share, an SLO scale, a weight and a tier.

The three shipped classes (``realtime``, ``batch``, ``background``, weighted 3:2:1) are the
default. A scenario may name 1 to ``MAX_CLASSES`` classes of its own instead (``paid``, ``free``,
``bulk``...); then

* the weighted SLO attainment weights each class by its ``weight``, and every table, metric and
  plot reports each class under its name;
* heuristics read the class's weight directly (``strict-priority`` serves the heaviest first);
* the learned policies, whose observations and actions are laid out over the three shipped classes
  (they were trained on those), read each user class as its ``tier``: the one of ``realtime``,
  ``batch``, ``background`` it declares, or by default the one its weight ranks it into
  (``default_tiers``). ``ClassTable.mapping_note`` says which, for logs and reports.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rlsched import bounds
from rlsched.sim.request import PRIORITY_CLASSES, TIER_WEIGHTS, Request

MAX_CLASSES = 8
"""Most classes one scenario (or the plugin's settings) may name."""
CLASS_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"
"""A class name: a letter, then letters, digits, ``_`` or ``-``, at most 32 in all (a metric label
and a table column as it stands)."""
CLASS_NAME_RULE = "a class name is a letter, then letters, digits, '_' or '-' (at most 32 characters)"

QUOTA = bounds.floats(0, 1, low_open=True)
"""A class's quota: a share of the GPU's time, in (0, 1]."""
QUOTA_WINDOW_S = bounds.floats(0, 86_400, low_open=True)
"""The sliding window the quotas are measured over, in seconds (at most a day)."""
DEFAULT_QUOTA_WINDOW_S = 600.0
"""Long beside a wave (seconds to a minute and a half on the shipped profiles): a class that just started a wave
runs over its quota by about that wave's seconds over the window."""


@dataclass(frozen=True)
class ClassInfo:
    """One class as requests, policies and metrics read it."""

    name: str
    weight: float
    """Value of meeting one of its SLOs in the weighted SLO attainment."""
    tier: str
    """The shipped class the learned policies read it as."""


def default_tiers(weights: Sequence[float]) -> list[str]:
    """Tiers by weight rank: classes sorted by weight (heaviest first, ties in the given order) are cut into
    three runs as even as they come, the heaviest ``realtime``, the lightest ``background`` (four classes:
    realtime, realtime, batch, background; two: realtime, batch; one: realtime)."""
    order = sorted(range(len(weights)), key=lambda i: -weights[i])
    tiers = [""] * len(weights)
    for rank, i in enumerate(order):
        tiers[i] = PRIORITY_CLASSES[rank * len(PRIORITY_CLASSES) // len(weights)]
    return tiers


def default_weight(name: str) -> float:
    """A class's weight when it names none: a shipped class's own (3, 2, 1), else 1."""
    return TIER_WEIGHTS.get(name, 1.0)


def class_table(weights: Mapping[str, float], tiers: Mapping[str, str | None]) -> dict[str, ClassInfo]:
    """Each class's ``ClassInfo``, in the given order: a shipped name is its own tier unless it says
    otherwise; the others declare one or take the default by weight rank (``default_tiers``)."""
    names = list(weights)
    ranked = default_tiers([weights[c] for c in names])
    return {c: ClassInfo(c, float(weights[c]), tiers.get(c) or (c if c in TIER_WEIGHTS else ranked[i]))
            for i, c in enumerate(names)}


SHIPPED = class_table(TIER_WEIGHTS, {})
"""The default table: the three shipped classes, weighted 3:2:1, each its own tier."""


def is_shipped(table: Mapping[str, ClassInfo]) -> bool:
    """Whether ``table`` is the three shipped classes as shipped (nothing to map)."""
    return all(c in SHIPPED and SHIPPED[c] == info for c, info in table.items())


def mapping_note(table: Mapping[str, ClassInfo]) -> str:
    """One line saying how a learned policy reads these classes (``""`` for the shipped ones)."""
    if is_shipped(table):
        return ""
    pairs = ", ".join(f"{c} as {info.tier}" for c, info in table.items())
    return (f"the policies trained or tuned on realtime/batch/background (static, seed-*, the learned ones) read the "
            f"classes {pairs}; the others read each class's weight directly")


def report_names(table: Mapping[str, ClassInfo]) -> list[str] | None:
    """The classes a report of a scenario with ``table`` lists: its own, in file order; ``None`` (the
    shipped three, ``names_of``) when every name is a shipped one."""
    return None if all(c in TIER_WEIGHTS for c in table) else list(table)


def names_of(recs: Iterable[Request]) -> list[str]:
    """The class names of ``recs`` in the order a report lists them: the shipped three (always, as
    every shipped table has them) when every class is a shipped one, else heaviest first, then by
    first appearance."""
    seen: dict[str, float] = {}
    for r in recs:
        seen.setdefault(r.priority, r.weight)
    if all(c in TIER_WEIGHTS for c in seen):
        return list(PRIORITY_CLASSES)
    order = list(seen)
    return sorted(order, key=lambda c: (-seen[c], order.index(c)))


def weights_of(recs: Iterable[Request]) -> dict[str, float]:
    """Each class's weight as its requests carry it (the shipped weights for the shipped names)."""
    out: dict[str, float] = {}
    for r in recs:
        out.setdefault(r.priority, r.weight)
    return out


def print_note(table: Mapping[str, ClassInfo]) -> None:
    """``mapping_note`` as an ``rlsched: note:`` line on stderr (nothing for the shipped classes)."""
    note = mapping_note(table)
    if note:
        print(f"rlsched: note: {note}", file=sys.stderr)
