"""One fixed look per policy, by name, in every plot rlsched writes.

A reader looks first for vLLM-Omni's behaviour (``fifo``: always the same neutral grey,
dashed, ``x`` markers) and for the product's policies (``static``, ``rl``, ``pick``:
saturated colours, thick solid lines, their own markers). Plain heuristics share a blue
family, the seed heuristics a green one, the look-ahead teachers a purple, dotted one.
Styles follow the policy's *name* (``static:agents/tuned/x.json`` is ``static``), never
the order of ``--policies``, so a policy looks the same in every plot and run.

``styles_for`` gives every spec of one plot a distinct (colour, marker, line style),
however many there are: two specs of one name (two tuned files) keep the family colour
and differ in marker and line style; names outside the table get colours from a fixed
20-colour list by a stable hash, then markers and line styles until no two collide.
Plain data, no matplotlib import (``Style.line()`` gives the keyword arguments).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, replace

LineStyle = str | tuple[int, tuple[int, ...]]
"""A matplotlib line style: a name (``"--"``) or an (offset, (on, off, ...)) dash pattern."""


@dataclass(frozen=True)
class Style:
    color: str
    marker: str
    linestyle: LineStyle = "-"
    linewidth: float = 1.4
    zorder: int = 2

    def line(self) -> dict[str, object]:
        """Keyword arguments of ``plot``/``errorbar``/``step``."""
        return {"color": self.color, "marker": self.marker, "linestyle": self.linestyle,
                "linewidth": self.linewidth, "zorder": self.zorder}

    @property
    def key(self) -> tuple[str, str, object]:
        """What tells two series apart in the image."""
        return (self.color, self.marker, self.linestyle)


FIFO = Style("#555555", "x", "--", 1.8, 3)
"""vLLM-Omni 0.30's own scheduler: the baseline every reader looks for."""

TABLE: dict[str, Style] = {
    "fifo": FIFO,
    # plain heuristics: blues
    "sjf": Style("#6baed6", "v"),
    "edf": Style("#2171b5", "^"),
    "priority": Style("#9ecae1", "<"),
    "drr": Style("#08519c", ">"),
    # seed heuristics: greens
    "seed-memory": Style("#74c476", "p"),
    "seed-priority": Style("#31a354", "h"),
    "seed-composite": Style("#006d2c", "8"),
    # the product: emphasised
    # static is drawn widest and beneath: where a learned policy ties it, an orange band shows
    "static": Style("#e6550d", "D", "-", 3.6, 3),
    "rl": Style("#d62728", "s", "-", 1.8, 5),
    "pick": Style("#7b2cbf", "*", "-", 1.8, 6),
    # teachers: purple, dotted
    "lookahead": Style("#9e9ac8", "P", ":", 1.6, 3),
    "hindsight": Style("#54278f", "X", ":", 1.6, 3),
}
"""The fixed style of every built-in policy name."""

PALETTE = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
           "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
           "#bcbd22", "#dbdb8d", "#17becf", "#9edae5")
"""Colours of names outside ``TABLE`` (matplotlib's tab20), chosen by a stable hash of the name."""
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "p", "h", "8", "d")
LINESTYLES = ("-", "--", "-.", ":")


def name_of(spec: str) -> str:
    """The policy name of a spec (``static:agents/tuned/x.json;k=v`` → ``static``;
    ``fifo@round-robin`` → ``fifo``)."""
    return spec.split("@", 1)[0].split(":", 1)[0].split(";", 1)[0].strip()


ROUTERS: dict[str, tuple[str, LineStyle]] = {
    "round-robin": ("x", "--"),
    "random": ("+", "-."),
    "least-queue": ("o", ":"),
    "least-work": ("s", "-"),
    "affinity": ("^", (0, (5, 1, 1, 1))),
    "rlsched": ("D", "-"),
    "central": ("*", (0, (1, 1))),
    "router": ("h", (0, (3, 1))),  # the learned router
}
"""``POLICY@ROUTER``: the policy keeps its colour, the router sets marker and line style
(vLLM-Omni's round-robin dashed, as ``fifo`` is; late binding densely dotted)."""


def style_of(spec: str) -> Style:
    """The fixed style of ``spec``'s policy name (a hashed colour outside the table); for
    ``POLICY@ROUTER``, the router's marker and line style (``ROUTERS``)."""
    name = name_of(spec)
    if name in TABLE:
        base = TABLE[name]
    else:
        h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
        base = Style(PALETTE[h % len(PALETTE)], MARKERS[h // len(PALETTE) % len(MARKERS)])
    router = spec.rpartition("@")[2] if "@" in spec else ""
    if router.split(":", 1)[0] in ROUTERS:
        marker, linestyle = ROUTERS[router.split(":", 1)[0]]
        width = base.linewidth if name == "static" and router in ("rlsched", "central") else min(base.linewidth, 1.8)
        return replace(base, marker=marker, linestyle=linestyle, linewidth=width)
    return base


def styles_for(specs: Iterable[str]) -> dict[str, Style]:
    """A distinct style for every spec, each as close to its fixed style as the others allow:
    the colour is kept, then marker and line style move until nothing collides."""
    out: dict[str, Style] = {}
    used: set[tuple[str, str, object]] = set()
    for spec in dict.fromkeys(specs):
        base = style_of(spec)
        markers = (base.marker, *(m for m in MARKERS if m != base.marker))
        lines = (base.linestyle, *(ls for ls in LINESTYLES if ls != base.linestyle))
        options = (replace(base, marker=m, linestyle=ls) for ls, m in itertools.product(lines, markers))
        others = (replace(base, color=c, marker=m, linestyle=ls)  # past 56 specs of one name: other colours
                  for c, ls, m in itertools.product(PALETTE, LINESTYLES, MARKERS))
        style = next(s for s in itertools.chain(options, others) if s.key not in used)
        used.add(style.key)
        out[spec] = style
    return out


__all__ = ["FIFO", "ROUTERS", "TABLE", "Style", "name_of", "style_of", "styles_for"]
