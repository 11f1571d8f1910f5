"""The report of a grid: the headline and paired tables, labels, results.md and results.json.

What a report singles out (the headline policy, the plain rivals, ceilings, late binding) it asks
of the registries' kinds (``POLICY_KINDS``, ``ROUTER_KINDS``) through a parsed ``StageSpec``,
never by matching a spec's prefix.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlsched.atomic import write_atomic
from rlsched.evaluation.runs import Grid
from rlsched.evaluation.stats import Cell, aggregate, ci95_half_width, flat
from rlsched.policies.base import POLICY_KINDS
from rlsched.routing.spec import ROUTER_KINDS, StageSpec
from rlsched.sim.classes import mapping_note
from rlsched.sim.metrics import json_safe
from rlsched.sim.request import PRIORITY_CLASSES
from rlsched.sim.scenario import load_scenario


def headline(cells: list[Cell], target: str, band: tuple[float, float] = (0.4, 0.8)) -> dict[str, Any]:
    """``target`` vs fifo and vs the best other policy, at loads where fifo attains ``band``
    (fifo: ``fifo``, else ``fifo@round-robin`` — vLLM-Omni's own on a multi-replica stage)."""
    key = "weighted_slo_attainment"
    by = {(c.scenario, c.policy, c.rate_scale): c for c in cells}
    base = "fifo" if any(c.policy == "fifo" for c in cells) else BASELINE_STAGED
    out: dict[str, Any] = {"target": target, "per_scenario": {}}
    if base != "fifo":
        out["baseline"] = base
    ratios_fifo, ratios_best = [], []
    for sc in sorted({c.scenario for c in cells}):
        loads = [c.rate_scale for c in cells if c.scenario == sc and c.policy == base
                 and band[0] <= c.mean["slo_attainment"] <= band[1]]
        rows = []
        for rs in sorted(loads):
            tgt, fifo = by[(sc, target, rs)].mean[key], by[(sc, base, rs)].mean[key]
            others = {c.policy: c.mean[key] for c in cells
                      if c.scenario == sc and c.rate_scale == rs and c.policy not in (target,)}
            best_pol = max((p for p in others if p != base), key=lambda p: others[p], default=base)
            rows.append({"rate_scale": rs, "target": tgt, "fifo": fifo, "best": best_pol,
                         "best_value": others[best_pol], "vs_fifo": tgt / fifo if fifo else math.nan,
                         "vs_best": tgt / others[best_pol] if others[best_pol] else math.nan})
            ratios_fifo.append(rows[-1]["vs_fifo"])
            ratios_best.append(rows[-1]["vs_best"])
        out["per_scenario"][sc] = rows
    out["mean_vs_fifo"] = float(sum(ratios_fifo) / len(ratios_fifo)) if ratios_fifo else math.nan
    out["mean_vs_best"] = float(sum(ratios_best) / len(ratios_best)) if ratios_best else math.nan
    return out



HEADLINE_KINDS = ("learned", "tuned")
"""Policy kinds reported against the heuristics, in headline order (within a kind: registry order)."""
PLAIN_HEURISTICS = tuple(name for name, kind in POLICY_KINDS.items() if kind == "heuristic")
"""The heuristics a user could switch on without rlsched's projection or tuning."""
PLAIN_ROUTERS = tuple(name for name, kind in ROUTER_KINDS.items() if kind == "heuristic")
"""vLLM-Omni's routers and the plain heuristic routers (not rlsched's, not late binding)."""
PREDICTIVE_ROUTER = next(name for name, kind in ROUTER_KINDS.items() if kind == "predictive")
"""rlsched's own router, the twin a late-binding or learned router is paired against."""
BASELINE_STAGED = "fifo@round-robin"
"""vLLM-Omni 0.30 out of the box on a multi-replica stage."""


def is_ceiling(spec: str) -> bool:
    """A router on the replicas' true state (``;view=replica``, or a teacher): a ceiling no deployed router
    reaches (``StageSpec.is_ceiling``)."""
    return StageSpec.parse(spec).is_ceiling


def plain_combinations(policies: list[str]) -> tuple[str, ...]:
    """The ``PLAIN_HEURISTIC@PLAIN_ROUTER`` specs among ``policies`` (what a user could switch on
    without rlsched): the rivals of a multi-replica grid."""
    return tuple(p for p in policies if StageSpec.parse(p).plain)


def headline_target(policies: list[str]) -> str | None:
    """The policy a report heads with: the first of ``HEADLINE_KINDS`` (the learned candidate policy,
    else the learned knob policy, else static), first written among equals."""
    order = list(POLICY_KINDS)

    def rank(spec: str) -> tuple[int, int]:
        name = StageSpec.parse(spec).policy_spec.name
        return HEADLINE_KINDS.index(POLICY_KINDS[name]), order.index(name)

    return min((p for p in policies if StageSpec.parse(p).policy_kind in HEADLINE_KINDS), key=rank, default=None)


def paired(rows: list[dict[str, Any]], target: str, against: tuple[str, ...] = PLAIN_HEURISTICS,
           key: str = "weighted_slo_attainment") -> list[dict[str, Any]]:
    """``target`` against the best of ``against`` at every (scenario, load), paired by seed.

    The best is the policy of ``against`` with the highest mean in that cell; the
    interval is the 95 % t-interval of the per-seed differences (target − best), which
    removes the workload's own variance (seeds differ far more than policies do).
    """
    import numpy as np

    value: dict[tuple[str, float, str], dict[int, float]] = {}
    for r in rows:
        value.setdefault((r["scenario"], r["rate_scale"], r["policy"]), {})[r["seed"]] = flat(r, key)
    out = []
    for sc, rs in sorted({(r["scenario"], r["rate_scale"]) for r in rows}):
        mine = value.get((sc, rs, target))
        rivals = {p: value[(sc, rs, p)] for p in against if (sc, rs, p) in value}
        if not mine or not rivals:
            continue
        best = max(rivals, key=lambda p: float(np.mean(list(rivals[p].values()))))
        seeds = sorted(set(mine) & set(rivals[best]))
        diff = np.array([mine[s] - rivals[best][s] for s in seeds])
        t_mean, b_mean = float(np.mean([mine[s] for s in seeds])), float(np.mean([rivals[best][s] for s in seeds]))
        out.append({"scenario": sc, "rate_scale": rs, "target": t_mean, "best": best, "best_value": b_mean,
                    "ratio": t_mean / b_mean if b_mean else math.nan, "diff": float(diff.mean()),
                    "diff_ci95": ci95_half_width(diff), "seeds": len(seeds)})
    return out


def worst_vs_any(cells: list[Cell], target: str,
                 rival: Callable[[str], bool] = lambda policy: True) -> dict[str, Any]:
    """The cell where ``target`` is lowest relative to the best other policy that ``rival``
    accepts (mean over seeds)."""
    key = "weighted_slo_attainment"
    worst: dict[str, Any] = {}
    for c in cells:
        if c.policy != target:
            continue
        rivals = [o for o in cells if o.scenario == c.scenario and o.rate_scale == c.rate_scale
                  and o.policy != target and rival(o.policy)]
        best = max(rivals, key=lambda o: o.mean[key], default=None)
        if best is None or not best.mean[key]:
            continue
        ratio = c.mean[key] / best.mean[key]
        if not worst or ratio < worst["ratio"]:
            worst = {"scenario": c.scenario, "rate_scale": c.rate_scale, "ratio": ratio, "best": best.policy}
    return worst


REPORT_FILES = ("results.json", "results.md", "slo_vs_load.png", "latency_cdf.png", "batch_sizes.png")
"""What ``write_report`` writes into its folder (``rlsched eval`` checks each before the first run)."""

def write_report(grid: Grid, out: Path, flag: str | None = "--out") -> dict[str, Any]:
    """results.md, results.json and plots under ``out`` (``REPORT_FILES``); returns the JSON summary."""
    from rlsched.evaluation.plots import PLOTS_NEED, available, draw

    out.mkdir(parents=True, exist_ok=True)
    cells = aggregate(grid.rows)
    names = list(dict.fromkeys(c.policy for c in cells))
    stages = {p: StageSpec.parse(p) for p in names}
    target = headline_target(names)
    summary: dict[str, Any] = {
        "cells": [dataclasses.asdict(c) for c in cells],
        "seeds": sorted({r["seed"] for r in grid.rows}),
    }
    staged = any(s.routed for s in stages.values())
    if target:
        summary["headline"] = headline(cells, target)
        rivals = plain_combinations(names) if staged else PLAIN_HEURISTICS
        if staged:
            summary["plain"] = list(rivals)
            # every rival a user can deploy: a router on the replicas' true state (view=replica) is a ceiling
            summary["worst_vs_any"] = worst_vs_any(cells, target, lambda p: not stages[p].is_ceiling)
            summary["worst_vs_early"] = worst_vs_any(cells, target, lambda p: not stages[p].late
                                                     and not stages[p].is_ceiling)
            # the default (deployed) view against the same spec on another view: what the router gives up to
            # the replicas' true state (view=replica), what the replicas' published states add over the ledger
            summary["views"] = {p: paired(grid.rows, s.on_default_view, (p,)) for p, s in stages.items()
                                if s.on_default_view != p and s.on_default_view in names}
            # late vs early binding: each POLICY@central against the same policy behind rlsched's router
            summary["late_vs_early"] = {p: paired(grid.rows, p, (s.behind(PREDICTIVE_ROUTER),))
                                        for p, s in stages.items()
                                        if s.late and s.behind(PREDICTIVE_ROUTER) in names}
            # the learned router against rlsched's router behind the same replica policy (issue 20)
            learned = {p: s.behind(PREDICTIVE_ROUTER) for p, s in stages.items() if s.router_kind == "learned"}
            summary["router_vs_rlsched"] = {p: paired(grid.rows, p, (twin,)) for p, twin in learned.items()
                                            if twin in names}
        summary["paired"] = {p: paired(grid.rows, p, rivals) for p, s in stages.items()
                             if s.policy_kind in HEADLINE_KINDS}
        static = [p for p, s in stages.items() if s.policy_kind == "tuned"]
        summary["paired_vs_static"] = {p: paired(grid.rows, p, tuple(static)) for p, s in stages.items()
                                       if s.policy_kind == "learned" and static}
    write_atomic(out / "results.json", json.dumps(json_safe(summary), indent=1), flag)
    shown = labels(names)
    write_atomic(out / "results.md", _markdown(cells, summary.get("headline"), shown, summary.get("worst_vs_any"))
                 + _paired_markdown(summary, shown) + _classes_markdown(cells, grid.rows, shown), flag)
    if available():
        draw(grid, cells, out, shown)
    else:
        print(f"rlsched: note: no plots: {PLOTS_NEED}", file=sys.stderr)
    return summary


def label(policy: str) -> str:
    """Short display name: ``static:agents/tuned/{scenario}.json`` → ``static (tuned)``."""
    stage = StageSpec.parse(policy)
    if stage.routed:
        return f"{label(stage.policy)}@{stage.router}"
    name, _, arg = policy.partition(":")
    if name == "static" and arg:
        return "static (tuned)"
    if name == "rl":
        return f"rl ({Path(arg).name})" if arg else "rl (default)"
    if name == "pick":
        return f"pick ({Path(arg.split(';')[0]).name or 'default'})"
    return policy


_SEPARATORS = re.compile(r"([/:;=,.])")


def labels(policies: list[str]) -> dict[str, str]:
    """Display name of every spec in ``policies``, each one distinct.

    A spec keeps its short ``label`` when no other spec shares it; specs that would share
    one get the part of the spec where they differ added, e.g. ``static:agents/tuned/default.json``
    and ``static:agents/tuned/bursty.json`` → ``static (tuned: default)``, ``static (tuned: bursty)``."""
    specs = list(dict.fromkeys(policies))
    groups: dict[str, list[str]] = {}
    for spec in specs:
        groups.setdefault(label(spec), []).append(spec)
    out: dict[str, str] = {}
    for short, group in groups.items():
        if len(group) == 1:
            out[group[0]] = short
            continue
        for spec, part in zip(group, _differing_parts(group)):
            out[spec] = f"{short[:-1]}: {part})" if short.endswith(")") else f"{short} ({part})"
    taken = list(out.values())
    # a disambiguated name that met another spec's name: those specs are shown as written
    return {spec: spec if taken.count(name) > 1 else name for spec, name in out.items()}


def _differing_parts(specs: list[str]) -> list[str]:
    """Per spec, what remains once the separator-delimited head and tail all ``specs`` share are
    cut off (the whole spec where nothing remains)."""
    tokens = [_SEPARATORS.split(s) for s in specs]
    shortest = min(len(t) for t in tokens)
    head = 0
    while head < shortest and len({t[head] for t in tokens}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({t[-1 - tail] for t in tokens}) == 1:
        tail += 1
    parts = ["".join(t[head:len(t) - tail]).strip("/:;=,.") for t in tokens]
    return [part or spec for part, spec in zip(parts, specs)]


def _pm(cell: Cell, key: str, pct: bool = True) -> str:
    m, ci = cell.mean[key], cell.ci95[key]
    if math.isnan(m):
        return "-"
    scale = 100 if pct else 1
    half = "" if math.isnan(ci) else f" ± {scale * ci:.1f}"
    return f"{scale * m:.1f}{half}"


def _markdown(cells: list[Cell], head: dict[str, Any] | None, shown: dict[str, str],
              worst: dict[str, Any] | None = None) -> str:
    """``shown``: each policy spec's display name (``labels``); ``worst``: ``worst_vs_any``."""
    lines = ["Class-weighted SLO attainment (%), mean ± 95 % interval over seeds.", ""]
    for sc in sorted({c.scenario for c in cells}):
        loads = sorted({c.rate_scale for c in cells if c.scenario == sc})
        lines += [f"### {sc}", "", "| policy | " + " | ".join(f"load ×{x:g}" for x in loads) + " |",
                  "|---|" + "---|" * len(loads)]
        for pol in dict.fromkeys(c.policy for c in cells):
            row = {c.rate_scale: c for c in cells if c.scenario == sc and c.policy == pol}
            lines.append(f"| {shown[pol]} | " + " | ".join(_pm(row[x], "weighted_slo_attainment") for x in loads)
                         + " |")
        lines.append("")
    if head and not any(head["per_scenario"].values()):  # no ratio to show: a sentence, not a table of ×nan
        lines += [f"### {shown[head['target']]} at loads where {head.get('baseline') or 'FIFO'} meets 40–80 % of "
                  "SLOs", "", f"No load here has {head.get('baseline') or 'FIFO'} meeting 40–80 % of SLOs, so there "
                  "is no headline ratio; add loads (--loads) where it does.", ""]
    elif head:
        base = head.get("baseline")
        lines += [f"### {shown[head['target']]} at loads where {base or 'FIFO'} meets 40–80 % of SLOs", "",
                  f"| scenario | load | target | {base or 'fifo'} | best other | ×{base or 'fifo'} | ×best |",
                  "|---|---|---|---|---|---|---|"]
        for sc, rows in head["per_scenario"].items():
            for r in rows:
                lines.append(f"| {sc} | ×{r['rate_scale']:g} | {100 * r['target']:.1f} | {100 * r['fifo']:.1f} | "
                             f"{shown[r['best']]} {100 * r['best_value']:.1f} | {r['vs_fifo']:.2f} | "
                             f"{r['vs_best']:.2f} |")
        lines += ["", f"Mean ratio: ×{head['mean_vs_fifo']:.2f} vs {base or 'fifo'}, "
                      f"×{head['mean_vs_best']:.2f} vs the best other policy.", ""]
    if worst:
        lines += [f"Lowest ratio of {shown[head['target']]} to the best other policy in any cell: "
                  f"×{worst['ratio']:.3f} ({worst['scenario']} ×{worst['rate_scale']:g}, vs {shown[worst['best']]}).",
                  ""]
    return "\n".join(lines)


def _classes_markdown(cells: list[Cell], rows: list[dict[str, Any]], shown: dict[str, str]) -> str:
    """Per scenario of classes of its own: each class's SLO attainment under its name, per policy and load,
    and how the policies that read the shipped tiers read these classes (``mapping_note``). Nothing for
    the shipped classes (their three columns are in results.json)."""
    own: dict[str, list[str]] = {}
    for row in rows:
        names = list(row.get("per_class", {}))
        if names and names != list(PRIORITY_CLASSES):
            own.setdefault(row["scenario"], names)
    lines: list[str] = []
    for sc, names in own.items():
        mine = [c for c in cells if c.scenario == sc]
        lines += ["", f"### {sc}: SLO attainment (%) per class", "",
                  "| policy | load | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        lines += [f"| {shown[c.policy]} | ×{c.rate_scale:g} | "
                  + " | ".join(_pm(c, f"per_class.{n}.slo_attainment") for n in names) + " |" for c in mine]
        note = mapping_note(load_scenario(sc).class_table)
        lines += ["", f"Note: {note}."] if note else []
    return "\n".join(lines) + "\n" if lines else ""


def _paired_markdown(summary: dict[str, Any], shown: dict[str, str]) -> str:
    """Every load: each projection policy ÷ the best plain heuristic (and each learned policy ÷
    the tuned ``static``), with the paired difference."""
    lines = []
    plain = (f"the best plain router × heuristic ({', '.join(shown[p] for p in summary['plain'])})"
             if "plain" in summary else f"the best plain heuristic ({', '.join(PLAIN_HEURISTICS)})")
    tables = [(pol, rows, plain) for pol, rows in summary.get("paired", {}).items()]
    statics = [name for spec, name in shown.items() if StageSpec.parse(spec).policy_kind == "tuned"]
    vs_static = ("static (tuned), the strengthened heuristic" if len(statics) < 2
                 else f"the best of {', '.join(statics)}, the strengthened heuristic")
    tables += [(pol, rows, vs_static) for pol, rows in summary.get("paired_vs_static", {}).items()]
    for pol, rows, rival in tables:
        if not rows:
            continue
        lines += [f"### {shown[pol]} vs {rival}, every load", "",
                  "Paired by seed: difference in points, mean ± 95 % interval of the per-seed differences.", "",
                  "| scenario | load | policy | rival | ratio | difference (points) |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            ci = "" if math.isnan(r["diff_ci95"]) else f" ± {100 * r['diff_ci95']:.1f}"
            mark = "**" if r["ratio"] < 0.98 else ""
            lines.append(f"| {r['scenario']} | ×{r['rate_scale']:g} | {100 * r['target']:.1f} | "
                         f"{shown[r['best']]} {100 * r['best_value']:.1f} | {mark}{r['ratio']:.3f}{mark} | "
                         f"{100 * r['diff']:+.1f}{ci} |")
        ratios = [r["ratio"] for r in rows]
        lines += ["", f"Lowest ratio ×{min(ratios):.3f}; mean ×{sum(ratios) / len(ratios):.2f} over {len(rows)} cells "
                  "(bold: below ×0.98).",
                  ""]
    return "\n".join(lines)

