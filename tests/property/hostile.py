"""Hostile values for the property tests, drawn from the table of bounds (``rlsched.bounds``): just
inside, at and just outside each end of a range, and values of the wrong kind."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from rlsched.bounds import Bound

WRONG_KIND = st.one_of(
    st.booleans(), st.none(), st.text(max_size=6), st.sampled_from(["nan", "inf", "-1", "1e400", "0x10", ""]),
    st.sampled_from([math.nan, math.inf, -math.inf, 10**400, -(10**400), 2**63, 2**64]),
    st.lists(st.integers(-3, 3), max_size=2), st.lists(st.lists(st.floats(allow_nan=True), max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
"""Not a number of any bound: booleans, text, non-finite floats, integers past float's range, nested lists."""


def edges(bound: Bound) -> list[Any]:
    """Values just inside, at and just outside each end of ``bound`` (and 0, a subnormal, 1)."""
    if bound.values:
        ends = [*bound.values, min(bound.values) - 1, max(bound.values) + 1, 3, 0]
        return ends + [float(v) for v in bound.values]
    out: list[Any] = [0, 1, 5e-324, -5e-324, 0.5]
    for end in (bound.low, bound.high):
        if not math.isfinite(end):
            out += [1e308, -1e308]
            continue
        if bound.integer:
            out += [int(end) - 1, int(end), int(end) + 1, float(end)]
        else:
            out += [math.nextafter(end, -math.inf), end, math.nextafter(end, math.inf), end * 2 or 1e-9]
    return out


def around(bound: Bound) -> st.SearchStrategy[Any]:
    """A value at or near an end of ``bound``, or of the wrong kind."""
    return st.one_of(st.sampled_from(edges(bound)), WRONG_KIND)
